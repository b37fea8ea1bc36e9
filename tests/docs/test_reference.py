"""The generated reference pages (docs/reference/) are what the code generates now, and what they are built
from holds every key: the parser's commands, the config dataclasses, the mapping's key lists, the metrics."""

from __future__ import annotations

import argparse
from pathlib import Path

from relay.cli import docs_reference as ref
from relay.cli.main import build_parser
from relay.config.model import RelayConfig
from relay.dev import docs_reference as gen


def test_committed_pages_equal_the_generated_ones() -> None:
    problems = ref.differences()
    assert not problems, "\n".join([*problems, "regenerate them: scripts/docs reference"])


def test_a_drifted_page_is_named_with_its_first_differing_line(tmp_path: Path) -> None:
    ref.write(tmp_path)
    assert ref.differences(tmp_path) == []
    page = tmp_path / "config.md"
    lines = page.read_text().splitlines()
    n = next(i for i, ln in enumerate(lines) if ln.startswith("| `source.port`"))
    lines[n] = lines[n].replace("`3306`", "`3307`")
    page.write_text("\n".join(lines) + "\n")
    (tmp_path / "metrics.md").unlink()
    problems = ref.differences(tmp_path)
    assert problems[0].startswith(f"docs/reference/config.md:{n + 1}: committed '| `source.port`")
    assert problems[1] == "docs/reference/metrics.md: missing"


def _commands(parser: argparse.ArgumentParser, words: tuple[str, ...] = ()) -> list[str]:
    out = [" ".join(("relay", *words))]
    for name, _, sub in ref._subcommands(parser):
        out += _commands(sub, (*words, name))
    return out


def test_every_command_and_option_is_on_the_cli_page() -> None:
    page = ref.cli_page()
    parser = build_parser()
    commands = _commands(parser)
    assert len(commands) > 40
    for command in commands:
        assert f"`{command}`" in page, command
    options = 0
    for _, _, sub in ref._walk(parser, (), ""):
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
                continue
            for option in action.option_strings:
                options += 1
                assert f"`{option}" in page, option
    assert options > 100


def test_every_relay_yaml_key_is_on_the_config_page_with_a_meaning() -> None:
    page = gen.config_page()
    keys = [".".join(path) for path, _, _ in gen.config_keys(RelayConfig())]
    assert {"source.port", "kafka.exactly_once", "snapshot.mode", "publish.retry.deadline"} <= set(keys)
    rows = {ln.split("|")[1].strip(" `"): ln for ln in page.splitlines() if ln.startswith("| `")}
    for key in keys:
        assert key in rows, key
        assert not rows[key].rstrip().endswith("|   |"), f"{key}: no meaning in conf/relay.yaml"


def test_every_metric_the_exporter_serves_is_listed() -> None:
    names = [m[0] for m in gen.metric_definitions((gen.ROOT / "relay/daemon/metrics.py").read_text())]
    for expected in ("relay_lag_seconds", "relay_rows_published", "relay_publish_latency_seconds",
                     "relay_snapshot_rows", "relay_heartbeats"):  # fmt: skip
        assert expected in names
    verify = gen.metric_definitions((gen.ROOT / "relay/ops/verify/metrics.py").read_text())
    assert ("relay_verify_equal", "gauge") in [(n, k) for n, k, _, _ in verify]
    assert dict((n, labels) for n, _, _, labels in verify)["relay_verify_rows"] == (
        "instance",
        "table",
        "target",
        "shard",
        "result",
    )


def test_yaml_comments_follow_keys_continuations_and_blocks() -> None:
    text = (
        "# about a\n"
        "a:                # section a\n"
        "  b: 1            # first\n"
        "                  #   and more\n"
        "  # about c\n"
        "  c: '#x'\n"
        "  # d: 2          # commented out\n"
    )
    got = gen.yaml_comments(text, uncomment=True)
    assert got[("a",)] == "about a section a"
    assert got[("a", "b")] == "first and more"
    assert got[("a", "c")] == "about c"
    assert got[("a", "d")] == "commented out"


def test_the_grafana_dashboard_names_only_metrics_the_code_defines() -> None:
    import json
    import re

    dashboard = json.loads((gen.ROOT / "deploy/grafana/canal-relay.json").read_text())
    defined = {
        m[0] for path, _ in gen.METRIC_SOURCES for m in gen.metric_definitions((gen.ROOT / path).read_text())
    }
    used = set()
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            for name in re.findall(r"\brelay_\w+", target["expr"]):
                used.add(re.sub(r"_(total|bucket|sum|count)$", "", name))
    assert len(used) > 10
    assert used <= defined, sorted(used - defined)


def test_every_error_class_is_on_the_errors_page_with_a_meaning() -> None:
    import inspect

    from relay import errors
    from relay.cli.docs_reference import errors_page

    page = errors_page()
    classes = [c for _, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, errors.RelayError)]
    assert len(classes) > 40
    for cls in classes:
        row = next((ln for ln in page.splitlines() if ln.startswith(f"| `{cls.__name__}` |")), None)
        assert row is not None, f"{cls.__name__} is not on the errors page"
        assert row.rstrip(" |").rsplit("|", 1)[1].strip(), f"{cls.__name__}: no meaning (a docstring)"
        assert ("| yes |" in row) == bool(cls.retriable), row
