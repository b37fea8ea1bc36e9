"""Every input error of the ``relay`` command is one line on stderr and exit status 2 — no traceback.

Each subcommand is run (in-process) with a malformed value; the config names servers that cannot be
reached, so a value that slipped through validation would show as a connection error or a traceback
instead of the line naming the option. Before: ``relay entries --start-timestamp yesterday`` (or a
millisecond value), ``--start-position f:abc`` and others ended in tracebacks, and argparse's own errors
printed the usage first.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from relay.cli.main import main

MYSQL = "mysql://u:p@127.0.0.1:1"


@pytest.fixture
def cfg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RELAY_STATE_DIR", str(tmp_path / "state"))
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "mapping.yaml").write_text(
        yaml.safe_dump({"logical_dbs": {"shop": {"physical": ["shop_\\d+"], "key_shard": "physical"}}})
    )
    data = {
        "instance": "t",
        "source": {"host": "127.0.0.1", "port": 1, "connect_timeout": 1.0},
        "kafka": {"bootstrap_servers": "127.0.0.1:1"},
    }
    (conf / "relay.yaml").write_text(yaml.safe_dump(data))
    return conf / "relay.yaml"


CASES: list[tuple[str, str]] = [
    # (arguments, what the one line must mention); {cfg} is a valid config, {map} its mapping
    (f"entries --mysql {MYSQL} --start-timestamp yesterday", "--start-timestamp"),
    (f"entries --mysql {MYSQL} --start-timestamp 1700000000", "--start-timestamp"),  # seconds, not ms
    (f"entries --mysql {MYSQL} --start-position f:abc", "--start-position"),
    (f"entries --mysql {MYSQL} --start-position :5", "--start-position"),
    (f"entries --mysql {MYSQL} --start-gtid nonsense", "--start-gtid"),
    (f"entries --mysql {MYSQL} --filter shop_(", "--filter"),
    (f"entries --mysql {MYSQL} --server-id 0", "--server-id"),
    (f"entries --mysql {MYSQL} --batch-size 0", "--batch-size"),
    (f"entries --mysql {MYSQL} --limit -1", "--limit"),
    (f"entries --mysql {MYSQL} --idle-exit soon", "--idle-exit"),
    ("entries --mysql notaurl", "--mysql"),
    ("entries --mysql mysql://u:p@h:port", "--mysql"),
    ("demo --orders lots", "--orders"),
    ("run -c /no/such/relay.yaml", "/no/such/relay.yaml"),
    ("status -c /no/such/relay.yaml", "/no/such/relay.yaml"),
    ("mapping show -c {cfg} --version abc", "--version"),
    ("mapping show -c {cfg} --version 99", "version"),
    ("mapping resolve -c {cfg} shop_07", "shop_07"),
    ("mapping validate -f {cfg}.missing", "missing"),
    ("mapping diff -c {cfg} 1 nosuch.yaml", "nosuch.yaml"),
    ("mapping rollback -c {cfg} one", "version"),
    ("mapping rollback -c {cfg} 0", "version"),
    ("mapping import -c {cfg} /no/such/mapping.yaml", "/no/such/mapping.yaml"),
    ("mapping db add -c {cfg} bad.name", "bad.name"),
    ("mapping db set -c {cfg} shop --key-shard sometimes", "key_shard"),
    ("mapping table add -c {cfg} nodot", "nodot"),
    ("mapping table set -c {cfg} shop.orders --codec xml", "--codec"),
    ("mapping table add -c {cfg} shop.orders --clear bogus", "--clear"),
    ("mapping topic set -c {cfg} shop", "topic"),
    ("mapping topic set -c {cfg} shop bad/topic", "topic"),
    ("mapping key set -c {cfg} shop.orders", "key"),
    ("mapping db add -c {cfg} crm --expect-version x", "--expect-version"),
    ("replay -c {cfg} --from t", "--remap"),
    ("schema show -c {cfg} --table nodot", "--table"),
    ("schema show -c {cfg} --table a.b --at f:abc", "--at"),
    ("schema resync -c {cfg} --table a.b --at nocolon", "--at"),
    ("status -c {cfg} --jsn", "--jsn"),
    ("bench --workloads W9", "--workloads"),
    ("bench --repeat 0", "--repeat"),
    ("bench --set nodot=1", "--set"),
    ("bench --mysql notaurl", "--mysql"),
    ("bench --latency-rate fast", "--latency-rate"),
    ("spark mirror --topics t --out /tmp/x --starting-offsets middle", "--starting-offsets"),
    ("spark mirror --topics t --out /tmp/x --kafka-option novalue", "--kafka-option"),
    ("spark mirror --topics t --out /tmp/x --max-offsets-per-trigger 0", "--max-offsets-per-trigger"),
    ("spark mirror --topics t --out /tmp/x --trigger-seconds never", "--trigger-seconds"),
    ("spark mirror --topics t --out /tmp/x --tables nodot", "--tables"),
    ("spark bench --records many", "--records"),
    ("spark bench --load-batch 0", "--load-batch"),
    ("spark bench --load -5", "--load"),
    ("spark bench --runs 0", "--runs"),
    ("spark bench --batches -1", "--batches"),
    ("positions set -c {cfg} --timestamp yesterday", "--timestamp"),
    ("positions set -c {cfg} --file mysql-bin.000001 --offset x", "--offset"),
    ("positions set -c {cfg} --gtid nonsense", "--gtid"),
    ("positions set -c {cfg} --file a/b", "--file"),
    ("snapshot run -c {cfg} --table nodot", "--table"),
    ("replay -c {cfg} --remap --chunk 0", "--chunk"),
    ("dev up --only mysql,redis", "--only"),
    ("nosuchcommand", "nosuchcommand"),
]


@pytest.mark.parametrize(
    ("argv", "mentions"), CASES, ids=[c[0].split(" --")[0][:40] + "|" + c[1] for c in CASES]
)
def test_a_malformed_value_is_one_line_and_exit_status_2(
    argv: str, mentions: str, cfg: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [a.format(cfg=cfg) for a in argv.split()]
    try:
        code = main(args)
    except SystemExit as exc:  # argparse's own exit
        code = exc.code if isinstance(exc.code, int) else 1
    out = capsys.readouterr()
    assert "Traceback" not in out.err + out.out
    lines = [line for line in out.err.splitlines() if "running pure Python" not in line]
    assert code == 2, (code, out.err, out.out)
    assert len(lines) == 1, out.err
    assert mentions in lines[0], lines[0]
    assert "error" in lines[0]


def test_the_exit_statuses_in_help_and_the_docs_agree(capsys: pytest.CaptureFixture[str]) -> None:
    from relay.cli.main import EXIT_STATUSES

    page = (Path(__file__).resolve().parents[2] / "docs/operations/troubleshooting.md").read_text()
    section = page.split("## Exit statuses", 1)[1].split("\n## ", 1)[0]
    codes = {line.split()[0] for line in EXIT_STATUSES.splitlines()[1:] if line[:5].strip().isdigit()}
    assert codes == {"0", "1", "2", "3", "4", "5", "70", "130", "141"}
    for code in codes:
        assert f"| {code} |" in section, code
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "141  the output's reader went away" in capsys.readouterr().out


def test_redaction_keeps_messages_readable_and_secrets_hidden() -> None:
    from relay.cli.main import error_text
    from relay.common.redact import redact, register_secret
    from relay.errors import ConfigError

    missing = ConfigError("source.password", "environment variable DB_PW is not set (written as ${DB_PW})")
    assert (
        error_text(missing) == "source.password: environment variable DB_PW is not set (written as ${DB_PW})"
    )
    form = "mysql url: expected mysql://user:password@host:port, got 'x'"
    assert redact(form) == form
    assert redact("mysql://relay:hunter2@db:3306") == "mysql://relay:***@db:3306"
    register_secret("s3cr&t|pw")
    assert "s3cr&t|pw" not in error_text(ConfigError("source.password", "bad value 's3cr&t|pw'"))
