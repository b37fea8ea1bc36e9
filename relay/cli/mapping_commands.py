"""The ``relay mapping …`` commands: what each does and prints (the parsers are in ``relay.cli.mapping``).

Owns the terminal output of the mapping editor (``mapping.editor``), the stores (``mapping.store``)
and the comparisons (``mapping.diff``), and listing a live server's tables. Runs on the CLI's main
thread. Every edit reads the stored version, applies the change, validates the result
(an invalid one is refused with its key paths, nothing stored), and stores it with compare-and-set on
the version it read; ``--dry-run`` shows the effect and stores nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Callable
from typing import Any

from mapping import editor
from mapping.diff import Move, codec_moves, logical_changes, moves, summary, text_diff
from mapping.load import dump_mapping, load_mapping
from mapping.model import Mapping, MappingWarning, Route
from mapping.store import MappingStore
from mapping.store_zk import ZooKeeperStoreConfig
from relay.cli.mapping_relays import known_relays, markers, print_relays
from relay.config.state import MAPPING_HISTORY_DIR
from relay.errors import InvalidMappingError, MappingError
from relay.ops.mapping_live import (
    Live,
    LiveSource,
    column_problems,
    live_problems,
    live_source,
    live_tables,
    reachable,
)
from relay.wiring import mapping_store, open_mapping_store

Handler = Callable[[argparse.Namespace, MappingStore], int]

STORE_HELP = (
    "The store is chosen by, in this order: --zookeeper HOSTS (with --zk-path, --zk-auth), --file PATH, "
    "-c CONFIG (its mapping.* settings), else conf/mapping.yaml. A file's versions are kept in the state "
    "directory of -c CONFIG (its state_dir, or RELAY_STATE_DIR; without -c: RELAY_STATE_DIR, else "
    "var/default under the working directory), in mapping-history/."
)


# --- store and live tables -------------------------------------------------------------------


def open_from_args(args: argparse.Namespace) -> MappingStore:
    """The store the options name; a file's history goes to the state directory of ``-c`` (else the
    defaults': ``RELAY_STATE_DIR`` or ``var/default`` under the working directory)."""
    if args.zookeeper:
        auth = args.zk_auth or os.environ.get("RELAY_MAPPING_ZK_AUTH") or None
        return open_mapping_store(
            "zookeeper", "", ZooKeeperStoreConfig(args.zookeeper, args.zk_path, auth, setting="--zookeeper")
        )
    from relay.config.load import load_config, parse_config

    config = load_config(args.config) if args.config else parse_config({})
    if args.config and not args.file:
        return mapping_store(config)
    history = config.state_path(MAPPING_HISTORY_DIR)
    setting = "--file" if args.file else "--file (default conf/mapping.yaml)"
    return open_mapping_store("file", args.file or "conf/mapping.yaml", history=history, setting=setting)


def _live_tables(args: argparse.Namespace, timeout: float = 10.0) -> list[tuple[str, str]]:
    """Every base table of the live server (--mysql URL, or the config's source account)."""
    return _live(args, timeout, columns=False)[0]


def _source(args: argparse.Namespace) -> LiveSource | None:
    """The server --mysql or -c names (None: neither)."""
    if getattr(args, "mysql", None):
        from relay.dev.services import MySQLService

        s = MySQLService.parse(args.mysql)
        return LiveSource(s.host, s.port, s.user, s.password, None, "--mysql")
    if getattr(args, "config", None):
        from relay.config.load import load_config

        return live_source(load_config(args.config))
    return None


def _live(args: argparse.Namespace, timeout: float, *, columns: bool) -> Live:
    """The live server's base tables and, with ``columns``, each one's columns."""
    source = _source(args)
    if source is None:
        raise MappingError("--mysql", "name a server: --mysql mysql://user:pass@host:port or -c CONFIG")
    return live_tables(source, timeout, columns=columns)


def _route_line(route: Route | None, db: str, table: str) -> str:
    if route is None:
        return f"{db}.{table}: dropped (not published)"
    key = ",".join(route.key_columns) if route.key_columns is not None else "(primary key)"
    shard = f" key_shard={route.key_shard}" if route.key_shard != "none" else ""
    tag = f" tag={route.tag}" if route.tag else ""
    columns = f"  columns: {route.columns.describe()}" if route.columns is not None else ""
    return (
        f"{db}.{table} -> topic {route.topic}  as {route.logical_db}.{route.logical_table}  "
        f"key={key}{tag}{shard} codec={route.codec}  rule={route.rule}{columns}"
    )


def _print_warnings(warnings: tuple[MappingWarning, ...]) -> None:
    """Warnings go to stderr, one per line, and never change the exit status."""
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)


# --- read-only commands ----------------------------------------------------------------------


def cmd_show(args: argparse.Namespace, store: MappingStore) -> int:
    mapping = store.read() if args.at is None else store.version(args.at)
    print(f"# {store.name}, version {mapping.version}")
    print(dump_mapping(mapping), end="")
    return 0


def cmd_resolve(args: argparse.Namespace, store: MappingStore) -> int:
    mapping = store.read()
    if args.all:
        return _resolve_all(args, mapping)
    if not args.tables:
        raise MappingError("resolve", "name tables as db.table, or use --all with a live server")
    paths: set[str] = set()
    for name in args.tables:
        db, dot, table = name.partition(".")
        if not dot:
            raise MappingError(name, "expected <physical_db>.<physical_table>")
        route = mapping.resolve(db, table)
        print(_route_line(route, db, table))
        if route is not None and route.mapped:
            paths.add(_warning_path(route))
    # the static warnings about the logical tables these names resolve to
    _print_warnings(tuple(w for w in mapping.warnings() if w.path in paths))
    return 0


def _warning_path(route: Route) -> str:
    """The key path ``Mapping.warnings`` uses for the rule that produced ``route``."""
    if route.rule.endswith(".unclaimed_tables"):
        return route.rule.removesuffix(".unclaimed_tables") + ".key_shard"
    return f"{route.rule}.key_shard"


def _resolve_all(args: argparse.Namespace, mapping: Mapping) -> int:
    tables, columns = _live(args, 10.0, columns=bool(mapping.column_controls()))
    coverage = mapping.validate_against(tables, raise_errors=False)
    problems = column_problems(mapping, coverage.routes, columns) if columns else []
    coverage = dataclasses.replace(coverage, errors=(*coverage.errors, *problems))
    if args.json:
        out = {
            "version": mapping.version,
            "routes": [
                {
                    "db": r.physical_db,
                    "table": r.physical_table,
                    "topic": r.topic,
                    "logical": f"{r.logical_db}.{r.logical_table}",
                    "mapped": r.mapped,
                    **({"columns": r.columns.as_dict()} if r.columns is not None else {}),
                }
                for r in coverage.routes
            ],
            "unmapped": [f"{d}.{t}" for d, t in coverage.unmapped],
            "dropped": [f"{d}.{t}" for d, t in coverage.dropped],
            "ambiguous": [str(e) for e in coverage.errors],
            "warnings": [str(w) for w in coverage.warnings],
        }
        print(json.dumps(out, indent=2))
    else:
        for route in coverage.routes:
            print(_route_line(route, route.physical_db, route.physical_table))
        for db, table in coverage.dropped:
            print(_route_line(None, db, table))
        print(f"\n{len(coverage.routes)} published, {len(coverage.dropped)} dropped")
        unmapped = ", ".join(f"{d}.{t}" for d, t in coverage.unmapped) or "-"
        print(f"unmapped ({len(coverage.unmapped)}): {unmapped}")
        print(f"ambiguous or invalid ({len(coverage.errors)}):")
        for err in coverage.errors:
            print(f"  - {err}")
        _print_warnings(coverage.warnings)
    return 1 if coverage.errors else 0


def cmd_validate(args: argparse.Namespace, store: MappingStore) -> int:
    mapping = load_mapping(args.source_file, "SOURCE_FILE") if args.source_file else store.read()
    where = args.source_file or store.name
    warnings = mapping.warnings()
    controls = bool(mapping.column_controls())
    live = _live(args, 10.0, columns=controls) if args.live else _reachable(args, columns=controls)
    against = ""
    if live is not None:
        # every table named (two claimants, two codecs in one topic, column controls that do not fit);
        # what the real names show replaces what the patterns suggest
        problems = live_problems(mapping, live)
        if problems:
            raise InvalidMappingError(str(where), problems)
        warnings = (*_no_dbs(mapping), *mapping.validate_against(live[0], raise_errors=False).warnings)
        against = f", checked against {len(live[0])} tables of the source"
    _print_warnings(warnings)
    count = f" ({len(warnings)} warning{'s' if len(warnings) != 1 else ''})" if warnings else ""
    print(f"{where}: version {mapping.version} is valid{against}{count}")
    return 0


def _reachable(args: argparse.Namespace, *, columns: bool) -> Live | None:
    """The source's tables (and columns) when -c or --mysql names a server that answers; None (with a
    warning) when it does not, or when none is named (``relay.ops.mapping_live.reachable``)."""
    return reachable(
        _source(args), columns=columns, warn=lambda line: print(f"warning: {line}", file=sys.stderr)
    )


def _no_dbs(mapping: Mapping) -> tuple[MappingWarning, ...]:
    return tuple(w for w in mapping.warnings() if w.path == "logical_dbs")


def _mapping_at(store: MappingStore, ref: str) -> tuple[Mapping, str]:
    if ref.isdigit():
        return store.version(int(ref)), f"version {ref}"
    return load_mapping(ref), ref


def cmd_diff(args: argparse.Namespace, store: MappingStore) -> int:
    if args.new is None:
        new = store.read()
        new_label = f"version {new.version} (current)"
    else:
        new, new_label = _mapping_at(store, args.new)
    old, old_label = _mapping_at(store, args.old or str(max(new.version - 1, 1)))
    _print_effect(args, old, new)
    text = text_diff(old, new, old_label, new_label)
    print(text or "(the two mappings are equal)", end="" if text else "\n")
    return 0


def cmd_history(args: argparse.Namespace, store: MappingStore) -> int:
    relays, notes = known_relays(args, store)
    previous: Mapping | None = None
    for info in store.history():
        try:
            mapping = store.version(info.version)
            what = summary(previous, mapping)
            previous = mapping
        except MappingError as exc:
            what = f"unreadable: {exc}"
        note = f'  "{info.note}"' if info.note else ""
        mark = markers(relays, info.version)
        print(f"{info.version:>6}  {info.saved or '-':<20}  {info.by or '-':<24}  {what}{note}{mark}")
    print_relays(relays, notes)
    return 0


# --- edits -----------------------------------------------------------------------------------


def _print_effect(args: argparse.Namespace, old: Mapping, new: Mapping) -> list[Move]:
    for line in logical_changes(old, new) or ["(no change)"]:
        print(line)
    if not getattr(args, "live", False):
        return []
    found = moves(old, new, _live_tables(args))
    print(f"physical tables that move ({len(found)}):")
    for move in found:
        print(f"  {move.describe()}")
    errors = [MappingError(f"{m.db}.{m.table}", m.error) for m in found if m.error is not None]
    if errors:  # an overlap only live names reveal: refuse the edit like any other invalid one
        raise editor.refusal(InvalidMappingError("the edited mapping, against the live tables", errors))
    return found


def _apply(args: argparse.Namespace, store: MappingStore, change: Callable[[Mapping], Mapping]) -> int:
    old = store.read()
    expected = old.version if args.expect_version is None else args.expect_version
    if expected != old.version:
        from mapping.store import conflict

        raise conflict(store.name, expected, old.version)
    try:
        new = change(old)
    except MappingError as exc:
        raise editor.refusal(exc) from None
    _print_effect(args, old, new)
    _warn_codec_moves(args, old, new)
    live = None if getattr(args, "live", False) else _reachable(args, columns=bool(new.column_controls()))
    if live is not None:  # overlaps and codecs only real names show: refused like any invalid edit
        errors = live_problems(new, live)
        if errors:
            raise editor.refusal(InvalidMappingError("the edited mapping, against the live tables", errors))
    if args.dry_run:
        print(f"dry run: nothing stored ({store.name} stays at version {old.version})")
        return 0
    if new == old:
        print(f"no change; {store.name} stays at version {old.version}")
        return 0
    saved = store.write(new, expected=expected, note=args.note or _note(args))
    print(f"stored version {saved.version} in {store.name} (was {old.version})")
    if any(" topic" in line and "->" in line for line in logical_changes(old, new)):
        print(
            "a table changes topic: running relays (mapping.move: copy) first copy its retained history "
            f"into the new topic, then switch to version {saved.version}; `relay status` shows the copy"
        )
    return 0


def _warn_codec_moves(args: argparse.Namespace, old: Mapping, new: Mapping) -> None:
    """A table sent to another topic in another codec: relays that copy moved history (``mapping.move:
    copy``, the default) refuse such a version and keep the one they run. A warning, not a refusal: the
    version stored before may be one they refused (a rollback restores what they run)."""
    found = codec_moves(old, new)
    if not found:
        return
    if getattr(args, "config", None):
        from relay.config.load import load_config

        if load_config(args.config).mapping.move != "copy":
            return
    for name in found:
        print(
            f"warning: {name}: its topic and its codec change together; a relay running version "
            f"{old.version} with mapping.move: copy refuses this version (the history cannot be copied "
            "into the new topic in another codec) and keeps the one it runs: change one at a time",
            file=sys.stderr,
        )


_SECRET_OPTIONS = ("--zk-auth", "--mysql")


def _note(args: argparse.Namespace) -> str:
    """The note kept in the history: ``--note``, else the command line without credentials."""
    if args.note is not None:
        return str(args.note)
    shown: list[str] = []
    hide = False
    for arg in sys.argv[1:]:
        if hide or arg.startswith(tuple(f"{o}=" for o in _SECRET_OPTIONS)):
            shown.append("***")
        else:
            shown.append(arg)
        hide = arg in _SECRET_OPTIONS
    return " ".join(shown)


def _fields(args: argparse.Namespace, names: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in names:
        value = getattr(args, name, None)
        out[name] = editor.UNSET if value is None else value
    for name in args.clear or []:
        if name not in names:
            raise MappingError(f"--clear {name}", f"not a field here (fields: {', '.join(names)})")
        out[name] = None
    return out


def cmd_db(args: argparse.Namespace, store: MappingStore) -> int:
    name = args.name
    if args.action == "remove":
        return _apply(args, store, lambda m: editor.remove_db(m, name))
    fields = _fields(args, editor.DB_FIELDS)
    op = editor.add_db if args.action == "add" else editor.set_db
    return _apply(args, store, lambda m: op(m, name, **fields))


def cmd_table(args: argparse.Namespace, store: MappingStore) -> int:
    db, table = editor.split_target(args.name)
    if table is None:
        raise MappingError(args.name, "expected <logical_db>.<logical_table>")
    if args.action == "remove":
        return _apply(args, store, lambda m: editor.remove_table(m, db, table))
    fields = _fields(args, editor.TABLE_FIELDS)
    op = editor.add_table if args.action == "add" else editor.set_table
    return _apply(args, store, lambda m: op(m, db, table, **fields))


def _one_value(args: argparse.Namespace, what: str) -> str:
    if args.action != "remove" and not args.value:
        raise MappingError(args.action, f"`{args.action}` needs the {what}")
    if args.action == "remove" and args.value:
        raise MappingError(args.action, f"`remove` takes no {what}")
    return str(args.value[0]) if args.value else ""


def cmd_topic(args: argparse.Namespace, store: MappingStore) -> int:
    value = _one_value(args, "topic")
    ops = {"add": editor.add_topic, "set": editor.set_topic}
    if args.action == "remove":
        return _apply(args, store, lambda m: editor.remove_topic(m, args.target))
    return _apply(args, store, lambda m: ops[args.action](m, args.target, value))


def cmd_tag(args: argparse.Namespace, store: MappingStore) -> int:
    value = _one_value(args, "tag")
    ops = {"add": editor.add_tag, "set": editor.set_tag}
    if args.action == "remove":
        return _apply(args, store, lambda m: editor.remove_tag(m, args.target))
    return _apply(args, store, lambda m: ops[args.action](m, args.target, value))


def cmd_key(args: argparse.Namespace, store: MappingStore) -> int:
    cols = list(args.value)
    if args.action == "add":
        return _apply(args, store, lambda m: editor.add_key(m, args.target, cols))
    if args.action == "set":
        if not cols:
            raise MappingError("set", "`key set` needs at least one column")
        return _apply(args, store, lambda m: editor.set_key(m, args.target, cols))
    return _apply(args, store, lambda m: editor.remove_key(m, args.target, cols))


def cmd_rollback(args: argparse.Namespace, store: MappingStore) -> int:
    target = store.version(args.version)
    args.note = args.note or f"rollback to version {args.version}"
    return _apply(args, store, lambda m: target.with_version(m.version))


def cmd_import(args: argparse.Namespace, store: MappingStore) -> int:
    new = load_mapping(args.source_file, "SOURCE_FILE")
    try:
        store.read()
    except MappingError as exc:
        if exc.retriable or store.exists():
            raise
        if args.dry_run:
            print(f"dry run: would store {args.source_file} as version {new.version} in {store.name}")
            return 0
        store.create(new, note=args.note or f"import {args.source_file}")
        print(f"stored {args.source_file} as version {new.version} in {store.name} (first version)")
        return 0
    return _apply(args, store, lambda m: new.with_version(m.version))
