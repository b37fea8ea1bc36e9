"""The fleet page: nodes, instances, placement, each instance's state and its lag over the last hours.

Owns ``/`` (the page, drawn from the sampler's latest pass), ``/api/fleet`` (the same as JSON, which the
page's script polls to refresh its cells and charts without reloading), and the operator actions with
their confirmation step: ``/fleet/drain`` (a node, or undo) and ``/fleet/move`` (pin an instance to a
node, or unpin it) — a first POST shows what will happen, the second (``confirm=yes``) does it through
``relay.cluster.control``, the functions ``relay cluster drain|move`` call. Runs on request threads.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from relay.console.web import back, console, form, identity, render, run

__all__ = ["ROUTES"]

FIELDS = (
    ("state", "state"),
    ("position", "position"),
    ("lag_seconds", "lag s"),
    ("lag_bytes", "lag bytes"),
    ("publish_rate", "rate /s"),
    ("store_fill_percent", "store fill %"),
    ("mapping_version", "mapping"),
    ("kafka_mode", "Kafka mode"),
    ("error", "last error"),
)


def fleet_page(request: Request) -> Response:
    view = console(request).sampler.view()
    return render(request, "fleet.html", view=view, fields=FIELDS, nodes=_nodes(view["placement"]))


def fleet_json(request: Request) -> Response:
    """The fleet as JSON; ``since``: only the samples taken after that time (the page keeps the rest)."""
    try:
        since = float(request.query_params.get("since", "0"))
    except ValueError:
        since = 0.0
    view = console(request).sampler.view(since)
    instances = {
        name: {field: status.get(field) for field, _ in FIELDS} | {"running": status.get("running")}
        for name, status in view["instances"].items()
    }
    placement = view["placement"]
    return JSONResponse(
        {
            "instances": instances,
            "samples": view["samples"],
            "placement": {name: _where(placement, name) for name in instances},
            "errors": view["errors"],
            "passes": view["passes"],
            "window": view["window"],
        }
    )


def _nodes(placement: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"name": name, **node} for name, node in (placement.get("nodes") or {}).items()]


def _where(placement: dict[str, Any], name: str) -> dict[str, Any]:
    found = (placement.get("instances") or {}).get(name) or {}
    return {
        "node": found.get("node"),
        "running_on": found.get("running_on"),
        "pinned_to": found.get("pinned_to"),
        "moved_because": found.get("moved_because"),
    }


async def drain(request: Request) -> Response:
    data = await form(request)
    node, undo = data.get("node", ""), data.get("undo") == "yes"
    c = console(request)
    if data.get("confirm") != "yes":
        what = (
            f"Remove the drain mark of node {node}: the leader gives it a fair share of instances again."
            if undo
            else f"Drain node {node}: the leader moves every instance it runs to the other nodes; each one "
            "drains first (in-flight batches acknowledged, position saved), then runs on its new node. The "
            "mark stays until it is undone."
        )
        return render(
            request, "confirm.html", title="Drain a node", what=what, action="/fleet/drain", fields=data
        )
    lines, error = await run(c.fleet.drain, node, undo)
    who = identity(request).name
    c.audit.record(who, "drain --undo" if undo else "drain", "", {"node": node}, error or "; ".join(lines))
    c.sampler.refresh()
    if error:
        return render(request, "done.html", code=409, title="Drain refused", lines=[error], ok=False)
    return render(request, "done.html", title="Drain", lines=lines, ok=True)


async def move(request: Request) -> Response:
    data = await form(request)
    instance, node = data.get("instance", ""), data.get("node", "") or None
    c = console(request)
    if data.get("confirm") != "yes":
        what = (
            f"Move instance {instance} to node {node} and pin it there: the leader moves it (it drains on "
            "its old node first, then starts on the new one) and keeps it there while the node is live, not "
            "drained and has room; to keep the balance another instance may leave that node."
            if node
            else f"Unpin instance {instance}: it stays where it runs unless the placement rule moves it."
        )
        return render(
            request, "confirm.html", title="Move an instance", what=what, action="/fleet/move", fields=data
        )
    lines, error = await run(c.fleet.move, instance, node)
    c.audit.record(
        identity(request).name,
        "move" if node else "unpin",
        instance,
        {"node": node},
        error or "; ".join(lines),
    )
    c.sampler.refresh()
    if error:
        return render(request, "done.html", code=409, title="Move refused", lines=[error], ok=False)
    return render(request, "done.html", title="Move", lines=lines, ok=True)


def refresh(request: Request) -> Response:
    console(request).sampler.refresh()
    return back("/")


ROUTES = [
    Route("/", fleet_page),
    Route("/api/fleet", fleet_json),
    Route("/fleet/drain", drain, methods=["POST"]),
    Route("/fleet/move", move, methods=["POST"]),
]
