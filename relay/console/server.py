"""``relay console``: putting the console together and serving it until SIGTERM / SIGINT.

Owns the start, in an order that refuses bad input before anything listens, each with one line naming the
option to fix: the users file (``--users``: missing, unreadable, not the format) or the proxy header,
the fleet (``-c``: a bad config; ``--zookeeper``: unreachable), the state folder, then the address
(``--bind`` / ``--port``: taken, or not an address of this host). Only then does it print where it
listens (with ``--port 0``, the port the system chose) and run uvicorn on the bound socket. Runs on the
CLI's main thread; uvicorn runs the event loop there and handles SIGTERM / SIGINT (a graceful stop:
requests under way finish, the sampler and jobs stop).
"""

from __future__ import annotations

import errno
import logging
import signal
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from relay.console.audit import AuditLog
from relay.console.fleet import open_fleet
from relay.console.guard import Auth
from relay.console.jobs import Jobs
from relay.console.samples import Sampler
from relay.console.users import UsersFile
from relay.console.web import Console, environment
from relay.errors import ConsoleError

log = logging.getLogger(__name__)

__all__ = ["ServeOptions", "serve"]


@dataclass(frozen=True)
class ServeOptions:
    configs: list[str] = field(default_factory=list)
    zookeeper: str | None = None
    root: str = "/canal-relay"
    zk_auth: str | None = None
    zk_timeout: float = 10.0
    bind: str = "127.0.0.1"
    port: int = 8080
    users: str = "console-users.yaml"
    auth_header: str | None = None
    trusted_proxies: tuple[str, ...] = ("127.0.0.1", "::1")
    state_dir: str = "var/console"
    sample_seconds: float = 5.0
    history_hours: float = 6.0
    verbose: int = 0


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port``; ``ConsoleError`` naming the option when it cannot be had."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ConsoleError("--bind", f"{host}: not an address of this host ({exc.strerror})") from None
    family, _, _, _, address = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise ConsoleError(
                "--port", f"{host}:{port} is taken (another console?): choose another --port"
            ) from None
        if exc.errno == errno.EACCES:
            raise ConsoleError(
                "--port", f"{host}:{port}: not allowed to listen there (below 1024?)"
            ) from None
        raise ConsoleError("--bind", f"{host}:{port}: cannot listen there: {exc.strerror}") from None
    return sock


def serve(options: ServeOptions) -> int:
    auth = Auth(UsersFile(options.users), options.auth_header, options.trusted_proxies)
    if not auth.users():
        raise ConsoleError(
            "--users", f"{options.users}: names no user (relay console user add NAME --role operator)"
        )
    fleet = open_fleet(options.configs, options.zookeeper, options.root, options.zk_auth, options.zk_timeout)
    try:
        state = Path(options.state_dir)
        try:
            state.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConsoleError("--state-dir", f"{state}: cannot create it: {exc.strerror}") from None
        sock = bind(options.bind, options.port)
        parts = Console(
            fleet,
            Sampler(fleet, options.sample_seconds, options.history_hours),
            auth,
            Jobs(fleet, state / "runs"),
            AuditLog(state / "audit.jsonl"),
            environment(),
        )
        return _run(parts, sock, options)
    finally:
        fleet.close()


def _run(parts: Console, sock: socket.socket, options: ServeOptions) -> int:
    import uvicorn

    from relay.console.app import build_app

    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    how = (
        f"the {options.auth_header} header from {', '.join(options.trusted_proxies)}"
        if options.auth_header
        else "passwords"
    )
    print(f"relay console: serving {parts.fleet.where} on http://{shown}:{port}/", flush=True)
    print(f"relay console: users from {options.users} (login: {how}); Ctrl-C stops it", flush=True)
    if host not in ("127.0.0.1", "::1", "localhost"):
        print(
            "relay console: warning: reachable from other hosts; serve it behind a TLS proxy "
            "(docs/runbook.md, 'The operator console')",
            file=sys.stderr,
            flush=True,
        )
    logging.getLogger("relay.console").setLevel(logging.INFO if options.verbose == 0 else logging.DEBUG)
    config = uvicorn.Config(
        build_app(parts),
        log_config=None,
        access_log=options.verbose > 0,
        lifespan="on",
        server_header=False,
        proxy_headers=False,
        timeout_graceful_shutdown=10,
    )
    server = uvicorn.Server(config)
    # uvicorn stops gracefully on SIGTERM / SIGINT, then raises the signal again to the handler it found:
    # let that be a no-op, so a console stopped that way exits 0 (the CLI's own handler would make it 130)
    previous = {sig: signal.signal(sig, _stopped) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        server.run(sockets=[sock])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sock.close()
    return 0


def _stopped(signum: int, frame: FrameType | None) -> None:
    log.info("relay console: stopped by signal %d", signum)
