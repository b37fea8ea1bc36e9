"""Who is asking, and whether they may: logins, sessions, roles, CSRF tokens, same-origin checks.

Owns the two ways in — a password checked against the users file (``relay.console.users``), which opens
a session, or a reverse proxy's authenticated header (``--auth-header``), trusted only from the proxy's
addresses (``--trusted-proxy``) and only for users the file names — and ``Guard``, the ASGI middleware
every request passes before any page runs:

- ``/static/*``, ``/login`` and ``/favicon.ico`` (none) are the only paths open without an identity; any
  other request without one gets the login page (a redirect; 401 for the JSON API);
- every request that is not GET/HEAD must come from the console's own origin (``Origin`` /
  ``Sec-Fetch-Site``: a cross-site POST is refused before its body is read), carry the identity's CSRF
  token (form field ``csrf`` or header ``X-CSRF-Token``) and, except a logout, the ``operator`` role;
- every answer gets the headers that keep a page to itself (a Content-Security-Policy allowing only the
  console's own scripts and styles, no framing, no sniffing, no caching of pages).

Sessions are kept in memory (a restart logs everyone out), 32 random bytes each, in an HttpOnly,
SameSite=Strict cookie; a session ends after ``SESSION_SECONDS`` or at logout, and at the next request of
a user the users file no longer names. Runs on the event loop (``Guard``) and request threads.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import secrets
import threading
import time
import urllib.parse
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from relay.console.users import User, UsersFile, check_password
from relay.errors import RelayError

log = logging.getLogger(__name__)

__all__ = ["Auth", "Guard", "Identity"]

COOKIE = "relay_console"
SESSION_SECONDS = 8 * 3600
BODY_LIMIT = 4 * 1024 * 1024  # a mapping edit is the largest form
_FAILURES, _LOCKOUT_SECONDS = 5, 60.0
_SAFE = ("GET", "HEAD")
_OPEN = ("/login", "/static/", "/favicon.ico")
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


@dataclass(frozen=True)
class Identity:
    """A logged-in user: their role, the CSRF token their pages carry, and how they came in."""

    name: str
    role: str
    csrf: str
    via: str  # "password" or "header"

    @property
    def operator(self) -> bool:
        return self.role == "operator"


@dataclass
class _Session:
    name: str
    csrf: str
    expires: float


class Auth:
    """The users file and the live sessions; ``header``: the proxy's user header (None: passwords)."""

    def __init__(
        self, users: UsersFile, header: str | None = None, proxies: tuple[str, ...] = ("127.0.0.1", "::1")
    ) -> None:
        self.file, self.header = users, header.lower() if header else None
        self.proxies = tuple(ipaddress.ip_network(p, strict=False) for p in proxies)
        self._users: dict[str, User] = users.load()  # a missing or bad file stops the start (ConsoleError)
        self._stamp = users.stamp()
        self._sessions: dict[str, _Session] = {}
        self._failures: dict[str, list[float]] = {}
        self._secret = secrets.token_bytes(32)
        self._lock = threading.Lock()

    # -- the users file --------------------------------------------------------------------------------
    def users(self) -> dict[str, User]:
        """The users, read again when the file changed (a broken edit keeps the last good ones, logged)."""
        stamp = self.file.stamp()
        if stamp != self._stamp:
            try:
                found = self.file.load()
            except RelayError as exc:
                log.error("users file not reloaded, keeping the previous users: %s", exc)
            else:
                with self._lock:
                    self._users, self._stamp = found, stamp
        return self._users

    # -- passwords and sessions ---------------------------------------------------------------------------
    def login(self, name: str, password: str) -> tuple[str | None, str]:
        """A new session's id for a right password (None and why not otherwise: the same words for a
        wrong name and a wrong password)."""
        now = time.monotonic()
        with self._lock:
            recent = [t for t in self._failures.get(name, []) if now - t < _LOCKOUT_SECONDS]
            self._failures[name] = recent
        if len(recent) >= _FAILURES:
            return None, f"too many failed logins for this user: try again in {_LOCKOUT_SECONDS:.0f} s"
        user = self.users().get(name)
        if not check_password(password, user.password if user else "") or user is None:
            with self._lock:
                self._failures.setdefault(name, []).append(now)
            log.warning("console: failed login for user %r", name)
            return None, "wrong user name or password"
        sid = secrets.token_urlsafe(32)
        with self._lock:
            self._failures.pop(name, None)
            self._sessions[sid] = _Session(name, secrets.token_urlsafe(32), time.time() + SESSION_SECONDS)
        log.info("console: %s logged in (%s)", name, user.role)
        return sid, ""

    def logout(self, sid: str | None) -> None:
        with self._lock:
            self._sessions.pop(sid or "", None)

    def identify(self, scope: Scope, headers: dict[str, str], cookies: dict[str, str]) -> Identity | None:
        """Who sent this request (None: nobody logged in, or a header from outside the proxy)."""
        if self.header is not None:
            return self._from_header(scope, headers)
        sid = cookies.get(COOKIE)
        if not sid:
            return None
        with self._lock:
            session = self._sessions.get(sid)
            if session is not None and session.expires < time.time():
                del self._sessions[sid]
                session = None
        user = self.users().get(session.name) if session else None
        if session is None or user is None:
            return None
        return Identity(user.name, user.role, session.csrf, "password")

    def _from_header(self, scope: Scope, headers: dict[str, str]) -> Identity | None:
        assert self.header is not None
        name = headers.get(self.header, "").strip()
        client = (scope.get("client") or ("", 0))[0]
        if not name or not self._trusted(client):
            return None
        user = self.users().get(name)
        if user is None:
            return None
        token = hmac.new(self._secret, f"csrf:{name}".encode(), hashlib.sha256).hexdigest()
        return Identity(user.name, user.role, token, "header")

    def _trusted(self, client: str) -> bool:
        try:
            address = ipaddress.ip_address(client)
        except ValueError:
            return False
        return any(address in net for net in self.proxies)


class Guard:
    """The ASGI middleware in front of every page (module docstring)."""

    def __init__(self, app: App, auth: Auth) -> None:
        self.app, self.auth = app, auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        send = _with_headers(send)
        path, method = scope["path"], scope["method"]
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if method not in _SAFE and not same_origin(headers):
            await _refuse(
                send, 403, "cross-site request refused: the console takes changes only from its own pages"
            )
            return
        if path.startswith(_OPEN):
            await self.app(scope, receive, send)
            return
        identity = self.auth.identify(scope, headers, _cookies(headers))
        if identity is None:
            await _to_login(scope, send, path, self.auth.header)
            return
        scope.setdefault("state", {})["identity"] = identity
        if method in _SAFE:
            await self.app(scope, receive, send)
            return
        if path != "/logout" and not identity.operator:
            await _refuse(send, 403, f"{identity.name} has the {identity.role} role: changes need operator")
            return
        body = await _body(receive)
        if body is None:
            await _refuse(send, 413, "request too large")
            return
        token = headers.get("x-csrf-token") or _form_field(headers, body, "csrf")
        if not token or not hmac.compare_digest(token, identity.csrf):
            await _refuse(send, 403, "CSRF token missing or wrong: reload the page and try again")
            return
        await self.app(scope, _replay(body), send)


def same_origin(headers: dict[str, str]) -> bool:
    """Whether a state-changing request comes from the console's own pages: ``Sec-Fetch-Site`` not
    cross-site, and an ``Origin`` (else ``Referer``) naming the host it was sent to."""
    if headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
        return False
    host = headers.get("x-forwarded-host") or headers.get("host", "")
    origin = headers.get("origin") or headers.get("referer")
    if not origin:
        return (
            True  # not a browser's cross-site form (browsers send Origin with every POST): the token decides
        )
    return urllib.parse.urlsplit(origin).netloc == host.split(",")[0].strip()


def _cookies(headers: dict[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in headers.get("cookie", "").split(";"):
        name, eq, value = part.strip().partition("=")
        if eq:
            out[name] = value
    return out


def _form_field(headers: dict[str, str], body: bytes, name: str) -> str:
    if not headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        return ""
    values = urllib.parse.parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True).get(name)
    return values[0] if values else ""


async def _body(receive: Receive) -> bytes | None:
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > BODY_LIMIT:
            return None
        chunks.append(chunk)
        if not message.get("more_body"):
            break
    return b"".join(chunks)


def _replay(body: bytes) -> Receive:
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


def _with_headers(send: Send) -> Send:
    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":
            extra = [
                (b"content-security-policy", CSP.encode()),
                (b"x-content-type-options", b"nosniff"),
                (b"x-frame-options", b"DENY"),
                (b"referrer-policy", b"same-origin"),
            ]
            names = {k.lower() for k, _ in message.get("headers", [])}
            if b"cache-control" not in names:
                extra.append((b"cache-control", b"no-store"))
            message["headers"] = [*message.get("headers", []), *extra]
        await send(message)

    return wrapped


async def _refuse(send: Send, status: int, text: str) -> None:
    body = f"relay console: {text}\n".encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _to_login(scope: Scope, send: Send, path: str, header: str | None) -> None:
    if header is not None:
        await _refuse(
            send, 401, f"not authenticated: the console takes the user from the proxy's {header} header"
        )
        return
    if path.startswith("/api/") or scope["method"] not in _SAFE:
        await _refuse(send, 401, "not logged in")
        return
    query = scope.get("query_string", b"").decode("latin-1")
    target = urllib.parse.quote(path + (f"?{query}" if query else ""), safe="")
    await send(
        {
            "type": "http.response.start",
            "status": 303,
            "headers": [(b"location", f"/login?next={target}".encode()), (b"content-length", b"0")],
        }
    )
    await send({"type": "http.response.body", "body": b""})
