"""The console's ASGI application: every page's route, the static files, login, logout and the audit page.

Owns assembling the Starlette app — ``Guard`` (``relay.console.guard``) in front of everything, the pages
of ``pages_fleet``, ``pages_mappings``, ``pages_data`` and ``pages_jobs``, ``/static`` (the package's own
script and style, nothing from elsewhere) — and the pages that are about the console itself: ``/login``
(a form; a right password opens a session), ``/logout`` and ``/audit`` (every change made through the
console). The sampler starts and stops with the app. Runs on the event loop and request threads.
"""

from __future__ import annotations

import contextlib
import urllib.parse
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from relay.console import pages_data, pages_fleet, pages_jobs, pages_mappings
from relay.console.guard import COOKIE, SESSION_SECONDS, Guard
from relay.console.web import HERE, Console, console, form, render

__all__ = ["build_app"]


def _next(target: str) -> str:
    """Where to go after logging in: a path of this console only (never another site)."""
    parts = urllib.parse.urlsplit(target)
    if parts.scheme or parts.netloc or not target.startswith("/") or target.startswith("//"):
        return "/"
    return target


def login_page(request: Request) -> Response:
    if console(request).auth.header is not None:
        return render(
            request, "done.html", code=404, title="Login", lines=["logins go through the proxy"], ok=False
        )
    return render(request, "login.html", next=_next(request.query_params.get("next", "/")), error="")


async def login(request: Request) -> Response:
    c = console(request)
    data = await form(request)
    target = _next(data.get("next", "/"))
    sid, why = c.auth.login(data.get("user", ""), data.get("password", ""))
    if sid is None:
        return render(request, "login.html", code=401, next=target, error=why)
    response = RedirectResponse(target, status_code=303)
    secure = request.url.scheme == "https" or request.headers.get("x-forwarded-proto") == "https"
    response.set_cookie(
        COOKIE, sid, max_age=SESSION_SECONDS, httponly=True, samesite="strict", secure=secure, path="/"
    )
    return response


async def logout(request: Request) -> Response:
    console(request).auth.logout(request.cookies.get(COOKIE))
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(COOKIE, path="/")
    return response


def no_icon(request: Request) -> Response:
    """Browsers ask for it (a JSON answer shown as a page has no icon link): there is none."""
    return Response(status_code=204)


def audit_page(request: Request) -> Response:
    return render(request, "audit.html", entries=console(request).audit.entries())


def build_app(parts: Console) -> Guard:
    """The app, behind its guard."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        parts.sampler.start()
        await run_in_threadpool(parts.sampler.wait_first, 15.0)  # the first page already shows the fleet
        try:
            yield
        finally:
            parts.jobs.stop_all()
            parts.sampler.stop()

    routes = [
        Route("/login", login_page),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/audit", audit_page),
        Route("/favicon.ico", no_icon),
        *pages_fleet.ROUTES,
        *pages_mappings.ROUTES,
        *pages_data.ROUTES,
        *pages_jobs.ROUTES,
        Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static"),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.console = parts
    return Guard(app, parts.auth)
