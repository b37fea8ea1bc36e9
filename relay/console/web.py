"""What every page shares: the console's parts, rendering, the identity of the request, form reading.

Owns ``Console`` (the fleet, the sampler, the auth, the jobs, the audit log and the templates, handed to
every page through ``request.app.state.console``), ``render`` (a Jinja2 template with autoescaping on
every value: a table or column named ``<script>`` is shown as text), ``identity`` and ``form``. The
templates are ``relay/console/templates/*.html``; the only scripts and styles are the package's own
``relay/console/static`` files. Runs on the event loop and request threads.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from relay import __version__
from relay.common.redact import redact
from relay.console.audit import AuditLog
from relay.console.fleet import Fleet
from relay.console.guard import Auth, Identity
from relay.console.jobs import Jobs
from relay.console.samples import Sampler
from relay.errors import RelayError

__all__ = ["Console", "form", "identity", "render", "run"]

HERE = Path(__file__).parent


@dataclass
class Console:
    fleet: Fleet
    sampler: Sampler
    auth: Auth
    jobs: Jobs
    audit: AuditLog
    templates: jinja2.Environment


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,  # every value, whatever the file's name
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["number"] = _number
    return env


def _number(value: Any, digits: int = 1) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def console(request: Request) -> Console:
    found: Console = request.app.state.console
    return found


def identity(request: Request) -> Identity:
    """The user the guard let through (``relay.console.guard.Guard``)."""
    found: Identity = request.scope["state"]["identity"]
    return found


def render(request: Request, name: str, code: int = 200, **context: Any) -> HTMLResponse:
    c = console(request)
    who = request.scope.get("state", {}).get("identity")
    page = c.templates.get_template(name).render(
        user=who,
        fleet_kind=c.fleet.kind,
        fleet_where=c.fleet.where,
        version=__version__,
        path=request.url.path,
        **context,
    )
    return HTMLResponse(page, status_code=code)


async def form(request: Request) -> dict[str, str]:
    """The posted form's text fields (the guard has checked its CSRF token already)."""
    data = await request.form()
    return {k: v for k, v in data.items() if isinstance(v, str)}


async def run(call: Any, *args: Any) -> tuple[Any, str | None]:
    """``call(*args)`` on a worker thread: its result and None, or None and a relay error's line."""
    try:
        return await run_in_threadpool(call, *args), None
    except RelayError as exc:
        return None, redact(str(exc))


def back(url: str) -> Response:
    return RedirectResponse(url, status_code=303)
