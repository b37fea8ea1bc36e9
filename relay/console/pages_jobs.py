"""The snapshots and verify page: start either for a logical table, watch it run, read past runs.

Owns ``/jobs`` (the forms and every job, newest first, with progress bars the page's script refreshes
from ``/api/jobs``), ``/jobs/{id}`` (one job: a snapshot's per-table progress, a verify report with its
counts and every differing key) and the two POSTs that start them (operator only, audited). The jobs
themselves are ``relay.console.jobs``'. Runs on request threads.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from relay.console.web import back, console, form, identity, render, run

__all__ = ["ROUTES"]


def jobs_page(request: Request) -> Response:
    c = console(request)
    names = list(c.sampler.view()["instances"])
    return render(
        request, "jobs.html", jobs=c.jobs.all(), names=names, started=request.query_params.get("started", "")
    )


def jobs_json(request: Request) -> Response:
    shown = (
        "id",
        "kind",
        "instance",
        "table",
        "state",
        "progress",
        "percent",
        "error",
        "by",
        "started",
        "ended",
    )
    return JSONResponse([{k: j.get(k) for k in shown} for j in console(request).jobs.all()])


def job_page(request: Request) -> Response:
    job = console(request).jobs.get(request.path_params["job"])
    if job is None:
        return render(request, "done.html", code=404, title="No such job", lines=["no such job"], ok=False)
    return render(request, "job.html", job=job)


async def start(request: Request) -> Response:
    c = console(request)
    data = await form(request)
    kind = request.path_params["kind"]
    instance, table, where = data.get("instance", ""), data.get("table", "").strip(), data.get("where", "")
    who = identity(request).name
    call = c.jobs.snapshot if kind == "snapshot" else c.jobs.verify
    job, error = await run(call, instance, table, where, who)
    outcome = error or (job or {}).get("error") or f"started {(job or {}).get('id')}"
    c.audit.record(who, kind, instance, {"table": table, "where": where}, outcome)
    if error:
        return render(
            request, "done.html", code=409, title=f"{kind.title()} refused", lines=[error], ok=False
        )
    return back(f"/jobs?started={job['id']}")


ROUTES = [
    Route("/jobs", jobs_page),
    Route("/api/jobs", jobs_json),
    Route("/jobs/{job}", job_page),
    Route("/jobs/start/{kind:str}", start, methods=["POST"]),
]
