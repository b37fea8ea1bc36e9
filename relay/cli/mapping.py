"""``relay mapping …`` and ``relay replay``: the command-line parsers for editing mappings and moving history.

Owns the argument parsers and their ``--help`` texts; the commands themselves are in
``relay.cli.mapping_commands`` (mapping) and ``relay.ops.replay`` (replay). Runs on the CLI's main thread.
Every edit reads the stored version, applies the change, validates the result (an invalid one is
refused with its key paths, nothing stored), and stores it with compare-and-set on the version it
read; ``--dry-run`` shows the effect and stores nothing.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from relay.cli import values
from relay.cli.mapping_commands import (
    STORE_HELP,
    Handler,
    cmd_db,
    cmd_diff,
    cmd_history,
    cmd_import,
    cmd_key,
    cmd_resolve,
    cmd_rollback,
    cmd_show,
    cmd_table,
    cmd_tag,
    cmd_topic,
    cmd_validate,
    open_from_args,
)

# --- the parsers -----------------------------------------------------------------------------


def _run(handler: Handler) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        store = open_from_args(args)
        try:
            return handler(args, store)
        finally:
            store.close()

    return run


def _store_options() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("where the mapping is stored")
    g.add_argument("-c", "--config", help="relay config (conf/relay.yaml): use its mapping.* settings")
    g.add_argument("-f", "--file", help="the mapping YAML file (history in FILE.history/)")
    g.add_argument(
        "--zookeeper", metavar="HOSTS", help="ZooKeeper hosts (host:port[,...]): use the node store"
    )
    g.add_argument(
        "--zk-path", default="/canal-relay/mapping", help="the node (default /canal-relay/mapping)"
    )
    g.add_argument(
        "--zk-auth",
        metavar="USER:PASSWORD",
        help="digest identity allowed to edit (default: $RELAY_MAPPING_ZK_AUTH)",
    )
    g.add_argument(
        "--mysql",
        metavar="URL",
        help="mysql://user:pass@host:port whose tables --all/--live list (default: the config's "
        "source; the account needs to see the tables in information_schema)",
    )
    return p


def _edit_options() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("every edit")
    g.add_argument("--dry-run", action="store_true", help="show what would change; store nothing")
    g.add_argument(
        "--live",
        action="store_true",
        help="also list the live server's physical tables that move to another topic",
    )
    g.add_argument(
        "--expect-version",
        type=int,
        metavar="N",
        help="refuse unless the stored version is N (default: the version just read)",
    )
    g.add_argument("--note", help="a note kept in the history (default: the command line)")
    return p


_DB_HELP = {
    "add": "add a logical db (refused if it exists)",
    "set": "change fields of a logical db",
    "remove": "remove a logical db and its tables",
}
_TABLE_HELP = {
    "add": "add a logical table to a logical db (refused if it exists)",
    "set": "change fields of a logical table",
    "remove": "remove a logical table (its physical tables then follow the db's unclaimed_tables rule)",
}


def add_mapping_parser(subparsers: Any) -> None:
    """``relay mapping COMMAND``: show, resolve, validate, diff, history, rollback, import and edits."""
    store, edit = _store_options(), _edit_options()
    top = subparsers.add_parser(
        "mapping",
        help="show, check and edit the logical db/table → topic mapping (versioned, validated, atomic)",
        description="Every edit reads the stored mapping, applies the change, validates the result "
        "(refused with the offending key paths, nothing stored), and stores it as the next version with "
        "a compare-and-set on the version it read (a concurrent edit gets a conflict error). Running "
        "relays switch to the new version at a batch boundary. " + STORE_HELP,
    )
    sub = top.add_subparsers(dest="mapping_command", required=True, metavar="COMMAND")

    p = sub.add_parser("show", parents=[store], help="print the current mapping (or --version N)")
    p.add_argument("--version", dest="at", type=int, metavar="N", help="a stored version instead")
    p.set_defaults(func=_run(cmd_show))

    p = sub.add_parser(
        "resolve",
        parents=[store],
        help="where a physical table's changes go",
        description="Prints the topic, logical names, key, tag, codec, the rule deciding it and the "
        "effective column controls (columns: include/exclude/hash/mask/truncate). With --all, "
        "every table of a live server: published, dropped, unmapped, and ambiguous or invalid (two "
        "claimants, column controls that do not fit the table's columns; exit 1 if any).",
    )
    p.add_argument("tables", nargs="*", metavar="DB.TABLE", help="physical names, e.g. shop_07.orders_33")
    p.add_argument("--all", action="store_true", help="every table of the live server (--mysql or -c)")
    p.add_argument("--json", action="store_true", help="with --all: machine-readable output")
    p.set_defaults(func=_run(cmd_resolve))

    p = sub.add_parser(
        "validate",
        parents=[store],
        help="check the stored mapping (or FILE); with -c or --mysql also against the server's tables",
        description="Exit 0 when valid; otherwise every problem with its key path (exit 2). Checked always: "
        "names, regexes, templates, overlapping patterns (an example name one pattern matches that the "
        "other matches too: shop_\\d+ beside shop_.*), one codec per topic, not empty, column controls "
        "(N, hash algorithm, salt_env, none on a key column the mapping writes). With -c CONFIG or "
        "--mysql URL, when the server answers within 5 s, also every table it has (two claimants, two "
        "codecs in one topic that only real names show) and the column controls against each table's "
        "columns (unknown columns, primary key columns, truncate of a non-text column); when it does not, "
        "a warning says the patterns were checked against each other only. Every edit checks the same way.",
    )
    p.add_argument("source_file", nargs="?", metavar="FILE", help="a mapping file instead of the store")
    p.add_argument("--live", action="store_true", help="require the server's tables (fail if unreachable)")
    p.set_defaults(func=_run(cmd_validate))

    p = sub.add_parser(
        "diff",
        parents=[store],
        help="what changes between two versions or files",
        description="OLD and NEW are version numbers or mapping files; defaults: the previous version and "
        "the current one. Prints the logical changes, then a unified diff of the canonical YAML.",
    )
    p.add_argument("old", nargs="?", help="version number or file (default: current version - 1)")
    p.add_argument("new", nargs="?", help="version number or file (default: the current mapping)")
    p.add_argument("--live", action="store_true", help="also list the live tables that move")
    p.set_defaults(func=_run(cmd_diff))

    p = sub.add_parser(
        "history",
        parents=[store],
        help="every stored version: time, who, what changed, which relay runs it",
        description="Lists every stored version (time, who, what changed, the note), marks the version "
        "each known relay runs (`<= runs on …`) and the one it refused, then lists the relays: the one of "
        "-c CONFIG (its status file), its HA replicas (ZooKeeper, with ha.enabled), with a ZooKeeper "
        "store every relay reading the node, and with --cluster HOSTS every cluster instance reading "
        "this mapping (INSTANCE@NODE, as its node publishes it), wherever it runs.",
    )
    p.add_argument(
        "--cluster",
        metavar="HOSTS",
        help="a cluster's ZooKeeper hosts: also list its instances that read this mapping",
    )
    p.add_argument(
        "--cluster-root", default="/canal-relay", help="the cluster's root node (default /canal-relay)"
    )
    p.set_defaults(func=_run(cmd_history))

    p = sub.add_parser(
        "rollback", parents=[store, edit], help="store an earlier version's content as the next version"
    )
    p.add_argument("version", type=int, help="the version to go back to")
    p.set_defaults(func=_run(cmd_rollback))

    p = sub.add_parser(
        "import",
        parents=[store, edit],
        help="store a mapping file as the next version (or the first one)",
        description="Validates FILE and stores it: as the next version of an existing mapping, or as the "
        "first version of an empty store (e.g. a new ZooKeeper node).",
    )
    p.add_argument("source_file", metavar="FILE", help="the mapping YAML to store")
    p.set_defaults(func=_run(cmd_import))

    _add_db_parsers(sub, store, edit)
    _add_field_parsers(sub, store, edit)


def _add_db_parsers(sub: Any, store: argparse.ArgumentParser, edit: argparse.ArgumentParser) -> None:
    db = sub.add_parser("db", help="add / set / remove a logical db")
    db_sub = db.add_subparsers(dest="action", required=True, metavar="ACTION")
    for action, text in _DB_HELP.items():
        p = db_sub.add_parser(action, parents=[store, edit], help=text, description=text)
        p.add_argument("name", metavar="LOGICAL_DB")
        if action != "remove":
            p.add_argument(
                "--physical",
                nargs="+",
                metavar="REGEX",
                help="physical db patterns (full-match regexes; default: the logical name)",
            )
            p.add_argument("--topic", help="topic template, e.g. {logical_db} or raw.{db}")
            p.add_argument(
                "--codec",
                choices=("canal-json", "canal-protobuf"),
                help="record value format (default: inherited)",
            )
            p.add_argument(
                "--unclaimed-tables",
                dest="unclaimed_tables",
                choices=("own_name", "unmapped", "drop"),
                help="tables of the db no logical table claims: own_name, unmapped or drop",
            )
            p.add_argument(
                "--key-shard",
                dest="key_shard",
                metavar="SHARD",
                help="shard identity in the record keys of its tables: none, physical or column:NAME "
                "(default: inherited)",
            )
            p.add_argument(
                "--clear",
                nargs="+",
                metavar="FIELD",
                help="unset fields: topic codec unclaimed_tables key_shard",
            )
        p.set_defaults(func=_run(cmd_db))
    table = sub.add_parser("table", help="add / set / remove a logical table")
    t_sub = table.add_subparsers(dest="action", required=True, metavar="ACTION")
    for action, text in _TABLE_HELP.items():
        p = t_sub.add_parser(action, parents=[store, edit], help=text, description=text)
        p.add_argument("name", metavar="LOGICAL_DB.LOGICAL_TABLE")
        if action != "remove":
            p.add_argument(
                "--physical",
                nargs="+",
                metavar="REGEX",
                help="physical table patterns (full-match regexes; default: the logical name)",
            )
            p.add_argument("--topic", help="its own topic (default: the db's topic)")
            p.add_argument(
                "--key", nargs="+", metavar="COLUMN", help="key columns (default: the primary key)"
            )
            p.add_argument(
                "--key-shard",
                dest="key_shard",
                metavar="SHARD",
                help="shard identity in the record key: none, physical or column:NAME (default: inherited)",
            )
            p.add_argument("--tag", help="sent as the relay.tag header")
            p.add_argument(
                "--codec",
                choices=("canal-json", "canal-protobuf"),
                help="record value format (default: inherited)",
            )
            p.add_argument(
                "--clear", nargs="+", metavar="FIELD", help="unset fields: topic key key_shard tag codec"
            )
        p.set_defaults(func=_run(cmd_table))


def _add_field_parsers(sub: Any, store: argparse.ArgumentParser, edit: argparse.ArgumentParser) -> None:
    specs = (
        (
            "topic",
            cmd_topic,
            "LOGICAL_DB[.LOGICAL_TABLE]",
            "TOPIC",
            "a logical db's or table's own topic (remove: inherit again)",
        ),
        ("tag", cmd_tag, "LOGICAL_DB.LOGICAL_TABLE", "TAG", "a logical table's tag header"),
        (
            "key",
            cmd_key,
            "LOGICAL_DB.LOGICAL_TABLE",
            "COLUMN",
            "a logical table's key columns (add appends, set replaces, remove drops some or all)",
        ),
    )
    for noun, handler, target, value, text in specs:
        p = sub.add_parser(noun, help=f"add / set / remove {text}")
        verbs = p.add_subparsers(dest="action", required=True, metavar="ACTION")
        for action in ("add", "set", "remove"):
            v = verbs.add_parser(action, parents=[store, edit], help=f"{action} {text}")
            v.add_argument("target", metavar=target)
            nargs = "*" if noun == "key" or action == "remove" else 1
            v.add_argument("value", nargs=nargs, metavar=value)
            v.set_defaults(func=_run(handler))


def add_replay_parser(subparsers: Any) -> None:
    """``relay replay --remap``: move retained records to the topics the current mapping names."""
    p = subparsers.add_parser(
        "replay",
        help="re-publish records retained in topics under the current mapping (--remap)",
        description="Reads every record retained in the --from topics and re-publishes those the current "
        "mapping now routes to another topic into that topic, with the same value, sequence and headers "
        "(logical names and tag updated), keyed as the current mapping keys them, in change order. Records "
        "still routed to the topic they are in, and dropped tables, are left alone. A running relay moves "
        "a table's history by itself when its mapping sends the table elsewhere (mapping.move: copy); this "
        "is for history it did not move. Records the destination already holds are skipped, and a replay "
        "that would place records behind newer changes of their table is refused before anything is "
        "published. Progress goes to stderr; the offsets done are saved to --checkpoint after "
        "every delivered chunk, so a re-run resumes.",
    )
    p.add_argument("-c", "--config", required=True, help="relay config: Kafka settings and the mapping store")
    p.add_argument("--remap", action="store_true", required=True, help="route by the current mapping")
    p.add_argument(
        "--from",
        dest="topics",
        nargs="+",
        required=True,
        metavar="TOPIC",
        help="topics whose retained records are read",
    )
    p.add_argument(
        "--checkpoint", help="progress file (default: replay-<topics>.json in the state directory)"
    )
    p.add_argument(
        "--restart", action="store_true", help="ignore the checkpoint and start from the beginning"
    )
    p.add_argument("--dry-run", action="store_true", help="count what would move; publish nothing")
    p.add_argument(
        "--chunk", type=values.positive_int, default=500, help="records per delivered chunk (default 500)"
    )
    p.add_argument(
        "--accept-gaps",
        action="store_true",
        help="records the checkpoint still needs were deleted (retention, DeleteRecords): continue from "
        "where the logs start now and list the gaps in the report (without it the run stops naming them, "
        "exit 2)",
    )
    p.set_defaults(func=cmd_replay)


def cmd_replay(args: argparse.Namespace) -> int:
    from relay.config.load import load_config
    from relay.ops.replay import ReplayOptions, replay_remap

    config = load_config(args.config)
    options = ReplayOptions(
        topics=tuple(args.topics),
        checkpoint=Path(args.checkpoint) if args.checkpoint else None,
        restart=args.restart,
        dry_run=args.dry_run,
        chunk=args.chunk,
        accept_gaps=args.accept_gaps,
    )
    report = replay_remap(config, options, progress=lambda line: print(line, file=sys.stderr, flush=True))
    print(report.describe())
    return 0
