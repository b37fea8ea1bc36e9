"""``relay mapping`` on a mapping file: edits are versioned and atomic, --dry-run stores nothing, invalid
edits are refused naming the key, history/diff/rollback/show/resolve/validate, and a complete --help.
In-process through ``relay.cli.main.main``, on a temp copy of the documented example; no network."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import pytest

from mapping import load_mapping
from relay.cli.main import build_parser, main

EXAMPLE = Path(__file__).resolve().parents[2] / "conf" / "mapping.yaml"


@pytest.fixture()
def mfile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RELAY_STATE_DIR", str(tmp_path / "state"))  # the history: not the working directory
    path = tmp_path / "mapping.yaml"
    shutil.copy(EXAMPLE, path)
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["mapping", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_edit_dry_run_history_diff_rollback(mfile: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = ("-f", str(mfile))
    before = mfile.read_text()
    code, out, _ = run(capsys, "topic", "set", "shop.customers", "shop.customers", "--dry-run", *f)
    assert code == 0 and "customers topic: (inherited/default) -> shop.customers" in out
    assert "dry run: nothing stored" in out and mfile.read_text() == before
    assert not (mfile.parent / "state" / "mapping-history").exists()

    assert run(capsys, "topic", "set", "shop.customers", "shop.customers", *f)[0] == 0
    assert (
        run(capsys, "table", "add", "shop.items", "--physical", "items_\\d+", "--key", "item_id", *f)[0] == 0
    )
    assert run(capsys, "key", "add", "shop.items", "shop_id", "--note", "composite", *f)[0] == 0
    assert load_mapping(mfile).version == 4
    code, out, _ = run(capsys, "history", *f)
    lines = out.split("relays:")[0].splitlines()  # the versions, then the known relays
    assert [int(line.split()[0]) for line in lines] == [1, 2, 3, 4]
    assert "first stored version" in lines[0] and '"composite"' in lines[3]
    first = mfile.parent / "state" / "mapping-history" / "00000001.yaml"
    assert first.read_text() == before  # comments kept

    code, out, _ = run(capsys, "diff", "2", "3", *f)
    assert "+ logical table shop.items" in out and "+        - items_\\d+" in out
    code, out, _ = run(capsys, "rollback", "1", *f)
    assert code == 0 and "stored version 5" in out
    assert load_mapping(mfile) == load_mapping(
        mfile.parent / "state" / "mapping-history" / "00000001.yaml"
    ).with_version(5)
    code, out, _ = run(capsys, "show", "--version", "3", *f)
    assert "items:" in out and "version: 3" in out


def test_invalid_edits_are_refused_and_store_nothing(mfile: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = ("-f", str(mfile))
    before = mfile.read_text()
    code, _, err = run(capsys, "table", "add", "shop.x", "--physical", "orders_(", *f)
    assert code == 2 and "logical_dbs.shop.tables.x.physical[0]" in err
    code, _, err = run(capsys, "topic", "set", "shop.orders", "a topic", *f)
    assert code == 2 and "logical_dbs.shop.tables.orders.topic" in err
    code, _, err = run(capsys, "db", "remove", "nope", *f)
    assert code == 2 and "logical_dbs.nope" in err
    code, _, err = run(capsys, "tag", "set", "shop.orders", "t", "--expect-version", "7", *f)
    assert code == 2 and "based on version 7" in err
    assert mfile.read_text() == before


def test_resolve_and_validate(mfile: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = ("-f", str(mfile))
    code, out, _ = run(capsys, "resolve", "shop_07.orders_33", "other.t", *f)
    assert "shop_07.orders_33 -> topic shop.orders  as shop.orders  key=order_id tag=orders" in out
    assert "other.t -> topic other" in out and "rule=unmapped" in out
    assert run(capsys, "validate", *f)[0] == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text("logical_dbs:\n  shop:\n    topics: x\n")
    code, _, err = run(capsys, "validate", str(bad), *f)
    assert code == 2 and "logical_dbs.shop.topics" in err and "did you mean 'topic'" in err


def _subparsers(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                assert helps.get(name), f"subcommand {sub.prog} has no help line"
                out.append((name, sub))
                out.extend(_subparsers(sub))
    return out


def test_help_is_complete() -> None:
    parser = build_parser()
    top = dict(_subparsers(parser))
    mapping = top["mapping"]
    names = {name for name, _ in _subparsers(mapping)}
    wanted = {"show", "resolve", "validate", "diff", "history", "rollback", "import", "db", "table"}
    assert wanted | {"topic", "tag", "key", "add", "set", "remove"} <= names
    assert "replay" in top
    for _name, sub in [*_subparsers(mapping), ("replay", top["replay"])]:
        for action in sub._actions:
            if action.option_strings and action.dest != "help":
                assert action.help, f"{sub.prog} {action.option_strings} has no help"
        assert sub.format_help()


def test_import_creates_the_first_version_then_stores_the_next(
    mfile: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "new" / "mapping.yaml"
    target.parent.mkdir()
    code, out, _ = run(capsys, "import", str(mfile), "-f", str(target))
    assert code == 0 and "(first version)" in out and load_mapping(target) == load_mapping(mfile)
    code, out, _ = run(capsys, "import", str(mfile), "-f", str(target))
    assert code == 0 and "no change" in out
    changed = tmp_path / "changed.yaml"
    changed.write_text(mfile.read_text().replace("tag: orders", "tag: o2"))
    code, out, _ = run(capsys, "import", str(changed), "-f", str(target), "--note", "from git")
    assert code == 0 and "stored version 2" in out and "tag: orders -> o2" in out


def test_validate_and_resolve_warn_about_keys_that_may_collide_exit_status_zero(
    mfile: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = ("-f", str(mfile))
    code, out, err = run(capsys, "validate", *f)
    assert code == 0 and out.endswith("is valid\n") and err == ""  # the documented example warns of nothing
    assert run(capsys, "db", "set", "shop", "--clear", "key_shard", *f)[0] == 0
    code, out, err = run(capsys, "validate", *f)
    assert code == 0 and "is valid (1 warning)" in out
    assert err.startswith("warning: logical_dbs.shop.key_shard: each unclaimed table of shop (own_name)")
    assert run(capsys, "table", "set", "shop.orders", "--clear", "key_shard", *f)[0] == 0
    code, out, err = run(capsys, "validate", *f)
    assert code == 0 and "(2 warnings)" in out
    assert "warning: logical_dbs.shop.tables.orders.key_shard: shop.orders may map several" in err
    code, out, err = run(capsys, "resolve", "shop_07.orders_33", *f)
    assert code == 0 and "key_shard" not in out
    assert err.count("warning: ") == 1 and "logical_dbs.shop.tables.orders.key_shard" in err
    code, out, err = run(capsys, "resolve", "shop_07.customers", *f)  # explicit `none`: no warning
    assert code == 0 and err == ""
    assert run(capsys, "table", "set", "shop.orders", "--key-shard", "column:shop_id", *f)[0] == 0
    code, out, err = run(capsys, "resolve", "shop_07.orders_33", *f)
    assert "key=order_id tag=orders key_shard=column:shop_id codec=" in out and err == ""
    code, _, err = run(capsys, "table", "set", "shop.orders", "--key-shard", "shard", *f)
    assert code == 2 and "logical_dbs.shop.tables.orders.key_shard" in err
