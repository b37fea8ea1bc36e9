"""``relay bench --cluster``'s arithmetic and report (pure): ZooKeeper's answers parsed, per-instance deltas,
medians and maxima of hand-over times, the new owner's first acknowledged batch found among the position
node's versions, the options the command line makes. The measurements themselves run against real
services in ``relay bench --cluster`` and are never asserted as timed tests."""

from __future__ import annotations

import argparse
import json
import os

import pytest

from relay.cli.bench import add_bench_parser, cluster_options_from_args, render_cluster_report
from relay.dev.bench.cluster_probe import (
    TreeMemory,
    ZkCounts,
    descendants,
    parse_mntr,
    parse_zxid,
    tree_memory,
)
from relay.dev.bench.cluster_stats import (
    ClusterResult,
    Handover,
    PositionVersion,
    ZkPhase,
    first_advance,
    render_cluster,
)
from relay.errors import ArgumentError, BenchError

MNTR = "zk_version\t3.8.0-5a02a05eddb59aee6ac762f7ea82e92a68eb9c0f\nzk_znode_count\t45\nzk_watch_count\t12\n"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="relay")
    add_bench_parser(parser.add_subparsers(dest="command"))
    return parser


def _result() -> ClusterResult:
    r = ClusterResult(instances=4, kill=2, session_seconds=10.0, rows_per_s=20.0)
    r.handovers = [
        [Handover("h00", 11.0, 13.0, 10.2), Handover("h01", 11.5, 15.0, 10.2)],
        [Handover("h02", 10.5, 12.0, 10.4), Handover("h03", 12.0, 20.0, 10.4)],
    ]
    r.zk_idle = ZkPhase(0, ZkCounts(20, 2, 6, 2, 1000, 500, 10), 0.5, 1.0)
    r.zk_loaded = ZkPhase(4, ZkCounts(60, 14, 30, 10, 2000, 4500, 900), 2.5, 41.0)
    r.busy_writes_per_s = 7.25
    r.zk_filtered = ZkPhase(4, ZkCounts(60, 14, 30, 10, 2100, 4500, 990), 6.5, 50.0)
    r.census = {"destinations": 1, "destinations/<i>": 4, "destinations/<i>/schema/*": 12, "leader": 1}
    r.memory_idle = [TreeMemory(100.0, 80.0, 1), TreeMemory(102.0, 82.0, 1), TreeMemory(98.0, 81.0, 1)]
    r.memory_loaded = [TreeMemory(500.0, 320.0, 5), TreeMemory(510.0, 322.0, 5), TreeMemory(490.0, 318.0, 5)]
    return r


def test_zookeepers_answers_are_parsed() -> None:
    assert parse_mntr(MNTR)["zk_znode_count"] == "45"
    assert (
        parse_zxid("Zookeeper version: 3.8.0\nLatency min/avg/max: 0/0.1/5\nZxid: 0x1a2\nMode: standalone\n")
        == 418
    )
    with pytest.raises(BenchError, match="no Zxid"):
        parse_zxid("Mode: standalone\n")


def test_per_instance_deltas_medians_and_maxima() -> None:
    r = _result()
    assert r.first_ack() == {"median": 14.0, "max": 20.0, "min": 12.0}
    assert r.elected() == {"median": 11.25, "max": 12.0, "min": 10.5}
    assert r.last_per_repeat() == [15.0, 20.0]
    assert r.node_gone() == {"median": 10.3, "max": 10.4, "min": 10.2}  # once per repeat
    per = r.zk_per_instance()
    assert per == {
        "znodes": 10.0,
        "ephemerals": 3.0,
        "watches": 6.0,
        "connections": 2.0,
        "data_bytes": 1000.0,
        "writes_per_s": 0.5,
        "requests_per_s": 10.0,
    }
    m = r.memory()
    assert m["idle_node_pss_mb"] == 81.0 and m["loaded_node_pss_mb"] == 320.0
    assert m["per_instance_pss_mb"] == pytest.approx(59.75)
    assert m["per_instance_rss_mb"] == pytest.approx(100.0)
    data = json.loads(json.dumps(r.to_json()))
    assert data["handover"]["first_ack_s"]["max"] == 20.0
    assert data["zookeeper"]["per_instance"]["watches"] == 6.0
    assert data["zookeeper"]["filtered_writes_per_s_per_instance"] == 1.5
    assert data["handover"]["runs"][1][1] == {
        "instance": "h03",
        "elected_s": 12.0,
        "first_ack_s": 20.0,
        "node_gone_s": 10.4,
    }


def test_the_report_shows_every_figure() -> None:
    text = render_cluster(_result())
    assert "SIGKILL -> first acknowledged batch on another node  median 14.0 s   max 20.0 s" in text
    assert "repeat 2: first acknowledged batch after 12.0, 20.0 s" in text
    assert "the node's session expired (record gone)  median 10.3 s   max 10.4 s" in text
    assert "watches" in text and "6.0" in text
    assert "requests/s (all kinds)           1.00         41.00         10.00" in text
    assert "writes/s per instance with 20 rows/s written into it: 7.25" in text
    assert "writes/s per idle instance while its server writes 20 uncaptured rows/s: 1.50" in text
    assert "destinations/<i>/schema/*" in text and "   3.0" in text and "leader" not in text
    assert "per instance                PSS 59.8 MB   RSS 100.0 MB" in text
    empty = render_cluster(ClusterResult(4, 2, 10.0, 20.0))
    assert "ZooKeeper load: not measured" in empty and "median -" in empty


def _v(version: int, epoch: int, position: str, mtime: int) -> PositionVersion:
    return PositionVersion(version, epoch, position, mtime)


def test_the_new_owners_first_acknowledged_batch() -> None:
    seen = [_v(7, 3, "p7", 100), _v(8, 3, "p8", 200), _v(9, 4, "p8", 900), _v(10, 4, "p9", 1000)]
    # version 9 only rewrote where the old owner stopped; 10 is the first batch the new one acknowledged
    assert first_advance(seen, 3) == (seen[3], False)
    assert first_advance(seen[:3], 3) is None  # no batch acknowledged yet
    assert first_advance(seen[:2], 3) is None  # no new owner yet
    gap = [_v(7, 3, "p7", 100), _v(9, 4, "p9", 900)]  # version 8 was not read: compared with p7, flagged
    assert first_advance(gap, 3) == (gap[1], True)


def test_cluster_options_from_the_command_line() -> None:
    args = _parser().parse_args(
        ["bench", "--cluster", "--quick", "--cluster-kill", "3", "--cluster-session", "4"]
    )
    o = cluster_options_from_args(args)
    assert (o.kill, o.instances, o.repeat, o.session_seconds, o.window_seconds) == (3, 4, 1, 4.0, 5.0)
    full = cluster_options_from_args(_parser().parse_args(["bench", "--cluster", "--repeat", "5"]))
    assert (full.kill, full.instances, full.repeat, full.session_seconds, full.rows_per_s) == (
        3,
        8,
        5,
        10.0,
        20.0,
    )
    machine = {
        "date": "d",
        "cpus": 2,
        "cpu": "c",
        "python": "3.11",
        "mysql": "m",
        "kafka": "k",
        "zookeeper": "z",
        "command": "relay bench --cluster",
    }
    assert render_cluster_report(_result(), machine).startswith("relay bench --cluster — d, 2 CPUs (c)")


def test_cluster_options_without_cluster_are_refused() -> None:
    from relay.cli.bench import cmd_bench

    with pytest.raises(ArgumentError, match="only with --cluster"):
        cmd_bench(_parser().parse_args(["bench", "--cluster-kill", "2"]))


def test_a_process_trees_memory_is_summed() -> None:
    me = tree_memory(os.getpid())
    assert os.getpid() in descendants(os.getpid())
    assert me.processes >= 1 and me.rss_mb > 10 and 0 < me.pss_mb <= me.rss_mb + 1


def test_the_znode_census_names_paths_by_kind() -> None:
    from kazoo.exceptions import NoNodeError

    from relay.dev.bench.cluster_probe import znode_census

    tree = {
        "/r": ["instances", "destinations", "leader"],
        "/r/instances": ["i00", "i01"],
        "/r/destinations": ["i00", "i01"],
        "/r/destinations/i00": ["schema", "position"],
        "/r/destinations/i00/schema": ["v1", "v2"],
        "/r/destinations/i01": ["position"],
    }

    class Tree:
        def get_children(self, path: str) -> list[str]:
            if path not in tree and not path.startswith("/r"):
                raise NoNodeError
            return tree.get(path, [])

    census = znode_census(Tree(), "/r", ["i00", "i01"])
    assert census == {
        "destinations": 1,
        "destinations/<i>": 2,
        "destinations/<i>/position": 2,
        "destinations/<i>/schema": 1,
        "destinations/<i>/schema/*": 2,
        "instances": 1,
        "instances/<i>": 2,
        "leader": 1,
    }
