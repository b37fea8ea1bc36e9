"""``relay console`` and ``relay console user …`` on bad input: one line naming the option or file, exit
status 2, no traceback, nothing left listening — a bad -c file, an unreachable ZooKeeper, a taken port,
a missing or broken users file; and the user commands editing the users file (passwords from stdin)."""

from __future__ import annotations

import io
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from relay.cli.main import main
from relay.console.users import UsersFile, check_password


@pytest.fixture
def cfg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RELAY_STATE_DIR", str(tmp_path / "state"))
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "mapping.yaml").write_text(yaml.safe_dump({"logical_dbs": {"shop": {"physical": ["shop_\\d+"]}}}))
    data = {
        "instance": "t",
        "source": {"host": "127.0.0.1", "port": 1},
        "kafka": {"bootstrap_servers": "127.0.0.1:1"},
    }
    (conf / "relay.yaml").write_text(yaml.safe_dump(data))
    return conf / "relay.yaml"


@pytest.fixture
def users(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "users.yaml"
    monkeypatch.setattr("sys.stdin", io.StringIO("pw-of-ada\n"))
    assert (
        main(
            ["console", "user", "add", "ada", "--role", "operator", "--password-stdin", "--users", str(path)]
        )
        == 0
    )
    return path


@pytest.fixture
def taken() -> Iterator[int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    yield int(sock.getsockname()[1])
    sock.close()


def one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out = capsys.readouterr()
    assert "Traceback" not in out.err + out.out
    lines = [line for line in out.err.splitlines() if "running pure Python" not in line]
    assert code == 2, (code, out.err, out.out)
    assert len(lines) == 1, out.err
    assert "error" in lines[0]
    return lines[0]


def test_bad_inputs_of_relay_console(
    cfg: Path, users: Path, taken: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    u = ["--users", str(users)]
    cases = [
        (["console", "-c", "/no/such/relay.yaml", *u], "/no/such/relay.yaml"),
        (["console", "-c", str(cfg), "--users", str(tmp_path / "none.yaml")], "--users"),
        (["console", "-c", str(cfg), "--zookeeper", "127.0.0.1:1", *u], "-c/--zookeeper"),
        (["console", *u], "-c/--zookeeper"),
        (["console", "--zookeeper", "127.0.0.1:1", "--zk-timeout", "1", *u], "127.0.0.1:1"),
        (["console", "-c", str(cfg), *u, "--port", str(taken)], f"--port: 127.0.0.1:{taken} is taken"),
        (["console", "-c", str(cfg), *u, "--port", "70000"], "--port"),
        (["console", "-c", str(cfg), *u, "--bind", "no.such.host.invalid"], "--bind"),
        (["console", "-c", str(cfg), *u, "--sample-seconds", "0"], "--sample-seconds"),
        (["console", "user", "add", "bob", "--role", "admin", *u], "--role"),
        (["console", "user", "add", "b b", "--role", "viewer", "--no-password", *u], "NAME"),
        (["console", "user", "remove", "nobody", *u], "nobody"),
        (["console", "user", "add", "bob", "--role", "viewer", *u], "--password-stdin"),  # no terminal
    ]
    broken = tmp_path / "broken.yaml"
    broken.write_text("users:\n  ada: {role: admin}\n")
    cases.append((["console", "-c", str(cfg), "--users", str(broken)], "users.ada.role"))
    for argv, mentions in cases:
        line = one_line(argv, capsys)
        assert mentions in line, (argv, line)
    # the port the test holds was never taken from it, and nothing else listens for the console
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", taken)) == 0


def test_the_user_commands_edit_the_users_file(
    users: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    u = ["--users", str(users)]
    monkeypatch.setattr("sys.stdin", io.StringIO("pw-of-bob\n"))
    assert main(["console", "user", "add", "bob", "--role", "viewer", "--password-stdin", *u]) == 0
    assert main(["console", "user", "add", "proxy-only", "--role", "operator", "--no-password", *u]) == 0
    found = UsersFile(users).load()
    assert {n: (x.role, bool(x.password)) for n, x in found.items()} == {
        "ada": ("operator", True),
        "bob": ("viewer", True),
        "proxy-only": ("operator", False),
    }
    assert check_password("pw-of-bob", found["bob"].password) and "pw-of-bob" not in users.read_text()
    assert main(["console", "user", "remove", "bob", *u]) == 0
    capsys.readouterr()
    assert main(["console", "user", "list", *u]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in listed] == ["ada", "proxy-only"] and "proxy header only" in listed[1]
    monkeypatch.setattr("sys.stdin", io.StringIO("some password\n"))
    assert main(["console", "user", "hash", "--password-stdin"]) == 0
    assert check_password("some password", capsys.readouterr().out.strip())
