"""The one way this project opens a ZooKeeper session (kazoo), for HA, positions and mapping stores.

``start_client`` connects within a deadline and translates kazoo's failures into
``ZooKeeperUnavailableError`` (retriable); callers that need their own error class catch that one.
``session_timeout`` tells how long the session really lives: the server negotiates the timeout the
client asked for into its own bounds (``minSessionTimeout``/``maxSessionTimeout``), and a leader's lease
must stay below the real value. Runs on the caller's thread; kazoo runs its own connection thread.
"""

from __future__ import annotations

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

from relay.errors import ZooKeeperUnavailableError

ERRORS = (KazooException, KazooTimeoutError)  # what a kazoo call raises when ZooKeeper fails


def start_client(
    hosts: str, *, session_timeout: float, connect_timeout: float, auth: str | None = None
) -> KazooClient:
    """A started client (``auth``: a ``user:password`` digest identity), or ``ZooKeeperUnavailableError``."""
    auth_data = [("digest", auth)] if auth else None
    client = KazooClient(hosts=hosts, timeout=session_timeout, auth_data=auth_data)
    try:
        client.start(timeout=connect_timeout)
    except ERRORS as exc:
        client.close()
        raise ZooKeeperUnavailableError(f"cannot connect to ZooKeeper at {hosts}: {exc!r}") from exc
    return client


def session_timeout(client: KazooClient, requested: float) -> float:
    """Seconds the current session lives without contact: the negotiated timeout, at most ``requested``.

    kazoo keeps the server's answer only in an attribute of its own (``_session_timeout``, ms) and has no
    public accessor; this is the one place that reads it, and it falls back to what was requested.
    """
    negotiated = vars(client).get("_session_timeout")
    if isinstance(negotiated, int) and negotiated > 0:
        return min(requested, negotiated / 1000.0)
    return requested
