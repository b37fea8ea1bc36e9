"""The mapping model: resolving physical names to routes, validation with exact key paths, the YAML
round trip and the documented example ``conf/mapping.yaml``. Pure logic, no network."""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import mapping.model
from mapping import (
    Defaults,
    LogicalDb,
    LogicalTable,
    Mapping,
    Route,
    TopicSettings,
    UnmappedRule,
    dump_mapping,
    load_mapping,
    parse_mapping,
    save_mapping,
)
from relay.errors import InvalidMappingError, MappingError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "conf" / "mapping.yaml"


def shop(**extra: Any) -> dict[str, Any]:
    """A small valid mapping dict: shop_NN.orders_NN sharded with its own topic, customers unsharded."""
    tree: dict[str, Any] = {
        "logical_dbs": {
            "shop": {
                "physical": [r"shop_\d+"],
                "tables": {
                    "orders": {
                        "physical": [r"orders_\d+"],
                        "topic": "shop.orders",
                        "key": ["id"],
                        "tag": "o",
                    },
                    "customers": {"physical": ["customers"]},
                },
            }
        }
    }
    tree.update(extra)
    return tree


def problems(data: str | dict[str, Any]) -> dict[str, str]:
    """Every (key path → problem) an invalid mapping reports."""
    with pytest.raises(InvalidMappingError) as info:
        parse_mapping(data, source="test.yaml")
    assert info.value.key == "test.yaml"
    for err in info.value.errors:
        assert str(err) in str(info.value)  # the one message lists every problem
    out: dict[str, str] = {}
    for err in info.value.errors:  # one key may have several problems: keep them all
        out[err.key] = f"{out[err.key]}\n{err.problem}" if err.key in out else err.problem
    return out


# --- the example file ------------------------------------------------------------------------


def test_example_file_loads_and_resolves_a_sharded_table() -> None:
    m = load_mapping(EXAMPLE)
    route = m.resolve("shop_07", "orders_33")
    assert route is not None
    assert (route.logical_db, route.logical_table, route.topic) == ("shop", "orders", "shop.orders")
    assert route.tag == "orders" and route.key_columns == ("order_id",) and route.codec == "canal-json"
    assert route.mapped and route.rule == "logical_dbs.shop.tables.orders"
    customers = m.resolve("shop_07", "customers")
    assert customers is not None and (customers.logical_table, customers.topic) == ("customers", "shop")
    other = m.resolve("crm", "leads")
    assert other is not None and not other.mapped and other.topic == "crm"


def test_example_file_states_every_default() -> None:
    """The documented example spells out every global setting with the model's default value."""
    m = load_mapping(EXAMPLE)
    assert m.defaults == Defaults()
    assert m.topics == TopicSettings()
    assert m.unmapped == UnmappedRule()
    text = EXAMPLE.read_text()
    for key in ("unclaimed_tables", "replication_factor", "retention_ms", "create", "config", "tag", "codec"):
        assert f"{key}:" in text


# --- resolve ---------------------------------------------------------------------------------


def test_resolve_sharded_names_match_the_whole_name_case_sensitively() -> None:
    m = parse_mapping(shop())
    for db, table in [("shop_00", "orders_00"), ("shop_15", "orders_63"), ("shop_7", "orders_123")]:
        route = m.resolve(db, table)
        assert route == Route(
            physical_db=db,
            physical_table=table,
            logical_db="shop",
            logical_table="orders",
            topic="shop.orders",
            key_columns=("id",),
            tag="o",
            codec="canal-json",
            mapped=True,
            rule="logical_dbs.shop.tables.orders",
        )
    for db in ("shop_07x", "xshop_07", "SHOP_07", "shop_"):
        route = m.resolve(db, "orders_01")
        assert route is not None and not route.mapped, db
    own = m.resolve("shop_07", "orders_x")  # not a shard name: the table keeps its own name
    assert own is not None and (own.logical_table, own.topic) == ("orders_x", "shop")


def test_topic_inheritance_table_db_defaults() -> None:
    tree = shop(defaults={"topic": "{logical_db}.{logical_table}"})
    m = parse_mapping(tree)
    assert m.resolve("shop_1", "customers").topic == "shop.customers"  # type: ignore[union-attr]
    assert m.resolve("shop_1", "orders_1").topic == "shop.orders"  # type: ignore[union-attr]
    tree["logical_dbs"]["shop"]["topic"] = "cdc.{logical_db}"
    m = parse_mapping(tree)
    assert m.resolve("shop_1", "customers").topic == "cdc.shop"  # type: ignore[union-attr]
    assert m.resolve("shop_1", "orders_1").topic == "shop.orders"  # type: ignore[union-attr]
    assert m.topic_names() == ("cdc.shop", "shop.orders")
    assert parse_mapping({"logical_dbs": {"crm": None}}).topic_names() == ("crm",)


def test_codec_inheritance_table_db_defaults() -> None:
    tree = shop(defaults={"codec": "canal-protobuf"})
    m = parse_mapping(tree)
    assert m.resolve("shop_1", "customers").codec == "canal-protobuf"  # type: ignore[union-attr]
    assert m.resolve("x", "y").codec == "canal-protobuf"  # type: ignore[union-attr]
    tree["logical_dbs"]["shop"]["codec"] = "canal-json"
    tree["logical_dbs"]["shop"]["tables"]["orders"]["codec"] = "canal-protobuf"
    m = parse_mapping(tree)
    assert m.resolve("shop_1", "customers").codec == "canal-json"  # type: ignore[union-attr]
    assert m.resolve("shop_1", "orders_2").codec == "canal-protobuf"  # type: ignore[union-attr]


def test_unmapped_rule_topic_template_and_drop() -> None:
    m = parse_mapping(shop(unmapped={"topic": "raw.{db}.{table}"}))
    route = m.resolve("crm", "leads")
    assert route is not None
    assert (route.topic, route.logical_db, route.logical_table) == ("raw.crm.leads", "crm", "leads")
    assert route.key_columns is None and route.rule == "unmapped" and not route.mapped
    m = parse_mapping(shop(unmapped={"action": "drop"}))
    assert m.unmapped == UnmappedRule.drop()
    assert m.resolve("crm", "leads") is None
    assert m.resolve("shop_1", "orders_1") is not None


def test_unclaimed_tables_setting_per_db_and_default() -> None:
    tree = shop(unmapped={"topic": "raw.{db}"})
    for setting, expected in [("own_name", "shop"), ("unmapped", "raw.shop_3"), ("drop", None)]:
        tree["logical_dbs"]["shop"]["unclaimed_tables"] = setting
        route = parse_mapping(tree).resolve("shop_3", "audit_log")
        assert (route.topic if route else None) == expected, setting
    del tree["logical_dbs"]["shop"]["unclaimed_tables"]
    tree["defaults"] = {"unclaimed_tables": "drop"}
    assert parse_mapping(tree).resolve("shop_3", "audit_log") is None
    assert parse_mapping(tree).resolve("shop_3", "customers") is not None


def test_default_physical_pattern_is_the_logical_name() -> None:
    m = parse_mapping({"logical_dbs": {"crm": {"tables": {"leads": None}}}})
    assert m.logical_dbs[0].physical == ("crm",)
    route = m.resolve("crm", "leads")
    assert route is not None and route.mapped and route.rule == "logical_dbs.crm.tables.leads"
    assert m.resolve("crm2", "leads").mapped is False  # type: ignore[union-attr]


def test_resolve_caches_and_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    m = parse_mapping(shop())
    first = m.resolve("shop_1", "orders_1")
    assert m.resolve("shop_1", "orders_1") is first
    monkeypatch.setattr(mapping.model, "RESOLVE_CACHE_SIZE", 8)
    for i in range(50):
        assert m.resolve(f"shop_{i}", "orders_1") is not None
        assert len(m._cache) <= 8
    assert m.resolve("shop_1", "orders_1") == first


def test_resolve_rejects_a_topic_kafka_would_refuse() -> None:
    m = parse_mapping(shop())
    with pytest.raises(MappingError) as info:
        m.resolve("app$1", "t")  # '$' is legal in a MySQL name, not in a topic name
    assert info.value.key == "unmapped.topic"
    assert "'app$1'" in info.value.problem and "'$'" in info.value.problem


# --- key columns -----------------------------------------------------------------------------


def test_check_columns_names_the_key_path() -> None:
    route = parse_mapping(shop()).resolve("shop_1", "orders_1")
    assert route is not None
    assert route.check_columns(["ID", "amount"]) == ("ID",)  # MySQL column names ignore case
    with pytest.raises(InvalidMappingError) as info:
        route.check_columns(["order_id", "amount"])
    assert [e.key for e in info.value.errors] == ["logical_dbs.shop.tables.orders.key[0]"]
    assert "'id'" in str(info.value) and "shop_1.orders_1" in str(info.value)
    assert parse_mapping(shop()).resolve("shop_1", "customers").check_columns(["a"]) is None  # type: ignore[union-attr]


def test_check_columns_of_a_flat_table_names_where_it_is_written() -> None:
    tree = shop(tables={"shop.items": {"physical": [r"items_\d+"], "key": ["order_id", "line"]}})
    route = parse_mapping(tree).resolve("shop_1", "items_9")
    assert route is not None and route.logical_table == "items" and route.topic == "shop"
    with pytest.raises(InvalidMappingError) as info:
        route.check_columns(["order_id"])
    assert [e.key for e in info.value.errors] == ['tables["shop.items"].key[1]']


# --- validation: each error with its exact key path ------------------------------------------


def test_bad_regex_quotes_the_regex_and_the_error() -> None:
    tree = shop()
    tree["logical_dbs"]["shop"]["tables"]["orders"]["physical"] = [r"orders_\d+", "orders_(\\d+"]
    got = problems(tree)
    assert list(got) == ["logical_dbs.shop.tables.orders.physical[1]"]
    assert "'orders_(\\d+'" in got["logical_dbs.shop.tables.orders.physical[1]"]
    assert "missing ), unterminated subpattern" in got["logical_dbs.shop.tables.orders.physical[1]"]


def test_unknown_keys_everywhere_with_did_you_mean() -> None:
    tree = shop(logical_db={}, topics={"partition": 3})
    tree["logical_dbs"]["shop"]["tabels"] = {}
    tree["logical_dbs"]["shop"]["tables"]["orders"]["keys"] = ["id"]
    got = problems(tree)
    assert set(got) == {
        "logical_db",
        "topics.partition",
        "logical_dbs.shop.tabels",
        "logical_dbs.shop.tables.orders.keys",
    }
    assert "did you mean 'logical_dbs'?" in got["logical_db"]
    assert "did you mean 'partitions'?" in got["topics.partition"]
    assert "did you mean 'tables'?" in got["logical_dbs.shop.tabels"]
    assert "did you mean 'key'?" in got["logical_dbs.shop.tables.orders.keys"]


def test_wrong_types() -> None:
    tree = shop(version="1", topics={"partitions": "3", "create": "yes", "retention_ms": 1.5})
    tree["logical_dbs"]["shop"]["physical"] = r"shop_\d+"
    tree["logical_dbs"]["shop"]["tables"]["orders"]["key"] = ["id", 7]
    tree["logical_dbs"]["shop"]["tables"]["customers"] = ["customers"]
    got = problems(tree)
    assert set(got) == {
        "version",
        "topics.partitions",
        "topics.create",
        "topics.retention_ms",
        "logical_dbs.shop.physical",
        "logical_dbs.shop.tables.orders.key[1]",
        "logical_dbs.shop.tables.customers",
    }
    assert "expected a list" in got["logical_dbs.shop.physical"]
    assert "expected a mapping" in got["logical_dbs.shop.tables.customers"]
    assert problems([1, 2]) == {"(top level)": "expected a mapping of keys, got a list"}  # type: ignore[arg-type]


def test_empty_and_duplicate_patterns() -> None:
    tree = shop()
    tree["logical_dbs"]["shop"]["physical"] = []
    tree["logical_dbs"]["shop"]["tables"]["orders"]["physical"] = [r"orders_\d+", "", r"orders_\d+"]
    got = problems(tree)
    assert set(got) == {
        "logical_dbs.shop.physical",
        "logical_dbs.shop.tables.orders.physical[1]",
        "logical_dbs.shop.tables.orders.physical[2]",
    }
    assert "empty list" in got["logical_dbs.shop.physical"]


def test_unknown_logical_db_and_double_definition_in_flat_tables() -> None:
    tree = shop(
        tables={
            "shpo.items": {"physical": ["items"]},
            "shop.orders": {"physical": ["o"]},
            "noprefix": {},
        }
    )
    got = problems(tree)
    assert set(got) == {'tables["shpo.items"]', 'tables["shop.orders"]', "tables.noprefix"}
    assert "unknown logical db 'shpo'" in got['tables["shpo.items"]']
    assert "did you mean 'shop'?" in got['tables["shpo.items"]']
    assert "also defined at logical_dbs.shop.tables.orders" in got['tables["shop.orders"]']


def test_codec_topic_template_and_setting_values() -> None:
    tree = shop(
        defaults={"codec": "avro", "unclaimed_tables": "keep"},
        topics={"partitions": 0, "replication_factor": 0, "retention_ms": -2, "config": {"retention.ms": 5}},
        unmapped={"action": "topic", "topic": "raw.{database}"},
    )
    tree["logical_dbs"]["shop"]["topic"] = "shop orders"
    tree["logical_dbs"]["shop"]["tables"]["orders"]["topic"] = ".."
    tree["logical_dbs"]["shop"]["tables"]["customers"]["topic"] = "c" * 250
    got = problems(tree)
    assert set(got) == {
        "defaults.codec",
        "defaults.unclaimed_tables",
        "topics.partitions",
        "topics.replication_factor",
        "topics.retention_ms",
        "topics.config.retention.ms",
        "unmapped.topic",
        "logical_dbs.shop.topic",
        "logical_dbs.shop.tables.orders.topic",
        "logical_dbs.shop.tables.customers.topic",
    }
    assert "'avro' is not one of canal-json, canal-protobuf" in got["defaults.codec"]
    assert "unknown placeholder {database}" in got["unmapped.topic"]
    assert "' '" in got["logical_dbs.shop.topic"]
    assert "'.' and '..'" in got["logical_dbs.shop.tables.orders.topic"]
    assert "longer than 249" in got["logical_dbs.shop.tables.customers.topic"]


def test_expanded_topic_length_is_checked_statically() -> None:
    tree = shop(defaults={"topic": "x" * 240 + ".{logical_db}.{logical_table}"})
    got = problems(tree)
    assert set(got) == {"defaults.topic"}  # only customers uses it: orders has its own topic
    assert "of shop.customers: longer than 249" in got["defaults.topic"]
    tree = shop()
    tree["logical_dbs"]["shop"]["topic"] = "y" * 246 + ".{logical_db}"
    got = problems(tree)
    assert set(got) == {"logical_dbs.shop.topic"}
    assert got["logical_dbs.shop.topic"].count("longer than 249") == 2  # the db's own topic, customers


def test_key_columns_names_and_unmapped_rule_shapes() -> None:
    tree = shop(unmapped={"action": "drop", "topic": "{db}"})
    tree["logical_dbs"]["shop"]["tables"]["orders"]["key"] = ["id", "ID"]
    tree["logical_dbs"]["shop"]["tables"]["customers"]["key"] = []
    tree["logical_dbs"]["bad.name"] = {"physical": ["b"]}
    got = problems(tree)
    assert set(got) == {
        "unmapped.topic",
        "logical_dbs.shop.tables.orders.key[1]",
        "logical_dbs.shop.tables.customers.key",
        'logical_dbs["bad.name"]',
    }
    assert "omit key to use the primary key" in got["logical_dbs.shop.tables.customers.key"]


def test_all_errors_reported_together_in_one_message() -> None:
    tree = shop(topics={"partitions": 0}, colour="blue")
    tree["logical_dbs"]["shop"]["physical"] = ["shop_("]
    with pytest.raises(InvalidMappingError) as info:
        parse_mapping(tree, source="conf/mapping.yaml")
    message = str(info.value)
    assert message.startswith("conf/mapping.yaml: 3 problems:")
    for key in ("colour", "topics.partitions", "logical_dbs.shop.physical[0]"):
        assert f"  - {key}: " in message


def test_yaml_syntax_error_has_line_and_column() -> None:
    text = "version: 1\nlogical_dbs:\n  shop:\n    physical: [shop_1\n"
    got = problems(text)
    (where,) = got
    assert where.startswith("test.yaml:") and where.count(":") == 2
    line, column = (int(n) for n in where.split(":")[1:])
    assert line >= 4 and column >= 1
    # In "double quotes" a backslash is a YAML escape: the classic mistake with regexes.
    ((where, problem),) = problems('logical_dbs:\n  shop:\n    physical: ["shop_\\d+"]\n').items()
    assert where.startswith("test.yaml:3:") and "escape" in problem


def test_yaml_duplicate_key_is_an_error() -> None:
    text = "logical_dbs:\n  shop: {}\n  crm: {}\n  shop: {physical: [x]}\n"
    got = problems(text)
    assert got == {"test.yaml:4:3": "YAML error: duplicate key 'shop' (first written on line 2)"}


# --- overlaps --------------------------------------------------------------------------------


def test_static_overlap_identical_patterns_and_literal_names() -> None:
    tree = shop()
    tree["logical_dbs"]["shop2"] = {"physical": ["shop_07"]}  # a literal name the shop regex matches
    tree["logical_dbs"]["shop3"] = {"physical": [r"shop_\d+"]}  # identical
    tree["logical_dbs"]["shop"]["tables"]["legacy"] = {"physical": [r"orders\_01"]}  # escaped literal
    got = problems(tree)
    assert set(got) == {
        "logical_dbs.shop2.physical[0]",
        "logical_dbs.shop3.physical[0]",
        "logical_dbs.shop.tables.legacy.physical[0]",
    }
    assert "'shop_07' matches both" in got["logical_dbs.shop2.physical[0]"]
    assert "identical patterns" in got["logical_dbs.shop3.physical[0]"]
    assert "of logical_dbs.shop2: 'shop_07' matches both" in got["logical_dbs.shop3.physical[0]"]
    assert "of logical_dbs.shop.tables.orders" in got["logical_dbs.shop.tables.legacy.physical[0]"]


def test_same_table_pattern_in_two_logical_dbs_is_no_overlap() -> None:
    tree = shop()
    tree["logical_dbs"]["crm"] = {"physical": ["crm"], "tables": {"orders": {"physical": [r"orders_\d+"]}}}
    m = parse_mapping(tree)
    assert m.resolve("crm", "orders_1").topic == "crm"  # type: ignore[union-attr]


def test_overlapping_patterns_are_found_by_an_example_name_when_the_mapping_is_built() -> None:
    # shop_\d+ beside shop_.*: before, valid until a relay met shop_1 (issue 25)
    tree = shop()
    tree["logical_dbs"]["all"] = {"physical": ["shop_.*"]}
    tree["logical_dbs"]["shop"]["tables"]["big"] = {"physical": [r"orders_9\d"]}
    got = problems(tree)
    assert set(got) == {"logical_dbs.all.physical[0]", "logical_dbs.shop.tables.big.physical[0]"}
    assert "'shop_0' matches both" in got["logical_dbs.all.physical[0]"]
    assert "'orders_90' matches both" in got["logical_dbs.shop.tables.big.physical[0]"]


def test_general_overlap_detected_at_resolve_naming_both_claimants() -> None:
    # shop_2\d and shop_\d8 share only shop_28, which no example of either pattern shows
    tree = shop()
    tree["logical_dbs"]["shop"]["physical"] = [r"shop_2\d"]
    tree["logical_dbs"]["hot"] = {"physical": [r"shop_\d8"]}
    tree["logical_dbs"]["shop"]["tables"]["orders"]["physical"] = [r"orders_3\d"]
    tree["logical_dbs"]["shop"]["tables"]["big"] = {"physical": [r"orders_\d9"]}
    m = parse_mapping(tree)
    with pytest.raises(MappingError) as info:
        m.resolve("shop_28", "orders_1")
    assert info.value.key == "logical_dbs.shop.physical[0]"
    assert "logical_dbs.hot" in info.value.problem and "'shop_\\d8'" in info.value.problem
    with pytest.raises(MappingError) as info:
        m.resolve("shop_21", "orders_39")
    assert info.value.key == "logical_dbs.shop.tables.orders.physical[0]"
    assert "logical_dbs.shop.tables.big" in info.value.problem
    assert m.resolve("shop_21", "orders_31") is not None  # no overlap: still resolves


def test_validate_against_reports_ambiguous_unmapped_and_dropped() -> None:
    tree = shop()
    tree["logical_dbs"]["shop"]["physical"] = [r"shop_2\d"]
    tree["logical_dbs"]["hot"] = {"physical": [r"shop_\d8"]}  # only shop_28 is both's
    tree["logical_dbs"]["shop"]["unclaimed_tables"] = "drop"
    m = parse_mapping(tree)
    real = [("shop_23", "orders_1"), ("shop_28", "orders_1"), ("crm", "leads"), ("shop_23", "tmp")]
    with pytest.raises(InvalidMappingError) as info:
        m.validate_against(real)
    assert [e.key for e in info.value.errors] == ["logical_dbs.shop.physical[0]"]
    coverage = m.validate_against(real, raise_errors=False)
    assert [(r.physical_db, r.physical_table) for r in coverage.routes] == [
        ("shop_23", "orders_1"),
        ("crm", "leads"),
    ]
    assert coverage.unmapped == (("crm", "leads"),)
    assert coverage.dropped == (("shop_23", "tmp"),)
    assert len(coverage.errors) == 1
    clean = parse_mapping(shop()).validate_against([("shop_1", "orders_1"), ("x", "y")])
    assert clean.unmapped == (("x", "y"),) and not clean.errors


# --- the value: immutable, valid by construction, round trip ---------------------------------


def test_mapping_is_valid_by_construction() -> None:
    db = LogicalDb("shop", (r"shop_\d+",), tables=(LogicalTable("orders", ("orders_(",)),))
    with pytest.raises(InvalidMappingError) as info:
        Mapping(logical_dbs=(db,))
    assert [e.key for e in info.value.errors] == ["logical_dbs.shop.tables.orders.physical[0]"]
    m = Mapping(logical_dbs=(LogicalDb("shop", (r"shop_\d+",)),))
    with pytest.raises(AttributeError):
        m.version = 2  # type: ignore[misc]
    assert m.with_version(7).version == 7 and m.with_version(7).logical_dbs == m.logical_dbs
    assert m.with_version(7) != m


def test_yaml_round_trip() -> None:
    tree = shop(
        version=42,
        defaults={"codec": "canal-protobuf", "topic": "cdc.{logical_db}", "unclaimed_tables": "unmapped"},
        topics={
            "partitions": 12,
            "replication_factor": 3,
            "retention_ms": 604800000,
            "create": False,
            "config": {
                "min.insync.replicas": 2,
                "cleanup.policy": "delete",
                "unclean.leader.election.enable": False,
            },
        },
        unmapped={"action": "drop"},
        tables={
            "shop.items": {
                "physical": [r"items_\d+", "items_legacy"],
                "codec": "canal-json",
                "topic": "cdc.items",  # its own topic: one codec per topic
                "tag": "yes",
            }
        },
    )
    tree["logical_dbs"]["crm"] = {"physical": ["(?i)crm"], "topic": "crm-{db}", "codec": "canal-json"}
    m = parse_mapping(tree)
    assert m.topics.topic_config() == {
        "cleanup.policy": "delete",
        "min.insync.replicas": "2",
        "unclean.leader.election.enable": "false",
        "retention.ms": "604800000",
    }
    text = dump_mapping(m)
    assert parse_mapping(text) == m
    assert parse_mapping(m.to_dict()) == m
    assert dump_mapping(parse_mapping(text)) == text
    assert parse_mapping(dump_mapping(load_mapping(EXAMPLE))) == load_mapping(EXAMPLE)
    assert parse_mapping(dump_mapping(Mapping())) == Mapping()


def test_save_and_load_file(tmp_path: Path) -> None:
    m = parse_mapping(shop(version=3))
    path = tmp_path / "mapping.yaml"
    save_mapping(m, path)
    assert load_mapping(path) == m
    save_mapping(m.with_version(4), path)
    assert load_mapping(path).version == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mapping.yaml"]  # no temp file left
    with pytest.raises(MappingError) as info:
        load_mapping(tmp_path / "missing.yaml")
    assert info.value.key.endswith("missing.yaml")


def test_load_reports_the_file_name(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(
        textwrap.dedent("""\
        logical_dbs:
          shop:
            physical: ['shop_(']
        """)
    )
    with pytest.raises(InvalidMappingError) as info:
        load_mapping(path)
    assert str(info.value).startswith(f"{path}: logical_dbs.shop.physical[0]: bad regex")  # one line
    assert info.value.errors[0].key == "logical_dbs.shop.physical[0]"


def test_pickles_for_spark_workers() -> None:
    m = parse_mapping(shop())
    m.resolve("shop_1", "orders_1")
    copy = pickle.loads(pickle.dumps(m))
    assert copy == m and hash(copy) == hash(m)
    assert copy.resolve("shop_2", "orders_2") == m.resolve("shop_2", "orders_2")


def test_mapping_package_does_not_import_the_daemon_runtime() -> None:
    code = (
        "import sys, mapping\n"
        "bad = [n for n in sys.modules if n in ('relay.instance', 'confluent_kafka', 'pyspark')"
        " or n.startswith(('relay.binlog', 'confluent_kafka.', 'pyspark.'))]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == ""


# --- key_shard: the shard identity in the record key -----------------------------------------


def test_key_shard_inherits_table_db_defaults_and_names_where_it_comes_from() -> None:
    tree = shop()
    m = parse_mapping(tree)
    route = m.resolve("shop_07", "orders_33")
    assert route is not None and (route.key_shard, route.key_shard_rule) == ("none", "defaults.key_shard")
    tree["defaults"] = {"key_shard": "column:shard_id"}
    tree["logical_dbs"]["shop"]["key_shard"] = "physical"
    tree["logical_dbs"]["shop"]["tables"]["orders"]["key_shard"] = "none"
    m = parse_mapping(tree)
    orders, customers, other = (m.resolve("shop_07", t) for t in ("orders_33", "customers", "misc"))
    assert orders is not None and customers is not None and other is not None
    assert (orders.key_shard, orders.key_shard_rule) == ("none", "logical_dbs.shop.tables.orders.key_shard")
    assert (customers.key_shard, customers.key_shard_rule) == ("physical", "logical_dbs.shop.key_shard")
    assert other.key_shard == "physical"  # an unclaimed table inherits its db's setting
    del tree["logical_dbs"]["shop"]["key_shard"]
    customers = parse_mapping(tree).resolve("shop_07", "customers")
    assert customers is not None
    assert (customers.key_shard, customers.key_shard_rule) == ("column:shard_id", "defaults.key_shard")
    assert parse_mapping(dump_mapping(parse_mapping(tree))) == parse_mapping(tree)  # round trip


def test_key_shard_values_are_checked_with_key_paths() -> None:
    tree = shop(defaults={"key_shard": "shard"}, tables={"shop.items": {"key_shard": "column: x"}})
    tree["logical_dbs"]["shop"]["key_shard"] = "column:"
    tree["logical_dbs"]["shop"]["tables"]["orders"]["key_shard"] = ["physical"]
    tree["logical_dbs"]["shop"]["tables"]["customers"]["key_shard"] = "column:_shard"
    found = problems(tree)
    assert "is not one of none, physical or column:<name>" in found["defaults.key_shard"]
    assert "expected column:<name>" in found["logical_dbs.shop.key_shard"]
    assert "expected text" in found["logical_dbs.shop.tables.orders.key_shard"]
    assert "_shard names the key's shard field" in found["logical_dbs.shop.tables.customers.key_shard"]
    assert "no surrounding spaces" in found['tables["shop.items"].key_shard']
    assert (
        "did you mean 'key_shard'" in problems(shop(defaults={"key_shards": "none"}))["defaults.key_shards"]
    )


def test_check_shard_column_answers_the_tables_spelling_or_names_the_key_path() -> None:
    tree = shop()
    tree["logical_dbs"]["shop"]["key_shard"] = "column:Shard_ID"
    route = parse_mapping(tree).resolve("shop_01", "orders_02")
    assert route is not None and route.check_shard_column(["id", "shard_id"]) == "shard_id"
    with pytest.raises(InvalidMappingError) as info:
        route.check_shard_column(["id", "amount"])
    assert [e.key for e in info.value.errors] == ["logical_dbs.shop.key_shard"]
    assert "'Shard_ID' is not a column of shop_01.orders_02 (columns: id, amount)" in str(info.value)
    physical = parse_mapping(shop()).resolve("shop_01", "orders_02")
    assert physical is not None and physical.check_shard_column(["id"]) is None


def test_warnings_name_logical_tables_whose_keys_may_collide_across_shards() -> None:
    tree = shop()
    tree["logical_dbs"]["crm"] = {"physical": ["crm"], "tables": {"leads": {"physical": ["leads"]}}}
    warned = {w.path: w.problem for w in parse_mapping(tree).warnings()}
    # shop_\d+ x orders_\d+, shop_\d+ x customers, shop's unclaimed tables; crm.leads is one table
    assert set(warned) == {
        "logical_dbs.shop.tables.orders.key_shard",
        "logical_dbs.shop.tables.customers.key_shard",
        "logical_dbs.shop.key_shard",
    }
    assert "shop.orders may map several physical tables" in warned["logical_dbs.shop.tables.orders.key_shard"]
    assert "set key_shard: physical" in warned["logical_dbs.shop.key_shard"]
    # an explicit setting (shard identity, or `none`: "ids are unique") silences it
    tree["logical_dbs"]["shop"]["tables"]["orders"]["key_shard"] = "physical"
    tree["logical_dbs"]["shop"]["tables"]["customers"]["key_shard"] = "none"
    assert [w.path for w in parse_mapping(tree).warnings()] == ["logical_dbs.shop.key_shard"]
    tree["logical_dbs"]["shop"]["unclaimed_tables"] = "drop"
    assert parse_mapping(tree).warnings() == ()
    assert parse_mapping(shop(defaults={"key_shard": "physical"})).warnings() == ()


def test_validate_against_warns_where_real_tables_collide() -> None:
    tree = shop()
    tree["logical_dbs"]["shop"]["tables"]["customers"]["key_shard"] = "none"
    m = parse_mapping(tree)
    one_shard = m.validate_against(
        [("shop_00", "orders_00"), ("shop_00", "customers"), ("shop_01", "customers")]
    )
    assert one_shard.warnings == ()  # one physical orders table; customers said "unique"
    tables = [(f"shop_0{d}", f"orders_0{t}") for d in range(3) for t in range(2)]
    coverage = m.validate_against([*tables, ("shop_00", "misc"), ("shop_01", "misc"), ("shop_00", "solo")])
    warned = {w.path: w.problem for w in coverage.warnings}
    assert set(warned) == {"logical_dbs.shop.tables.orders.key_shard", "logical_dbs.shop.key_shard"}
    text = warned["logical_dbs.shop.tables.orders.key_shard"]
    assert "logical table shop.orders maps 6 physical tables (shop_00.orders_00, shop_00.orders_01, " in text
    assert "and 3 more" in text
    assert "logical table shop.misc maps 2 physical tables" in warned["logical_dbs.shop.key_shard"]


# --- one codec per topic, an empty mapping (issue 25) -----------------------------------------------


def test_one_topic_given_two_codecs_is_refused_naming_the_codec_setting() -> None:
    tree = shop()
    tree["logical_dbs"]["shop"]["tables"]["customers"]["codec"] = "canal-protobuf"  # in topic "shop"
    got = problems(tree)
    assert set(got) == {"logical_dbs.shop.tables.customers.codec"}
    assert (
        "topic 'shop' would carry canal-protobuf records from logical_dbs.shop.tables.customers"
        in (got["logical_dbs.shop.tables.customers.codec"])
    )
    assert (
        "canal-json records from logical_dbs.shop (its unclaimed tables)"
        in (got["logical_dbs.shop.tables.customers.codec"])
    )
    # its own topic: fine
    tree["logical_dbs"]["shop"]["tables"]["customers"]["topic"] = "shop.customers"
    assert parse_mapping(tree).resolve("shop_1", "customers").codec == "canal-protobuf"  # type: ignore[union-attr]


def test_two_codecs_in_a_topic_named_after_physical_names_show_against_real_tables() -> None:
    tree = shop()
    tree["logical_dbs"]["crm"] = {"physical": ["crm"], "topic": "raw.{db}", "codec": "canal-protobuf"}
    tree["logical_dbs"]["crm"]["tables"] = {
        "leads": {"physical": ["leads"], "topic": "raw.crm", "codec": "canal-json"}
    }
    m = parse_mapping(tree)  # raw.{db} depends on the physical name: not decidable from the mapping alone
    with pytest.raises(InvalidMappingError) as info:
        m.validate_against([("crm", "accounts"), ("crm", "leads")])
    (error,) = info.value.errors
    assert error.key == "logical_dbs.crm.tables.leads" and "topic 'raw.crm'" in error.problem
    assert "canal-json records of crm.leads and canal-protobuf records of crm.accounts" in error.problem


def test_an_empty_mapping_is_refused_and_one_without_logical_dbs_is_warned_about() -> None:
    for text in ("", "# only a comment\n", "{}\n", "null\n"):
        got = problems(text)
        assert list(got) == ["(top level)"] and "the mapping is empty" in got["(top level)"]
    got = problems("unmapped: {action: drop}\n")
    assert list(got) == ["unmapped.action"] and "would publish nothing" in got["unmapped.action"]
    passthrough = parse_mapping("unmapped: {action: topic, topic: 'raw.{db}'}\n")
    (warning,) = passthrough.warnings()
    assert warning.path == "logical_dbs" and "physical names" in warning.problem
