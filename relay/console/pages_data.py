"""The pages that read what the relay wrote: topics and the record browser, and the DDL audit.

Owns ``/topics`` (per logical table of an instance: its topic, partitions, offsets and retention runway,
``relay.console.topics``), ``/topics/browse`` (latest N records, a key's records, from an offset or a
time; each value decoded and escaped) and ``/ddl`` (every DDL per logical table from the schema history,
``relay.console.ddl``). Read-only; runs on request threads.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from mapping.model import Mapping
from relay.config.load import RelayConfig
from relay.console import ddl, topics
from relay.console.web import console, render, run
from relay.wiring import mapping_store

__all__ = ["ROUTES"]


def _mapping(config: RelayConfig) -> Mapping:
    store = mapping_store(config)
    try:
        return store.read()
    finally:
        store.close()


def _instance(request: Request) -> str:
    names = list(console(request).sampler.view()["instances"])
    wanted = request.query_params.get("instance", "")
    return wanted if wanted in names else (names[0] if names else "")


def _topics_of(config: RelayConfig) -> tuple[list[topics.LogicalTable], str, dict[str, topics.TopicInfo]]:
    tables, note = topics.logical_tables(config, _mapping(config))
    return tables, note, topics.topic_info(config, sorted({t.topic for t in tables}))


async def topics_page(request: Request) -> Response:
    c = console(request)
    instance = _instance(request)
    names = list(c.sampler.view()["instances"])
    config, error = await run(c.fleet.config, instance) if instance else (None, "no instance")
    found = None
    if config is not None:
        found, error = await run(_topics_of, config)
    tables, note, infos = found if found else ([], "", {})
    return render(
        request,
        "topics.html",
        instance=instance,
        names=names,
        tables=tables,
        note=note,
        infos=infos,
        error=error,
    )


async def browse_page(request: Request) -> Response:
    c = console(request)
    q = request.query_params
    instance, topic = _instance(request), q.get("topic", "")
    mode = q.get("mode", "latest") if q.get("mode") in ("latest", "key", "offset", "time") else "latest"
    value, part = q.get("value", ""), q.get("partition", "")
    limit = int(q["limit"]) if q.get("limit", "").isdigit() else 20
    result, error = None, None
    if topic:
        config, error = await run(c.fleet.config, instance)
        if config is not None:
            partition = int(part) if part.isdigit() else None
            result, error = await run(topics.browse, config, topic, mode, value, partition, limit)
    return render(
        request,
        "browse.html",
        instance=instance,
        topic=topic,
        mode=mode,
        value=value,
        partition=part,
        limit=limit,
        result=result,
        error=error,
    )


def _ddl(config: RelayConfig) -> tuple[list[ddl.DdlRow], str]:
    return ddl.ddl_audit(config, _mapping(config))


async def ddl_page(request: Request) -> Response:
    c = console(request)
    instance = _instance(request)
    names = list(c.sampler.view()["instances"])
    table = request.query_params.get("table", "")
    config, error = await run(c.fleet.config, instance) if instance else (None, "no instance")
    found = None
    if config is not None:
        found, error = await run(_ddl, config)
    rows, where = found if found else ([], "")
    tables = sorted({r.logical for r in rows})
    shown = [r for r in rows if not table or r.logical == table]
    return render(
        request,
        "ddl.html",
        instance=instance,
        names=names,
        rows=shown,
        tables=tables,
        table=table,
        where=where,
        error=error,
    )


ROUTES = [
    Route("/topics", topics_page),
    Route("/topics/browse", browse_page),
    Route("/ddl", ddl_page),
]
