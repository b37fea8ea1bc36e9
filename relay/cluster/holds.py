"""Instances held on a schema error: not restarted until ``relay schema resync --instance`` repairs them.

A relay that stops on a DDL it cannot apply (or a table changed outside the binlog) would stop again at
the same place after every restart, and while it runs ``relay schema resync`` must refuse (it never
writes the history under a running relay). So a child that ends with ``EXIT_SCHEMA_HELD``
(``relay cluster child``) is not restarted by its node (``relay.cluster.children``): the node writes
the persistent marker ``<root>/destinations/<name>/held`` (its node, the error, when), which every node
respects — an instance moved while held is not started elsewhere either — and ``relay cluster status``
shows. ``relay schema resync --instance`` removes the marker once the history is repaired; the node
holding the child then starts it again.

Runs on the node's main thread (``relay.cluster.node``), with the node's kazoo client.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Mapping
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError

from relay.cluster.children import HELD, Children
from relay.cluster.layout import Paths

log = logging.getLogger(__name__)

__all__ = ["SchemaHolds"]


class SchemaHolds:
    """The held markers of the instances assigned to one node."""

    def __init__(self, node: str, paths: Paths) -> None:
        self._node, self._paths = node, paths
        self._marked: set[str] = set()  # markers this node wrote for its held children

    def wanted(
        self,
        client: KazooClient,
        wanted: Mapping[str, int],
        report: Mapping[str, dict[str, Any]],
        children: Children,
        watch: Any = None,
    ) -> dict[str, int]:
        """``wanted`` without the instances a marker holds (another node's, or one written before this
        node started); a held child of this node whose marker is gone (resynced) is released."""
        out = dict(wanted)
        for name in wanted:
            path = self._paths.held(name)
            marker = client.exists(path, watch=watch)
            if report.get(name, {}).get("process") == HELD:
                if marker is None and name in self._marked:
                    log.info("instance %s: its hold was lifted (schema resynced): starting it again", name)
                    self._marked.discard(name)
                    children.release(name)
                elif marker is None:
                    self._mark(client, path, name, report[name])
            elif marker is not None:
                self._marked.discard(name)
                del out[name]
        self._marked &= set(wanted)
        return out

    def _mark(self, client: KazooClient, path: str, name: str, process: dict[str, Any]) -> None:
        error = process.get("last_error")
        record = {"node": self._node, "reason": "schema", "error": error, "at": time.time()}
        with contextlib.suppress(NodeExistsError):
            client.create(path, json.dumps(record, sort_keys=True).encode(), makepath=True)
        self._marked.add(name)
        log.error(
            "instance %s: stopped on a schema error; held (not restarted) until `relay schema resync "
            "--instance %s`: %s",
            name,
            name,
            error,
        )
