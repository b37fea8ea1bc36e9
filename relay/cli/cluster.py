"""``relay cluster run|drain|rebalance|status`` (and ``child``, what a node starts per instance).

Owns the parsers, their ``--help`` texts, the node's signal handling and what each command prints. The
node, its children, placement and the ZooKeeper layout are ``relay.cluster``'s. Runs on the CLI's main
thread; ``run`` then is the node's loop (``relay.cluster.node``), ``child`` the instance's relay.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from types import FrameType
from typing import TYPE_CHECKING, Any

from kazoo.client import KazooClient

from relay.cli import values
from relay.cli.instance import ZOOKEEPER_ENV
from relay.cluster.children import EXIT_SCHEMA_HELD
from relay.cluster.layout import read_view
from relay.cluster.node_config import load_node_config
from relay.cluster.report import cluster_report
from relay.common import zookeeper
from relay.common.redact import redact, redact_value, register_secret
from relay.errors import (
    ClusterError,
    ClusterUnavailableError,
    SchemaError,
    ZooKeeperUnavailableError,
)

if TYPE_CHECKING:
    from relay.daemon.pipeline import Relay

_DESCRIPTION = (
    "A cluster's nodes. `relay cluster run -c node.yaml` joins the cluster (ZooKeeper ROOT/nodes/NAME), "
    "takes part in the election of the leader (which places the instances defined with `relay instance` "
    "over the live nodes: balanced within one instance, capacities respected, sticky), and runs each "
    "instance assigned to it as a child process of its own, an HA relay fenced by the instance's epoch. "
    "drain hands a node's instances over gracefully, rebalance --dry-run prints the plan, status shows "
    "nodes, instances and pending moves."
)


def add_cluster_parser(subparsers: Any) -> None:
    """``relay cluster COMMAND``."""
    top = subparsers.add_parser(
        "cluster", help="run a cluster node; drain, rebalance, status", description=_DESCRIPTION
    )
    sub = top.add_subparsers(dest="cluster_command", required=True, metavar="COMMAND")
    run = sub.add_parser(
        "run",
        help="run a cluster node: join, take part in the leader election, run the instances assigned here",
        description="Runs until stopped: joins the cluster named in node.yaml (conf/node.yaml documents "
        "every key) — while ZooKeeper does not answer it tries again (1 s doubling to 30 s, one warning "
        "line per attempt) — and runs, each as its own process, the instances the leader assigns to this "
        "node; a crashed instance is "
        "restarted with a backoff, one moved away is stopped with SIGTERM (it drains: in-flight batches "
        "acked, position saved). With no answer from ZooKeeper for half its session timeout (cut off, "
        "frozen) it stops every instance (SIGKILL by three quarters of it) before its session can expire, "
        "and runs none until ZooKeeper answers; when its session is lost it joins again. SIGTERM/SIGINT "
        "hand every instance over (the node marks itself drained, waits until they run elsewhere or the "
        "stop bound passes) and exit 0.",
    )
    run.add_argument("-c", "--config", required=True, help="the node's settings file, e.g. conf/node.yaml")
    run.set_defaults(func=cmd_run)
    child = sub.add_parser(
        "child",
        help="one instance's process, as a node starts it (not run by hand)",
        description="Runs INSTANCE until stopped, as `relay run` would, with the config built in this "
        "process from its "
        "stored definition and the node's settings (secrets resolved from this environment), HA on the "
        "cluster's ZooKeeper. Stops (draining) when the node that started it is gone. A node starts one per "
        "instance it is assigned; run by hand it refuses unless the node named in node.yaml is live.",
    )
    child.add_argument("-c", "--config", required=True, help="the node's settings file")
    child.add_argument("--instance", required=True, help="the instance to run")
    child.set_defaults(func=cmd_child)
    where = _where_options()
    drain = sub.add_parser(
        "drain",
        parents=[where],
        help="hand a node's instances over to the other nodes, gracefully (--undo: take instances again)",
        description="Marks NODE drained (ROOT/drained/NODE, kept across the node's restarts): the leader "
        "moves its instances to the other nodes; each one drains on NODE (in-flight batches acked, "
        "position saved) and is released, then runs on its new node. With --wait, waits until no "
        "instance is assigned to NODE or active on it (exit 1 at --wait-timeout). --undo removes the mark: "
        "NODE takes a fair share again. The node keeps running either way. A NODE that is not live is "
        "marked for when it joins, and every call says so (a misspelt name); `status` lists such marks.",
    )
    drain.add_argument("node", metavar="NODE", help="the node's name (node.name in its node.yaml)")
    drain.add_argument("--undo", action="store_true", help="remove the drain mark")
    drain.add_argument("--wait", action="store_true", help="wait until the node runs no instance")
    drain.add_argument(
        "--wait-timeout", type=values.positive_float, default=300.0, metavar="SECONDS", help="default 300"
    )
    drain.set_defaults(func=cmd_drain)
    move = sub.add_parser(
        "move",
        parents=[where],
        help="move an instance to a node and pin it there (--unpin: let placement decide again)",
        description="Pins INSTANCE to NODE (ROOT/pins/INSTANCE): the leader's placement moves it there — "
        "gracefully, it drains on its old node first — and keeps it there while NODE is live, not drained "
        "and has room; to keep the balance another instance may leave NODE (the last by name). A pin to a "
        "node that is not eligible waits until it is (the instance runs where placement puts it "
        "meanwhile). --unpin removes the pin: the instance stays where it runs unless placement moves it.",
    )
    move.add_argument("instance", metavar="INSTANCE", help="a defined instance (`relay instance list`)")
    move.add_argument("node", metavar="NODE", nargs="?", help="the node to run it on")
    move.add_argument("--unpin", action="store_true", help="remove the instance's pin")
    move.set_defaults(func=cmd_move)
    rebalance = sub.add_parser(
        "rebalance",
        parents=[where],
        help="print the moves the leader's placement makes from the current assignment (--dry-run)",
        description="Computes, from the live nodes, the defined instances and the current assignment, the "
        "plan the leader applies (relay.cluster.placement) and prints its moves with their reasons. The "
        "leader applies the plan by itself whenever nodes or instances change, so only --dry-run is offered: "
        "to move instances, change what placement sees (drain a node, change a capacity, add a node).",
    )
    rebalance.add_argument(
        "--dry-run", action="store_true", required=True, help="print the plan; change nothing"
    )
    rebalance.set_defaults(func=cmd_rebalance)
    status = sub.add_parser(
        "status",
        parents=[where],
        help="nodes (capacity, load, session), instances (node, state, lag, last error), pending moves",
        description="Reads the cluster's state from ZooKeeper: every live node (capacity, load, drained, "
        "leader, session), every instance (assigned node, node it is active on and its epoch, state, lag, "
        "restarts, last error, as its node last published them) and the moves the leader has still to "
        "make; an instance stopped on a schema error is HELD (not restarted) until `relay schema resync "
        "--instance`. Exit status 0 when every defined instance is active on its assigned node, 1 "
        "otherwise, 2 when there is no cluster under the root (no live node, no instance: a wrong --root or "
        "ZooKeeper).",
    )
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.set_defaults(func=cmd_status)


def _where_options() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("the cluster's ZooKeeper (from -c node.yaml, or the options)")
    g.add_argument("-c", "--config", help="a node's settings file: its zookeeper section")
    g.add_argument(
        "--zookeeper",
        metavar="HOSTS",
        help=f"ZooKeeper hosts (default: ${ZOOKEEPER_ENV}, else 127.0.0.1:2181)",
    )
    g.add_argument("--root", help="the cluster's root node (default /canal-relay)")
    g.add_argument(
        "--timeout", type=values.positive_float, default=10.0, metavar="SECONDS", help="default 10"
    )
    return p


def _connect(args: argparse.Namespace) -> tuple[KazooClient, str]:
    hosts, root, auth = os.environ.get(ZOOKEEPER_ENV) or "127.0.0.1:2181", "/canal-relay", None
    setting = f"${ZOOKEEPER_ENV}" if os.environ.get(ZOOKEEPER_ENV) else "--zookeeper (default 127.0.0.1:2181)"
    if args.config:
        node = load_node_config(args.config)
        hosts, root, auth = node.zookeeper.hosts, node.root, node.zookeeper.auth or None
        setting = f"zookeeper.hosts of {args.config}"
    if args.zookeeper:
        setting = "--zookeeper"
    hosts, root = args.zookeeper or hosts, (args.root or root).rstrip("/") or "/"
    if auth:
        register_secret(auth.partition(":")[2])
    try:
        client = zookeeper.start_client(
            hosts, session_timeout=args.timeout, connect_timeout=args.timeout, auth=auth, setting=setting
        )
    except ZooKeeperUnavailableError as exc:
        raise ClusterUnavailableError(str(exc)) from exc
    return client, root


def _close(client: KazooClient) -> None:
    client.stop()
    client.close()


# --- the node and its children ---------------------------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:
    from relay.cli.running import setup_logging
    from relay.cluster.children import Children
    from relay.cluster.node import ClusterNode
    from relay.cluster.node_metrics import serve_metrics

    config = load_node_config(args.config)
    setup_logging(config.logging.level, config.logging.format, args.verbose)
    config_file = os.path.abspath(args.config)

    def command(instance: str, version: int) -> list[str]:
        del version  # the child reads the current one
        verbose = ["-" + "v" * args.verbose] if args.verbose else []
        return [
            sys.executable,
            "-m",
            "relay.cli",
            *verbose,
            "cluster",
            "child",
            "-c",
            config_file,
            "--instance",
            instance,
        ]

    from pathlib import Path

    node = ClusterNode(config, Children(command, Path(config.settings().state_dir), config.children))

    def stop(signum: int, frame: FrameType | None) -> None:
        node.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if config.metrics.port:
        serve_metrics(node, config.metrics.host, config.metrics.port)
    return node.run()


def cmd_child(args: argparse.Namespace) -> int:
    from relay.cli.running import run_relay
    from relay.cluster.child import NodeWatchdog, instance_config, with_metrics_port

    node = load_node_config(args.config)
    config, _version = instance_config(node, args.instance)
    if node.metrics.port:
        config = with_metrics_port(config)
    watchdogs: list[NodeWatchdog] = []

    def started(relay: Relay) -> None:
        # the relay's own ZooKeeper session (it is always an HA relay here): one session per instance;
        # a start tried again (relay.cli.running) replaces the watchdog of the attempt before
        for old in watchdogs:
            old.close()
        watchdogs.clear()
        leadership = relay.leadership
        watchdog = NodeWatchdog(node, relay.stop, client=leadership.client if leadership else None)
        watchdogs.append(watchdog)
        watchdog.start()

    try:
        return run_relay(config, args.verbose, started)
    except SchemaError as exc:
        # The same place would stop it again after a restart: its node holds it until `relay schema
        # resync --instance` (relay.cluster.holds).
        print(f"relay: error: {redact(str(exc))}", file=sys.stderr, flush=True)
        return EXIT_SCHEMA_HELD
    finally:
        for watchdog in watchdogs:
            watchdog.close()


# --- drain, rebalance, status ----------------------------------------------------------------


def cmd_drain(args: argparse.Namespace) -> int:
    from relay.cluster.control import drain, wait_drained

    client, root = _connect(args)
    try:
        for line in drain(client, root, args.node, undo=args.undo):
            print(line)
        if args.undo or not args.wait:
            return 0
        still = wait_drained(client, root, args.node, args.wait_timeout)
        if not still:
            print(f"{args.node}: runs no instance")
            return 0
        print(f"{args.node}: still runs {', '.join(still)} after {args.wait_timeout:g} s")
        return 1
    finally:
        _close(client)


def cmd_move(args: argparse.Namespace) -> int:
    from relay.cluster.control import pin, unpin

    if bool(args.node) == bool(args.unpin):
        raise ClusterError("give NODE (move the instance there and pin it) or --unpin, not both")
    client, root = _connect(args)
    try:
        lines = (
            unpin(client, root, args.instance) if args.unpin else pin(client, root, args.instance, args.node)
        )
    finally:
        _close(client)
    for line in lines:
        print(line)
    return 0


def cmd_rebalance(args: argparse.Namespace) -> int:
    client, root = _connect(args)
    try:
        view = read_view(client, root)
    finally:
        _close(client)
    plan = view.plan()
    if not view.nodes:
        raise ClusterError(f"no live node under {root}/nodes: nothing to place on")
    for move in plan.moves:
        print(move.describe())
    for name in plan.unplaced:
        print(f"{name}: runs nowhere (no capacity left)")
    loads = ", ".join(f"{name} {load}" for name, load in sorted(plan.loads.items()))
    print(f"{len(plan.moves)} move{'' if len(plan.moves) == 1 else 's'}; loads after: {loads or '-'}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    client, root = _connect(args)
    try:
        report = redact_value(cluster_report(client, root))
    finally:
        _close(client)
    if not report["nodes"] and not report["instances"] and not report["drain_marks"]:
        raise ClusterError(
            f"no cluster under {root}: no live node, no instance defined or assigned there (is {root} the "
            "nodes' zookeeper.root, and the ZooKeeper theirs? `relay instance list` shows what is defined)"
        )
    healthy = all(
        i["node"] is not None and i["running_on"] == i["node"]
        for i in report["instances"].values()
        if i["defined_version"] is not None
    )
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
        return 0 if healthy else 1
    print(f"leader: {report['leader'] or '-'}   balanced: {'yes' if report['balanced'] else 'no'}")
    print(f"{'NODE':<20} {'CAPACITY':>8} {'LOAD':>5}  DRAINED  SESSION             HOST")
    for name, n in report["nodes"].items():
        mark, drained = "*" if n["leader"] else " ", "yes" if n["drained"] else "no"
        print(
            f"{name + mark:<20} {n['capacity']:>8} {n['load']:>5}  {drained:<7}  {n['session']:<18}  "
            f"{n['host']}"
        )
    head = ("INSTANCE", "NODE", "ACTIVE ON", "STATE", "LAG S", "RESTARTS")
    print(f"{head[0]:<20} {head[1]:<16} {head[2]:<16} {head[3]:<12} {head[4]:>6} {head[5]:>8}  LAST ERROR")
    for name, i in report["instances"].items():
        lag = "-" if i["lag_seconds"] is None else f"{i['lag_seconds']:.0f}"
        restarts = "-" if i["restarts"] is None else str(i["restarts"])
        state = "HELD" if i["held"] else (i["state"] or "-")
        print(
            f"{name:<20} {i['node'] or '-':<16} {i['running_on'] or '-':<16} {state:<12} "
            f"{lag:>6} {restarts:>8}  {i['last_error'] or '-'}"
        )
        if i["held"]:
            print(
                f"  held on node {i['held'].get('node')} after a schema error, not restarted until "
                f"`relay schema resync --instance {name} --table SCHEMA.TABLE --yes`"
            )
    for move in report["pending_moves"]:
        source, target = move["from"] or "(not running)", move["to"] or "(stopped)"
        print(f"pending: {move['instance']}: {source} -> {target} ({move['reason']})")
    absent = [name for name in report["drain_marks"] if name not in report["nodes"]]
    if absent:  # a mark left by a misspelt `drain`, or one set ahead for a node that has not joined
        print(f"drained, not live: {', '.join(absent)} (relay cluster drain NAME --undo removes a mark)")
    for name, node in report["pins"].items():
        print(f"pinned: {name} -> {node} (relay cluster move {name} --unpin removes it)")
    return 0 if healthy else 1
