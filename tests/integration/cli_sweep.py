"""The bad-input sweep's matrix: every ``relay`` subcommand, from the CLI's own parser, × the failure classes
an operator meets (``tests/integration/test_bad_input.py`` runs it).

Nothing here names a subcommand: the commands are the parser's leaves, and a command's arguments are filled
from what the parser says of each one — its name (``dest``), its help text, its ``type`` (a value the type
accepts is found by trying samples, a value it refuses likewise) and its choices — so a command added later
is swept without editing this file. A *world* holds what every case starts from: a relay config, a node
config, a mapping, an instance definition, all pointing at the real services of the test session; each
failure class breaks one thing of it (an endpoint, a file, a value) for every command that has an input the
class reaches, and says what the one error line must name (the cause and the setting or flag to change).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from relay.cli.main import build_parser


@dataclass(frozen=True)
class Command:
    """One leaf of the parser: its words (``("mapping", "db", "add")``) and its parser."""

    words: tuple[str, ...]
    parser: argparse.ArgumentParser

    @property
    def name(self) -> str:
        return " ".join(self.words)

    @property
    def actions(self) -> list[argparse.Action]:
        return [a for a in self.parser._actions if a.dest != "help" and not isinstance(a, _HELP_TYPES)]

    def action(self, dest: str) -> argparse.Action | None:
        return next((a for a in self.actions if a.dest == dest), None)

    def has(self, dest: str) -> bool:
        return self.action(dest) is not None

    def config_kind(self) -> str | None:
        """``relay`` or ``node``: which config ``-c`` takes (its help names a node's settings), or None."""
        action = self.action("config")
        if action is None:
            return None
        return "node" if "node" in (action.help or "") else "relay"

    def mutually_exclusive(self, dest: str) -> set[str]:
        """The dests that exclude ``dest``."""
        out: set[str] = set()
        for group in self.parser._mutually_exclusive_groups:
            dests = {a.dest for a in group._group_actions}
            if dest in dests:
                out |= dests - {dest}
        return out

    @property
    def long_running(self) -> bool:
        """Its description says it runs until stopped (``relay run``, ``relay cluster run``, a mirror)."""
        text = " ".join((self.parser.description or "").split()).lower()
        return any(w in text for w in ("until stopped", "until sigterm", "long-running", "keeps running"))


_HELP_TYPES = (argparse._HelpAction, argparse._VersionAction)


def commands() -> list[Command]:
    """Every leaf subcommand of ``relay`` (the parser's own tree)."""
    out: list[Command] = []

    def walk(parser: argparse.ArgumentParser, words: tuple[str, ...]) -> None:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            out.append(Command(words, parser))
            return
        for sub in subs:
            for name, child in sub.choices.items():
                walk(child, (*words, name))

    walk(build_parser(), ())
    return out


# -- values a type accepts or refuses, found by trying ---------------------------------------------------

GOOD_SAMPLES = (
    "1", "2", "0.5", "mysql-bin.000001", "mysql-bin.000001:4", "sweep.orders", "x=1", "a.b=1",
    "2026-01-01T00:00:00+00:00", "1767225600000", "0-1-5", "3E11FA47-71CA-11E1-9E33-C80AA9429562:1-5",
    "earliest", "mysql,kafka", "W1", "mysql://u:p@127.0.0.1:3306", "shop_00.orders_00", ".*",
)  # fmt: skip
BAD_SAMPLES = ("not-a-value!", "-7", "a:b:c", "[", "", "yesterday")


def _accepts(action: argparse.Action, text: str) -> bool:
    if action.choices is not None:
        return text in action.choices
    if action.type is None:
        return True
    try:
        action.type(text)  # type: ignore[misc,operator]
    except (argparse.ArgumentTypeError, ValueError, TypeError):
        return False
    except Exception:
        return False
    return True


def good_value(action: argparse.Action) -> str:
    if action.choices is not None:
        return str(next(iter(action.choices)))
    return next((s for s in GOOD_SAMPLES if _accepts(action, s)), "x")


def bad_value(action: argparse.Action) -> str | None:
    """A value the option's type or choices refuse (None: it takes any text)."""
    if action.type is None and action.choices is None:
        return None
    return next((s for s in BAD_SAMPLES if not _accepts(action, s)), None)


def takes_value(action: argparse.Action) -> bool:
    return action.nargs != 0


# -- the world -------------------------------------------------------------------------------------------


@dataclass
class World:
    """The sound setup every case starts from (real services), and the broken things classes use."""

    root: Path
    prefix: str  # the schema: {prefix}_00.orders_00 → logical {prefix}.orders, topic {prefix}.orders
    mysql: Any
    bootstrap: str
    zookeeper: str
    refused: int  # a port nobody listens on
    silent: int  # a port that accepts and never answers
    nogrant_user: str
    nogrant_password: str
    relay: dict[str, Any] = field(default_factory=dict)
    node: dict[str, Any] = field(default_factory=dict)
    mapping: dict[str, Any] = field(default_factory=dict)

    @property
    def logical(self) -> str:
        return f"{self.prefix}.orders"

    @property
    def physical(self) -> str:
        return f"{self.prefix}_00.orders_00"

    @property
    def topic(self) -> str:
        return f"{self.prefix}.orders"

    def mysql_url(self, port: int | None = None, user: str | None = None, password: str | None = None) -> str:
        m = self.mysql
        return (
            f"mysql://{user or m.replication_user}:{password or m.replication_password}@{m.host}:"
            f"{port or m.port}"
        )


@dataclass
class Case:
    """One command under one failure class, in its own folder."""

    command: Command
    kind: str  # the failure class, or "baseline"
    argv: list[str]
    folder: Path
    expect: tuple[tuple[str, ...], ...] = ()  # groups of words: the error names one of each group
    env: dict[str, str] = field(default_factory=dict)
    no_dac: bool = False  # run without root's power over file modes (a file of mode 000 is unreadable)

    @property
    def id(self) -> str:
        return f"{self.command.name} / {self.kind}"


@dataclass
class Inputs:
    """What one case's arguments and files are: the world's, with the class's change applied."""

    world: World
    folder: Path
    relay: dict[str, Any]
    node: dict[str, Any]
    mapping: dict[str, Any]
    overrides: dict[str, str | None] = field(default_factory=dict)  # dest → value (None: leave out)
    relay_text: str | None = None  # the relay config's text as written (a malformed file)
    mapping_text: str | None = None
    node_text: str | None = None
    no_dac: bool = False
    unreadable: set[str] = field(default_factory=set)  # which files get mode 000 (and no_dac)

    def write(self) -> dict[str, Path]:
        self.folder.mkdir(parents=True, exist_ok=True)
        os.chmod(self.folder, 0o777)
        paths = {
            "relay": self.folder / "relay.yaml",
            "node": self.folder / "node.yaml",
            "mapping": self.folder / "mapping.yaml",
            "definition": self.folder / "definition.yaml",
        }
        self.relay.setdefault("mapping", {}).setdefault("file", str(paths["mapping"]))
        self.relay.setdefault("state_dir", str(self.folder / "state"))
        self.node.setdefault("node", {}).setdefault("state_dir", str(self.folder / "nodes"))
        texts = {
            "relay": self.relay_text or yaml.safe_dump(self.relay),
            "node": self.node_text or yaml.safe_dump(self.node),
            "mapping": self.mapping_text or yaml.safe_dump(self.mapping),
            "definition": yaml.safe_dump({k: v for k, v in self.relay.items() if k not in ("instance",)}),
        }
        for name, path in paths.items():
            path.write_text(texts[name])
            os.chmod(path, 0o000 if name in self.unreadable else 0o644)
        return paths


def _value(command: Command, action: argparse.Action, inputs: Inputs, paths: dict[str, Path]) -> str:
    """The sound value of an argument, from what the parser says of it."""
    w, dest, text = inputs.world, action.dest, (action.help or "").lower()
    by_dest: dict[str, Callable[[], str]] = {
        "config": lambda: str(paths["node" if command.config_kind() == "node" else "relay"]),
        "source_file": lambda: str(paths["mapping"]),
        "mysql": w.mysql_url,
        "bootstrap_servers": lambda: w.bootstrap,
        "kafka": lambda: w.bootstrap,
        "zookeeper": lambda: w.zookeeper,
        "topics": lambda: w.topic,
        "from_": lambda: w.topic,
        "out": lambda: str(inputs.folder / "mirror"),
        "checkpoint": lambda: str(inputs.folder / "checkpoint"),
        "table": lambda: w.logical if "logical" in text else w.physical,
        "tables": lambda: w.physical,
        "instance": lambda: f"{w.prefix}-i",
        "name": lambda: f"{w.prefix}-i" if "instance" in text or command.words[0] == "instance" else "sweepx",
        "target": lambda: w.prefix,
        "value": lambda: "sweep.other",
        "node": lambda: "sweep-node",
        "state_dir": lambda: str(inputs.folder / "dev"),
        "positions": lambda: str(inputs.folder / "positions.json"),
    }
    if dest == "file":
        if "mapping" in text:
            return str(paths["mapping"])
        if "definition" in text:
            return str(paths["definition"])
    if dest in by_dest and (action.type is None or _accepts(action, by_dest[dest]())):
        return by_dest[dest]()
    return good_value(action)


# Servers a command without a config is given by flag; ZooKeeper's default is $RELAY_ZOOKEEPER (the test
# sets it to the world's), so --zookeeper is given only where a class breaks it.
ENDPOINTS = ("mysql", "bootstrap_servers", "kafka")


def build(command: Command, inputs: Inputs, extra: dict[str, str | None] | None = None) -> list[str]:
    """The command's argv: every required argument, and the optional ones the class sets."""
    paths = inputs.write()
    overrides = {**inputs.overrides, **(extra or {})}
    argv = list(command.words)
    excluded: set[str] = set()
    for dest, value in overrides.items():
        if value is not None and command.has(dest):
            excluded |= command.mutually_exclusive(dest)
    positionals: list[str] = []
    for action in command.actions:
        dest = action.dest
        given = dest in overrides
        required = action.required or (not action.option_strings and action.nargs not in ("?", "*"))
        group_required = any(
            g.required and action in g._group_actions for g in command.parser._mutually_exclusive_groups
        )
        if dest in excluded or (given and overrides[dest] is None):
            continue
        if group_required and not given:
            # the group's first member, unless the class chose another of it
            group = next(g for g in command.parser._mutually_exclusive_groups if action in g._group_actions)
            if group._group_actions[0] is not action or any(
                a.dest in overrides for a in group._group_actions
            ):
                continue
            required = True
        if dest == "config" and not excluded & {"config"}:
            required = True  # a command that reads a config reads the world's, unless the class says not
        if dest in ENDPOINTS and not command.has("config"):
            required = True  # the world's servers, never a default address that may be anyone's
        if not (required or given):
            continue
        if not takes_value(action):
            argv.append(action.option_strings[-1])
            continue
        value = overrides[dest] if given else _value(command, action, inputs, paths)
        assert value is not None
        if action.option_strings:
            argv += [action.option_strings[-1], value]
        else:
            positionals.append(value)
    return argv + positionals


# -- the failure classes ---------------------------------------------------------------------------------


def _relay_input(command: Command) -> bool:
    return command.config_kind() == "relay"


def _has_any(command: Command, *dests: str) -> bool:
    return any(command.has(d) for d in dests)


def _file_inputs(command: Command) -> bool:
    return command.config_kind() is not None or _has_any(command, "source_file", "file")


Kind = Callable[[Command, Inputs], "Case | None"]


def _case(command: Command, kind: str, inputs: Inputs, expect: list[tuple[str, ...]], **extra: Any) -> Case:
    env = extra.pop("env", {})
    argv = build(command, inputs, extra.pop("args", None))
    return Case(command, kind, argv, inputs.folder, tuple(expect), env, inputs.no_dac)


def broker(port_of: Callable[[World], int]) -> Kind:
    def make(command: Command, inputs: Inputs) -> Case | None:
        if not (_relay_input(command) or _has_any(command, "bootstrap_servers", "kafka")):
            return None
        address = f"127.0.0.1:{port_of(inputs.world)}"
        inputs.relay["kafka"]["bootstrap_servers"] = address
        args = {d: address for d in ("bootstrap_servers", "kafka") if command.has(d)}
        names = ("kafka.bootstrap_servers", "--bootstrap-servers", "--kafka")
        return _case(command, "", inputs, [(address,), names], args=args)

    return make


def source(port_of: Callable[[World], int]) -> Kind:
    def make(command: Command, inputs: Inputs) -> Case | None:
        if not (_relay_input(command) or command.has("mysql")):
            return None
        port = port_of(inputs.world)
        inputs.relay["source"]["port"] = port
        args = {"mysql": inputs.world.mysql_url(port)} if command.has("mysql") else {}
        names = ("source.port", "source.host", "--mysql")
        return _case(command, "", inputs, [(f"127.0.0.1:{port}",), names], args=args)

    return make


def source_denied(command: Command, inputs: Inputs) -> Case | None:
    if not (_relay_input(command) or command.has("mysql")):
        return None
    w = inputs.world
    inputs.relay["source"].update(user=w.nogrant_user, password=w.nogrant_password)
    args = (
        {"mysql": w.mysql_url(user=w.nogrant_user, password=w.nogrant_password)}
        if command.has("mysql")
        else {}
    )
    return _case(
        command, "", inputs, [(w.nogrant_user,), ("source.user", "--mysql", "GRANT", "grant")], args=args
    )


def zookeeper_refused(command: Command, inputs: Inputs) -> Case | None:
    kind = command.config_kind()
    if kind is None and not _has_any(command, "zookeeper", "instance"):
        return None
    address = f"127.0.0.1:{inputs.world.refused}"
    inputs.relay["ha"] = {"enabled": True, "zookeeper": address, "connect_timeout_seconds": 5.0}
    inputs.relay["positions"] = {"backend": "zookeeper"}
    inputs.node["zookeeper"]["hosts"] = address
    inputs.node["zookeeper"]["connect_timeout_seconds"] = 5.0
    args: dict[str, str | None] = {}
    if command.has("zookeeper"):
        args["zookeeper"] = address
        args["config"] = None  # the hosts from the flag, not from a config
    if command.has("instance") and command.mutually_exclusive("instance"):  # -c or --instance: the cluster
        args["instance"] = f"{inputs.world.prefix}-i"
    names = ("ha.zookeeper", "--zookeeper", "zookeeper.hosts", "mapping.zookeeper.hosts", "RELAY_ZOOKEEPER")
    return _case(command, "", inputs, [(address,), names], args=args)


def s3_refused(command: Command, inputs: Inputs) -> Case | None:
    if not _has_any(command, "out", "against", "storage_option"):
        return None
    endpoint = f"http://127.0.0.1:{inputs.world.refused}"
    options = [f"AWS_ENDPOINT_URL={endpoint}", "AWS_ALLOW_HTTP=true", "AWS_REGION=us-east-1"]
    args: dict[str, str | None] = {}
    if command.has("out"):
        args["out"] = "s3://sweep-bucket/mirror"
        args["checkpoint"] = str(inputs.folder / "checkpoint")
    if command.has("against"):
        args["against"] = "mirror:s3://sweep-bucket/mirror/x"
    if command.has("root"):  # relay spark bench: where its tables go
        args["root"] = "s3://sweep-bucket/bench"
    env = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}
    argv_extra = (
        [x for o in options for x in ("--storage-option", o)] if command.has("storage_option") else []
    )
    case = _case(
        command, "", inputs, [(f"127.0.0.1:{inputs.world.refused}", "s3://sweep-bucket"),
                              ("AWS_ENDPOINT_URL", "--storage-option", "--out", "--against")],
        args=args, env=env,
    )  # fmt: skip
    case.argv += argv_extra
    return case


def config_missing(command: Command, inputs: Inputs) -> Case | None:
    if not _file_inputs(command):
        return None
    missing = str(inputs.folder / "no-such-dir" / "missing.yaml")
    args = {d: missing for d in ("config", "source_file") if command.has(d)}
    if command.has("file") and not (command.action("file") and command.action("file").type):  # type: ignore[union-attr]
        args["file"] = missing
    return _case(command, "", inputs, [(missing,)], args=args)


def config_unreadable(command: Command, inputs: Inputs) -> Case | None:
    if not _file_inputs(command):
        return None
    inputs.unreadable = {"relay", "node", "mapping", "definition"}
    inputs.no_dac = True
    return _case(command, "", inputs, [("relay.yaml", "node.yaml", "mapping.yaml", "definition.yaml"),
                                      ("ermission", "cannot read", "not readable")])  # fmt: skip


def config_malformed(command: Command, inputs: Inputs) -> Case | None:
    if not _file_inputs(command):
        return None
    broken = "source:\n  host: [127.0.0.1\n  port: 3306\n"
    inputs.relay_text = inputs.node_text = broken
    inputs.mapping_text = "logical_dbs:\n  shop: {physical: [\n"
    return _case(command, "", inputs, [(".yaml",), ("re::\\d+:\\d+", "line")])


def config_types(command: Command, inputs: Inputs) -> Case | None:
    kind = command.config_kind()
    if kind is None and not command.has("file"):
        return None
    inputs.relay["source"]["port"] = "three"
    inputs.relay["publish"] = {"batch_size": [1]}
    inputs.node["node"]["capacity"] = "many"
    inputs.node["zookeeper"]["session_timeout_seconds"] = {"a": 1}
    return _case(command, "", inputs, [("source.port", "publish.batch_size", "node.capacity",
                                        "zookeeper.session_timeout_seconds")])  # fmt: skip


def config_uri(command: Command, inputs: Inputs) -> Case | None:
    if not (command.config_kind() or _has_any(command, "mysql", "bootstrap_servers", "kafka", "zookeeper")):
        return None
    inputs.relay["kafka"]["bootstrap_servers"] = "http://broker:nope/"
    inputs.node["zookeeper"]["hosts"] = "zk://x:y:z"
    args = {
        "mysql": "mysql//u@:x",
        "bootstrap_servers": "http://broker:nope/",
        "kafka": "http://broker:nope/",
        "zookeeper": "zk://x:y:z",
    }
    args = {k: v for k, v in args.items() if command.has(k)}
    names = ("kafka.bootstrap_servers", "zookeeper.hosts", "--mysql", "--bootstrap-servers", "--kafka",
             "--zookeeper")  # fmt: skip
    return _case(command, "", inputs, [names], args=args)  # type: ignore[arg-type]


def mapping_missing(command: Command, inputs: Inputs) -> Case | None:
    if not _relay_input(command):
        return None
    missing = str(inputs.folder / "gone" / "mapping.yaml")
    inputs.relay["mapping"] = {"file": missing}
    return _case(command, "", inputs, [(missing,), ("mapping.file",)])


def mapping_malformed(command: Command, inputs: Inputs) -> Case | None:
    if not (_relay_input(command) or _has_any(command, "source_file")):
        return None
    inputs.mapping_text = "logical_dbs:\n  shop: {physical: [\n"
    return _case(command, "", inputs, [("mapping.yaml",), ("re::\\d+:\\d+", "line")])


def unknown_table(command: Command, inputs: Inputs) -> Case | None:
    if not _has_any(command, "table", "tables"):
        return None
    args = {"table": "nosuchdb.nosuchtable", "tables": "nosuchdb.nosuchtable"}
    return _case(command, "", inputs, [("nosuchdb.nosuchtable", "nosuchdb"),],
                 args={k: v for k, v in args.items() if command.has(k)})  # fmt: skip


def unknown_topic(command: Command, inputs: Inputs) -> Case | None:
    if not _has_any(command, "topics", "from_"):
        return None
    args = {"topics": "sweep.nosuchtopic", "from_": "sweep.nosuchtopic"}
    return _case(command, "", inputs, [("sweep.nosuchtopic",)],
                 args={k: v for k, v in args.items() if command.has(k)})  # fmt: skip


def bad_flag(command: Command, inputs: Inputs) -> Case | None:
    """Every option with a type or choices, one at a time, given a value it refuses (the first such
    option's case is this class's; the test adds the rest cheaply: the parser refuses them before any
    work)."""
    for action in command.actions:
        bad = bad_value(action)
        if bad is not None and action.option_strings and takes_value(action):
            flag = action.option_strings[-1]
            case = _case(command, "", inputs, [(flag,)])
            case.argv += [flag, bad]
            return case
    return None


def missing_program(command: Command, inputs: Inputs) -> Case | None:
    """No server program on PATH (MariaDB, Java, ZooKeeper): what starts one must say which to install."""
    env = {"PATH": str(inputs.folder / "empty-bin")}
    (inputs.folder / "empty-bin").mkdir(parents=True, exist_ok=True)
    # where a server is optional, none is given: a command that starts its own then does
    no_servers: dict[str, str | None] = {
        d: None for d in ENDPOINTS if (a := command.action(d)) is not None and not a.required
    }
    return _case(command, "", inputs, [("mariadbd", "mariadb", "java", "zookeeper", "PATH", "install")],
                 env=env, args=no_servers)  # fmt: skip


CLASSES: dict[str, Kind] = {
    "broker unreachable (refused)": broker(lambda w: w.refused),
    "broker unreachable (silent)": broker(lambda w: w.silent),
    "source unreachable": source(lambda w: w.refused),
    "source permission missing": source_denied,
    "zookeeper unreachable": zookeeper_refused,
    "s3 endpoint unreachable": s3_refused,
    "config/mapping file missing": config_missing,
    "config/mapping file unreadable": config_unreadable,
    "config/mapping malformed YAML": config_malformed,
    "config value of a wrong type": config_types,
    "bad URI or address": config_uri,
    "mapping file missing": mapping_missing,
    "mapping malformed YAML": mapping_malformed,
    "unknown table": unknown_table,
    "unknown topic": unknown_topic,
    "flag value of a wrong type": bad_flag,
    "server program missing": missing_program,
}

# Commands whose sound run is heavy (it starts servers, Spark or a benchmark): no baseline is run for
# them, so every failure of theirs must name its class's cause.
HEAVY = frozenset({"demo", "dev up", "bench", "spark bench", "spark mirror"})


def inputs_for(world: World, folder: Path) -> Inputs:
    return Inputs(
        world,
        folder,
        json.loads(json.dumps(world.relay)),
        json.loads(json.dumps(world.node)),
        json.loads(json.dumps(world.mapping)),
    )


def matrix(world: World) -> Iterator[Case]:
    """Every case: a baseline per command (the sound world; none for the heavy ones) and every class
    that reaches one of its inputs."""
    for n, command in enumerate(commands()):
        base = world.root / f"c{n:03d}"
        if command.name not in HEAVY:
            inputs = inputs_for(world, base / "baseline")
            yield Case(command, "baseline", build(command, inputs), inputs.folder)
        applied = 0
        for k, (kind, make) in enumerate(CLASSES.items()):
            if make is missing_program and applied and command.name not in HEAVY:
                continue  # only where nothing else reaches the command, or it starts servers itself
            inputs = inputs_for(world, base / f"k{k:02d}")
            case = make(command, inputs)
            if case is not None:
                case.kind = kind
                applied += make is not bad_flag
                yield case
            else:
                shutil.rmtree(inputs.folder, ignore_errors=True)


def not_applicable(world: World) -> list[tuple[str, str]]:
    """(command, class) pairs no input of the command reaches."""
    out = []
    for command in commands():
        for kind, make in CLASSES.items():
            probe = inputs_for(world, world.root / "probe")
            if make(command, probe) is None:
                out.append((command.name, kind))
    shutil.rmtree(world.root / "probe", ignore_errors=True)
    return out
