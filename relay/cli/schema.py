"""``relay schema show|resync``: the table as the relay knows it, and repairing a table's history entry.

Runs on the CLI's main thread. ``show`` reads the schema history from the store beside the positions
(``positions.backend``: the file ``schema.path``, the ZooKeeper node beside the position node, or the
compacted topic ``schema.topic``) and prints a table as of a binlog place (``--at file:offset``;
default: the saved position, else the newest record). ``resync`` reads the table's live definition
from the server (information_schema) and appends it to the history — at the place of the table's
broken DDL (the relay stopped on a DDL it could not apply), or at ``--at`` / the saved position (a
table changed outside the binlog) — after the operator confirms (``--yes``); refused while a relay
holds the instance.

With ``--instance NAME`` (a cluster instance, from any host) the config is the instance's stored
definition (``relay.cluster.remote``): ``show`` needs no secret (the history is beside the positions,
in ZooKeeper or Kafka); ``resync`` connects to the server from THIS host, with the source's ``${NAME}``
secrets resolved from this environment (a missing one is named) — the operator confirming a definition
is looking at the server anyway, and the node need not run anything but relays. Its safety is the same:
refused while the instance's relay is active anywhere (its HA node in ZooKeeper). An instance stopped on
a schema error is held by its node (``relay.cluster.holds``: not restarted); a resync lifts the hold.
"""

from __future__ import annotations

import argparse
import contextlib
from typing import Any

import pymysql

from relay.cli.positions import _refuse_if_active
from relay.cli.remote import add_target_options, target
from relay.common import mysql
from relay.config.load import load_config
from relay.errors import ConfigError, SchemaError
from relay.schema.history import Place, SchemaHistory, place_key, resync, server_key
from relay.schema.server import read_server_key, read_table
from relay.wiring import open_positions, open_schema_history


def add_schema_parser(sub: Any) -> None:
    schema = sub.add_parser(
        "schema",
        help="show a table as the schema history knows it, or resync it from the server",
        description="The schema history gives column names, keys and types where the server does not "
        "write binlog_row_metadata=FULL, and is checked against them where it does; it is kept beside the "
        "positions (positions.backend: file, zookeeper or kafka). See docs/architecture.md, "
        "'Schema history'.",
    )
    cmds = schema.add_subparsers(dest="schema_command", required=True, metavar="ACTION")
    show = cmds.add_parser("show", help="a table as the relay knows it at a binlog place")
    add_target_options(show)
    show.add_argument("--table", required=True, help="schema.table, e.g. shop_07.orders_33")
    show.add_argument(
        "--at", help="binlog place file:offset (default: the saved position, else the newest record)"
    )
    show.set_defaults(func=cmd_schema_show)
    sync = cmds.add_parser("resync", help="take a table's live definition into the history (relay stopped)")
    add_target_options(sync)
    sync.add_argument("--table", required=True, help="schema.table")
    sync.add_argument(
        "--at", help="place file:offset (default: the table's broken DDL, else the saved position)"
    )
    sync.add_argument("--yes", action="store_true", help="confirm that the live definition is right there")
    sync.set_defaults(func=cmd_schema_resync)


def _table(text: str) -> tuple[str, str]:
    schema, dot, table = text.partition(".")
    if not dot or not schema or not table:
        raise ConfigError("--table", f"must be schema.table, got {text!r}")
    return schema, table


def _place(text: str) -> Place:
    file, colon, offset = text.rpartition(":")
    if not colon or not file or not offset.isdigit():
        raise ConfigError("--at", f"must be file:offset, got {text!r}")
    return file, int(offset)


def _require(history: SchemaHistory, config: Any) -> None:
    if not history.records:
        raise SchemaError(
            f"no schema history in {history.describe()} (schema.history: {config.schema.history}); the relay "
            "writes it when it starts"
        )


def _saved(config: Any) -> tuple[Place | None, str]:
    """The saved position's place and the server it is in ("": not recorded)."""
    with open_positions(config) as store:
        saved = store.load()
    if saved is None or not saved.journal:
        return None, ""
    src = saved.source
    return (saved.journal, saved.offset), server_key(src.server_id, src.server_uuid) if src else ""


def _config(args: argparse.Namespace, *, server: bool) -> tuple[Any, Any]:
    """The config of ``-c`` or of the cluster instance ``--instance`` (then also its ``RemoteInstance``,
    to be closed); ``server``: the source's secrets must resolve here."""
    remote = target(args)
    if remote is None:
        return load_config(args.config), None
    try:
        config, missing = remote.config()
        remote.require(missing, "positions.", "the schema history is read beside the positions")
        if config.positions.backend == "kafka":
            remote.require(missing, "kafka.", "the schema history is read from Kafka")
        if server:
            remote.require(missing, "source.", "resync reads the table's live definition from the server")
    except BaseException:
        remote.close()
        raise
    return config, remote


def cmd_schema_show(args: argparse.Namespace) -> int:
    config, remote = _config(args, server=False)
    if remote is not None:
        remote.close()
    key = _table(args.table)
    saved, server = _saved(config)
    at = _place(args.at) if args.at else saved
    with open_schema_history(config) as history:
        _require(history, config)
        if at is None:
            newest = max(history.records, key=lambda r: place_key(r.at))
            at, server = newest.at, newest.server
        table = history.catalog_at(at, server).table(*key)
        where = history.describe()
    print(f"as of {at[0]}:{at[1]}" + (f" on server {server}" if server else "") + f" ({where})")
    print(table.describe() if table is not None else f"{key[0]}.{key[1]}: not known at this place")
    return 0 if table is not None else 1


def cmd_schema_resync(args: argparse.Namespace) -> int:
    config, remote = _config(args, server=True)
    with contextlib.ExitStack() as closing:
        if remote is not None:
            closing.callback(remote.close)
        code = _resync(args, config)
        if code == 0 and remote is not None and remote.lift_hold():
            print(f"instance {remote.name}: its hold is lifted; its node starts it again")
        return code


def _resync(args: argparse.Namespace, config: Any) -> int:
    _refuse_if_active(config, then="resync the table")
    key = _table(args.table)
    at = _place(args.at) if args.at else None
    s = config.source
    conn = mysql.connect(s.host, s.port, s.user, s.password, tls=s.tls, connect_timeout=s.connect_timeout)
    try:
        with contextlib.closing(conn):
            live = read_table(conn, *key)
            server = read_server_key(conn)
    except pymysql.err.MySQLError as exc:
        raise SchemaError(f"{s.address}: cannot read {args.table}: {exc}") from exc
    print(live.describe() if live is not None else f"{args.table}: no such table on the server")
    if not args.yes:
        print("not written: run again with --yes to confirm this definition")
        return 1
    saved = _saved(config)[0] if at is None else None
    with open_schema_history(config) as history:
        _require(history, config)
        try:
            record = resync(history, live, key, at, server)
        except SchemaError:
            if at is not None or saved is None:
                raise
            record = resync(history, live, key, saved, server)
        where = history.describe()
    print(f"resynced {args.table} at {record.at[0]}:{record.at[1]} in {where}")
    return 0
