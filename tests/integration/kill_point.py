"""``relay run`` that SIGKILLs itself at one step of the commit path: the crash tests' child process.

Usage: ``python -m tests.integration.kill_point POINT NTH -- RELAY-ARGS…`` (``run -c CONFIG``). The relay runs
as ``relay run`` does; the NTH time the publish loop passes POINT, the process writes one line naming it to
stderr and kills itself with SIGKILL (no clean-up of any kind runs: a crash, not a stop). The points, in the
order a transaction passes them (``relay.daemon``):

- ``before-produce``: a batch is taken from the store and encoded, nothing of it produced
  (``BatchPath.send``, before it runs);
- ``after-produce``: the open transaction's records are all delivered, the commit not started
  (``Transactions.commit``, after a flush, before it runs);
- ``after-intent``: transactional mode only — the commit intent is saved, the commit not sent
  (``Transactions._intend``, after it ran);
- ``after-commit``: the transaction committed, its batches not acked, their position not saved by the ack
  (``Transactions.commit``, after it returned True);
- ``after-save``: batches acked and their position saved (``BatchPath.ack_delivered``, after it acked some).

The daemon's rooms are interpreted modules (never compiled: docs/architecture.md, "The compiled hot path"),
so the patched methods are the ones the loop calls.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

from relay.cli.main import main
from relay.daemon.pipeline import BatchPath
from relay.daemon.transactions import Transactions

POINTS = ("before-produce", "after-produce", "after-intent", "after-commit", "after-save")


def die(point: str, count: int) -> None:
    sys.stderr.write(f"KILL POINT {point} reached (pass {count}): SIGKILL\n")
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def arm(point: str, nth: int) -> None:
    passes = 0

    def counted(qualifies: bool) -> None:
        nonlocal passes
        if qualifies:
            passes += 1
            if passes >= nth:
                die(point, passes)

    def wrap(cls: type[Any], name: str, before: bool, qualifies: Callable[[Any, Any], bool]) -> None:
        original = getattr(cls, name)

        @functools.wraps(original)
        def patched(self: Any, *args: Any, **kwargs: Any) -> Any:
            if before:
                counted(qualifies(self, None))
                return original(self, *args, **kwargs)
            result = original(self, *args, **kwargs)
            counted(qualifies(self, result))
            return result

        setattr(cls, name, patched)

    if point == "before-produce":
        wrap(BatchPath, "send", True, lambda _self, _result: True)
    elif point == "after-produce":

        def delivered_first(self: Any, _result: Any) -> bool:
            left = self._publisher.flush(30.0)  # every record of the open transaction delivered
            return left == 0 and self._publisher.failed() is None

        wrap(Transactions, "commit", True, delivered_first)
    elif point == "after-intent":
        wrap(Transactions, "_intend", False, lambda _self, _result: True)
    elif point == "after-commit":
        wrap(Transactions, "commit", False, lambda _self, committed: bool(committed))
    elif point == "after-save":
        wrap(BatchPath, "ack_delivered", False, lambda _self, acked: bool(acked))
    else:
        raise SystemExit(f"unknown kill point {point!r}; choose from {', '.join(POINTS)}")


if __name__ == "__main__":
    point, nth, dashes, *relay_args = sys.argv[1:]
    assert dashes == "--", "usage: kill_point POINT NTH -- RELAY-ARGS…"
    arm(point, int(nth))
    sys.exit(main(relay_args))
