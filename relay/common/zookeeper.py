"""The one way this project opens a ZooKeeper session (kazoo), for HA, positions and mapping stores.

``start_client`` connects within a deadline and translates kazoo's failures into
``ZooKeeperUnavailableError`` (retriable); callers that need their own error class catch that one.
``session_timeout`` tells how long the session really lives: the server negotiates the timeout the
client asked for into its own bounds (``minSessionTimeout``/``maxSessionTimeout``), and a leader's lease
must stay below the real value. Runs on the caller's thread; kazoo runs its own connection thread.
"""

from __future__ import annotations

import socket

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

from relay.common.addresses import hosts_problem
from relay.errors import ConfigError, ZooKeeperUnavailableError

ERRORS = (KazooException, KazooTimeoutError)  # what a kazoo call raises when ZooKeeper fails


def check_hosts(hosts: str, setting: str) -> None:
    """``ConfigError`` naming ``setting`` unless ``hosts`` is ``host:port[,host:port...][/chroot]``."""
    problem = hosts_problem(hosts, chroot=True, example="10.0.0.5:2181,10.0.0.6:2181")
    if problem is not None:
        raise ConfigError(setting, problem)


def start_client(
    hosts: str,
    *,
    session_timeout: float,
    connect_timeout: float,
    auth: str | None = None,
    setting: str = "the ZooKeeper hosts",
) -> KazooClient:
    """A started client (``auth``: a ``user:password`` digest identity), or ``ZooKeeperUnavailableError``
    saying why and naming ``setting`` (the key or flag ``hosts`` came from); hosts that are no address
    list are a ``ConfigError`` at once."""
    check_hosts(hosts, setting)
    auth_data = [("digest", auth)] if auth else None
    client = KazooClient(hosts=hosts, timeout=session_timeout, auth_data=auth_data)
    try:
        client.start(timeout=connect_timeout)
    except ERRORS as exc:
        client.close()
        raise ZooKeeperUnavailableError(
            f"ZooKeeper at {hosts} ({setting}) did not answer within {connect_timeout:g} s: "
            f"{_why(hosts, exc)}"
        ) from exc
    return client


def _why(hosts: str, exc: BaseException) -> str:
    """What a plain connection to the first host says (refused, unknown name, nothing): kazoo only says
    it timed out."""
    first = hosts.split("/", 1)[0].split(",", maxsplit=1)[0]
    host, _, port = (
        first.rpartition(":") if first.count(":") == 1 or first.startswith("[") else (first, "", "")
    )
    host = host.strip("[]") or first
    try:
        with socket.create_connection((host, int(port or 2181)), timeout=1.0):
            return "it accepts connections but does not answer as ZooKeeper (a wrong port, or overloaded)"
    except socket.gaierror:
        return f"the name {host!r} does not resolve"
    except ConnectionRefusedError:
        return "connection refused (is it running, and is the address right?)"
    except OSError as err:
        return f"{err.strerror or err} (is it reachable from here?)"
    except ValueError:
        return repr(exc)


def session_timeout(client: KazooClient, requested: float) -> float:
    """Seconds the current session lives without contact: the negotiated timeout, at most ``requested``.

    kazoo keeps the server's answer only in an attribute of its own (``_session_timeout``, ms) and has no
    public accessor; this is the one place that reads it, and it falls back to what was requested.
    """
    negotiated = vars(client).get("_session_timeout")
    if isinstance(negotiated, int) and negotiated > 0:
        return min(requested, negotiated / 1000.0)
    return requested
