"""``relay instance add|update|remove|list|show|history|validate``: instance definitions in ZooKeeper.

Owns the parsers, their ``--help`` texts and what each command prints. The definitions, their checks
and their store are ``relay.cluster``'s. Runs on the CLI's main thread. Every edit validates the YAML
file exactly as ``relay.yaml`` is validated (refused with the offending keys, nothing stored), then
stores it as the next version with a compare-and-set on the version it read (a concurrent edit gets a
conflict error); ``--dry-run`` shows the change against the stored version and stores nothing.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from relay.cli import values
from relay.cluster.definition import InstanceDefinition, parse_definition
from relay.cluster.diff import changes, summary, text_diff
from relay.cluster.store import ZooKeeperInstanceStore
from relay.cluster.versions import StoredVersion
from relay.common.redact import register_secret
from relay.errors import ClusterError, ConfigError, InstanceNotFoundError

Handler = Callable[[argparse.Namespace, ZooKeeperInstanceStore], int]
ZOOKEEPER_ENV = "RELAY_ZOOKEEPER"
AUTH_ENV = "RELAY_CLUSTER_ZK_AUTH"

_DESCRIPTION = (
    "Instance definitions — the sections of relay.yaml that describe one source (source, filter, store, "
    "positions, mapping, kafka, publish, schema, snapshot) — stored in ZooKeeper under "
    "ROOT/instances/NAME, versioned with their history, for the nodes of a cluster to run. A definition "
    "is validated as relay.yaml is (every problem at once, each naming its key; nothing stored), and "
    "must also keep its position where any node reads it (positions.backend zookeeper or kafka), name a "
    "mapping every node reads (mapping.store: zookeeper, or an absolute mapping.file), and give every "
    "secret as a ${NAME} reference: it is stored as written and resolved from the environment of the "
    "node that runs the instance. Node settings (state_dir, ha, metrics, logging, status) are refused. "
    "Edits are compare-and-set on the version read: a concurrent edit gets a conflict error."
)


def add_instance_parser(subparsers: Any) -> None:
    """``relay instance COMMAND``."""
    where = _where_options()
    top = subparsers.add_parser(
        "instance",
        help="add, change, remove and list a cluster's instance definitions (versioned, in ZooKeeper)",
        description=_DESCRIPTION,
    )
    sub = top.add_subparsers(dest="instance_command", required=True, metavar="COMMAND")
    for action, text, more in (
        (
            "add",
            "store a new instance from a YAML file (refused if it is defined)",
            "Stores FILE as version 1 of NAME — or, for an instance removed before, as the version after "
            "its removal, continuing its history. Refused, with every problem, when FILE is not a valid "
            "definition, and when NAME is defined.",
        ),
        (
            "update",
            "store a new version of an instance from a YAML file",
            "Stores FILE as the next version of NAME, after printing what changes (key by key, then the "
            "text). Refused when FILE is not a valid definition, or when the stored version is not the one "
            "read (or --expect-version N): a concurrent edit won; nothing stored.",
        ),
    ):
        p = sub.add_parser(action, parents=[where], help=text, description=more)
        p.add_argument("name", metavar="NAME", help="the instance's name (letters, digits, . _ -)")
        p.add_argument("file", metavar="FILE", help="the definition: relay.yaml's instance sections")
        _edit_options(p, expect=action == "update")
        p.set_defaults(func=_run(cmd_add if action == "add" else cmd_update))
    p = sub.add_parser(
        "validate",
        help="check a definition file as add/update would, without ZooKeeper (exit 0: valid)",
        description="Checks FILE exactly as `add` and `update` do (relay.yaml's validation and the "
        "cluster's rules: node settings, secrets as ${NAME}, a shared position and mapping), every problem "
        "at once with its key (exit 2); reads nothing from ZooKeeper and stores nothing.",
    )
    p.add_argument("name", metavar="NAME", help="the instance's name")
    p.add_argument("file", metavar="FILE", help="the definition")
    p.set_defaults(func=cmd_validate)
    p = sub.add_parser(
        "remove",
        parents=[where],
        help="remove an instance (a tombstone version: its history stays)",
        description="Stores a removal as the instance's next version: nodes stop running it, its "
        "history stays readable, and a later `add` of the same name continues that history. Its "
        "positions (ROOT/destinations/NAME) are kept.",
    )
    p.add_argument("name", metavar="NAME")
    _edit_options(p, expect=True)
    p.set_defaults(func=_run(cmd_remove))
    p = sub.add_parser("list", parents=[where], help="the defined instances, with their versions")
    p.add_argument("--all", action="store_true", help="also the removed ones")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_run(cmd_list))
    p = sub.add_parser("show", parents=[where], help="an instance's definition as stored (or --version N)")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--version", dest="at", type=values.positive_int, metavar="N", help="a stored version")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_run(cmd_show))
    p = sub.add_parser("history", parents=[where], help="every version of an instance: when, who, what")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_run(cmd_history))


def _where_options() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("the cluster's ZooKeeper")
    g.add_argument(
        "--zookeeper",
        metavar="HOSTS",
        default=os.environ.get(ZOOKEEPER_ENV) or "127.0.0.1:2181",
        help="ZooKeeper hosts, host:port[,host:port...][/chroot] as ha.zookeeper "
        f"(default: ${ZOOKEEPER_ENV}, else 127.0.0.1:2181)",
    )
    g.add_argument(
        "--root", default="/canal-relay", help="the cluster's root node, as ha.root (default /canal-relay)"
    )
    g.add_argument(
        "--zk-auth",
        metavar="USER:PASSWORD",
        help=f"digest identity of the editors: definitions it creates are editable by it only, readable "
        f"by all (default: ${AUTH_ENV})",
    )
    g.add_argument(
        "--timeout",
        type=values.positive_float,
        default=10.0,
        metavar="SECONDS",
        help="connect / session timeout (default 10)",
    )
    return p


def _edit_options(p: argparse.ArgumentParser, *, expect: bool) -> None:
    p.add_argument(
        "--dry-run", action="store_true", help="show the change against the stored version; store nothing"
    )
    if expect:
        p.add_argument(
            "--expect-version",
            type=values.positive_int,
            metavar="N",
            help="refuse unless the stored version is N (default: the version just read)",
        )
    p.add_argument("--note", help="a note kept in the history (default: the command)")


def _run(handler: Handler) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        auth = args.zk_auth or os.environ.get(AUTH_ENV) or None
        if auth:
            register_secret(auth.partition(":")[2])  # never in an error line
        store = ZooKeeperInstanceStore(args.zookeeper, args.root, args.timeout, auth)
        try:
            return handler(args, store)
        finally:
            store.close()

    return run


# --- edits -----------------------------------------------------------------------------------


def _definition(args: argparse.Namespace) -> InstanceDefinition:
    path = Path(args.file)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(str(path), f"cannot read the definition: {exc}") from exc
    return parse_definition(args.name, text, str(path))


def _note(args: argparse.Namespace) -> str:
    if args.note is not None:
        return str(args.note)
    source = f" from {args.file}" if getattr(args, "file", None) else ""
    return f"relay instance {args.instance_command}{source}"


def _print_change(old: StoredVersion | None, new: InstanceDefinition | None, label: str) -> None:
    before = old.definition if old is not None else None
    for line in changes(_doc(before), _doc(new)) or ["(no setting changes)"]:
        print(line)
    old_label = f"{label} version {old.info.version}" if old is not None and before else "(none)"
    text = text_diff(before.text if before else "", new.text if new else "", old_label, "(new)")
    if text:
        print(text, end="")


def cmd_validate(args: argparse.Namespace) -> int:
    definition = _definition(args)
    print(f"{args.file}: a valid definition of instance {definition.name}")
    return 0


def cmd_add(args: argparse.Namespace, store: ZooKeeperInstanceStore) -> int:
    definition = _definition(args)
    try:
        current: StoredVersion | None = store.current(args.name)
    except InstanceNotFoundError:
        current = None
    if current is not None and current.definition is not None:
        raise ClusterError(
            f"{args.name}: already defined (version {current.info.version}); change it with "
            "`relay instance update`"
        )
    store.check_fleet(definition)  # a clash with another instance: refused, dry run or not
    _print_change(None, definition, args.name)
    if args.dry_run:
        print(f"dry run: nothing stored ({args.name} is not defined in {store.name})")
        return 0
    info = store.add(definition, note=_note(args))
    print(f"stored {args.name} version {info.version} in {store.name}")
    return 0


def cmd_update(args: argparse.Namespace, store: ZooKeeperInstanceStore) -> int:
    definition = _definition(args)
    current = store.read(args.name)
    store.check_fleet(definition)
    expected = current.info.version if args.expect_version is None else args.expect_version
    _print_change(current, definition, args.name)
    if args.dry_run:
        print(f"dry run: nothing stored ({args.name} stays at version {current.info.version})")
        return 0
    if current.text == definition.text and expected == current.info.version:
        print(f"no change; {args.name} stays at version {current.info.version}")
        return 0
    info = store.update(definition, expected=expected, note=_note(args))
    print(f"stored {args.name} version {info.version} in {store.name} (was {current.info.version})")
    return 0


def cmd_remove(args: argparse.Namespace, store: ZooKeeperInstanceStore) -> int:
    current = store.read(args.name)
    expected = current.info.version if args.expect_version is None else args.expect_version
    _print_change(current, None, args.name)
    if args.dry_run:
        print(f"dry run: nothing stored ({args.name} stays at version {current.info.version})")
        return 0
    info = store.remove(args.name, expected=expected, note=_note(args))
    print(f"removed {args.name}: version {info.version} in {store.name} records the removal")
    return 0


# --- reports ---------------------------------------------------------------------------------


def cmd_list(args: argparse.Namespace, store: ZooKeeperInstanceStore) -> int:
    rows: list[dict[str, Any]] = []
    for name in store.names():
        stored = store.current(name)
        if stored.definition is None and not args.all:
            continue
        source = (_doc(stored.definition) or {}).get("source") or {}
        where = f"{source.get('host', '127.0.0.1')}:{source.get('port', 3306)}" if stored.definition else ""
        rows.append({**stored.info.as_dict(), "source": where})
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print(f"no instances defined in {store.name}")
        return 0
    for row in rows:
        state = "removed" if row["removed"] else row["source"]
        print(f"{row['instance']:<24} v{row['version']:<5} {row['saved']:<20}  {row['by']:<24}  {state}")
    return 0


def cmd_show(args: argparse.Namespace, store: ZooKeeperInstanceStore) -> int:
    stored = store.read(args.name) if args.at is None else store.version(args.name, args.at)
    info = stored.info
    if args.json:
        out = {**info.as_dict(), "definition": stored.text, "settings": _doc(stored.definition)}
        print(json.dumps(out, indent=2, default=str))
        return 0
    note = f' "{info.note}"' if info.note else ""
    state = ", removed" if info.removed else ""
    print(f"# {store.name}/{args.name}, version {info.version}{state} ({info.saved} by {info.by}){note}")
    print(stored.text, end="")
    return 0


def cmd_history(args: argparse.Namespace, store: ZooKeeperInstanceStore) -> int:
    out: list[dict[str, Any]] = []
    previous: dict[str, Any] | None = None
    for info in store.history(args.name):
        stored = store.version(args.name, info.version)
        doc = _doc(stored.definition)
        out.append({**info.as_dict(), "summary": summary(previous, doc)})
        previous = doc
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    for row in out:
        note = f'  "{row["note"]}"' if row["note"] else ""
        print(
            f"{row['version']:>6}  {row['saved'] or '-':<20}  {row['by'] or '-':<24}  {row['summary']}{note}"
        )
    return 0


def _doc(definition: InstanceDefinition | None) -> dict[str, Any] | None:
    return definition.document if definition is not None else None
