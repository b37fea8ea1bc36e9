"""The mapping pages: each instance's current mapping with its history, the editor, check, apply, rollback.

Owns ``/mappings`` (every instance and its mapping version), ``/mappings/{instance}`` (the current text
in an editor, the version history with who and when, a stored version's text), ``/mappings/{instance}/
check`` (the edit's ``Preview``: every problem with its key path, warnings, the diff against the base
version, what each moved table implies) and ``/mappings/{instance}/apply`` (checked again, stored as the
next version by compare-and-set; refused with the problems shown, nothing stored). A rollback is the
same two steps with the version to go back to. Every apply, accepted or refused, goes to the audit log.
The checks are ``relay.console.mappings``' (the CLI's). Runs on request threads.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from relay.console import mappings
from relay.console.web import back, console, form, identity, render, run

__all__ = ["ROUTES"]


def index(request: Request) -> Response:
    c = console(request)
    view = c.sampler.view()
    rows = [
        {
            "name": name,
            "version": status.get("mapping_version"),
            "stored": status.get("mapping_stored"),
            "pending": status.get("mapping_pending"),
            "refused": status.get("mapping_refused"),
        }
        for name, status in view["instances"].items()
    ]
    return render(request, "mappings.html", rows=rows)


async def show(request: Request) -> Response:
    instance = request.path_params["instance"]
    c = console(request)
    config, error = await run(c.fleet.config, instance)
    if error:
        return render(request, "done.html", code=404, title="Mapping", lines=[error], ok=False)
    current, error = await run(mappings.current, config)
    if error:
        return render(request, "done.html", code=503, title="Mapping", lines=[error], ok=False)
    shown, shown_text = None, ""
    at = request.query_params.get("version", "")
    if at.isdigit():
        shown = int(at)
        shown_text, error = await run(mappings.version_text, config, shown)
        shown_text = shown_text or error or ""
    return render(
        request,
        "mapping.html",
        instance=instance,
        current=current,
        shown=shown,
        shown_text=shown_text,
        applied=request.query_params.get("applied", ""),
        moved=request.query_params.get("moved", "0"),
        status=c.sampler.view()["instances"].get(instance, {}),
    )


def _edit(data: dict[str, str]) -> tuple[int, str, int | None, str]:
    base = int(data["base"]) if data.get("base", "").isdigit() else -1
    rollback = int(data["rollback_to"]) if data.get("rollback_to", "").isdigit() else None
    return base, data.get("text", ""), rollback, data.get("note", "")


async def check(request: Request) -> Response:
    instance = request.path_params["instance"]
    c = console(request)
    base, text, rollback, note = _edit(await form(request))
    config, error = await run(c.fleet.config, instance)
    preview = None
    if not error:
        preview, error = await run(mappings.preview, config, base, text, rollback)
    if error or preview is None:
        return render(request, "done.html", code=409, title="Check refused", lines=[error or "?"], ok=False)
    return render(
        request,
        "preview.html",
        code=200 if preview.ok else 422,
        instance=instance,
        preview=preview,
        note=note,
    )


async def apply(request: Request) -> Response:
    instance = request.path_params["instance"]
    c = console(request)
    who = identity(request).name
    base, text, rollback, note = _edit(await form(request))
    config, error = await run(c.fleet.config, instance)
    result = None
    if not error:
        result, error = await run(mappings.apply, config, base, text, who, note, rollback)
    action = f"mapping rollback to {rollback}" if rollback is not None else "mapping apply"
    if error or result is None or not result.ok:
        lines = [error] if error else (result.errors if result else [])
        c.audit.record(who, action, instance, {"base": base, "errors": lines}, "refused")
        if result is None:
            return render(request, "done.html", code=409, title="Apply refused", lines=lines, ok=False)
        return render(
            request, "preview.html", code=422, instance=instance, preview=result, note=note, refused=True
        )
    if result.unchanged:
        c.audit.record(who, action, instance, mappings.summary(result), "no change")
        return back(f"/mappings/{instance}?applied=unchanged")
    assert result.mapping is not None
    c.audit.record(
        who, action, instance, mappings.summary(result), f"stored version {result.mapping.version}"
    )
    c.sampler.refresh()
    moved = sum(len(m.tables) for m in result.moves if m.topic_changes)
    return back(f"/mappings/{instance}?applied={result.mapping.version}&moved={moved}")


ROUTES = [
    Route("/mappings", index),
    Route("/mappings/{instance}", show),
    Route("/mappings/{instance}/check", check, methods=["POST"]),
    Route("/mappings/{instance}/apply", apply, methods=["POST"]),
]
