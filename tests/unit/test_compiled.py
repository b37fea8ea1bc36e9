"""The two builds of the hot modules (``relay._native``): compiled by ``scripts/build-compiled``, or pure
Python. Both must write the golden records, ``RELAY_PURE_PYTHON=1`` must give the pure one, and a compiled
extension must never run in place of a source edited after the build, nor without a manifest."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from relay import _native

ROOT = Path(__file__).resolve().parents[2]
EXT = sysconfig.get_config_var("EXT_SUFFIX")

_GOLDEN = """
import json, sys
import relay._native as n
import relay.binlog.values as v
from tests import golden
same = golden.replay() == golden.RECORDS.read_text(encoding="ascii").splitlines()
print(json.dumps({"mode": n.mode, "values": v.__file__, "same": same}))
"""

_PROBE = """
import json
import relay._native as n
import relay.binlog.values as v
print(json.dumps({"mode": n.mode, "describe": n.describe(), "values": v.__file__}))
"""


def _run(code: str, cwd: Path, pure: bool) -> tuple[dict[str, object], str]:
    env = {k: v for k, v in os.environ.items() if k != _native.ENV_PURE}
    env["PYTHONPATH"] = str(cwd)
    if pure:
        env[_native.ENV_PURE] = "1"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return out, done.stderr


@pytest.mark.parametrize("pure", [True, False], ids=["RELAY_PURE_PYTHON=1", "default"])
def test_golden_records_in_each_build(pure: bool) -> None:
    out, _ = _run(_GOLDEN, ROOT, pure)
    assert out["same"] is True
    # Without the switch: the build a process would run (compiled where it was built and is fresh), even
    # when this one runs with RELAY_PURE_PYTHON=1 (scripts/test's second pass).
    want = "pure" if pure else _native.decide({})[0]
    assert out["mode"] == want
    assert str(out["values"]).endswith(".py" if want == "pure" else EXT)


def test_the_switch_and_this_process_agree() -> None:
    import relay.binlog.values as v

    assert (_native.mode, _native.reason, _native.compiled_modules) == _native.decide(os.environ)
    if _native.mode == "compiled":
        assert v.__file__.endswith(EXT) and "relay.binlog.values" in _native.compiled_modules
    else:
        assert v.__file__.endswith(".py") and _native.compiled_modules == ()


# -- staleness: on a copy of the package, with a stand-in "extension" that cannot be loaded ------------


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """The relay package without any build, plus a file named like values' extension that is not one:
    importing it would fail, so a run that imports values at all proves the source was used."""
    shutil.copytree(
        ROOT / "relay", tmp_path / "relay", ignore=shutil.ignore_patterns(f"*{EXT}", "_compiled.json")
    )
    (tmp_path / "relay" / "binlog" / f"values{EXT}").write_bytes(b"not an extension module")
    return tmp_path


def _manifest(copy: Path) -> None:
    """A manifest as a build of ``_MODULES`` writes it, matching the copy's sources."""
    modules = {m: hashlib.sha256(_source(copy, m).read_bytes()).hexdigest() for m in _MODULES}
    doc = {"ext_suffix": EXT, "mypy": "test", "builder": "test", "modules": modules}
    (copy / "relay" / "_compiled.json").write_text(json.dumps(doc), encoding="utf-8")


_MODULES = ("relay.binlog.values", "relay.binlog.rows")


def _source(copy: Path, module: str) -> Path:
    return copy / (module.replace(".", "/") + ".py")


def test_a_fresh_manifest_loads_the_extension(copy: Path) -> None:
    # The control: with a manifest matching the sources the stand-in IS imported (and fails), so the
    # runs below would fail the same way if they did not fall back to the source.
    _manifest(copy)
    env = {k: v for k, v in os.environ.items() if k != _native.ENV_PURE} | {"PYTHONPATH": str(copy)}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0 and "values" in done.stderr


def test_an_edited_source_makes_the_whole_set_pure_with_one_warning(copy: Path) -> None:
    _manifest(copy)
    rows = _source(copy, "relay.binlog.rows")
    rows.write_text(rows.read_text(encoding="utf-8") + "\n# edited after the build\n", encoding="utf-8")
    out, stderr = _run(_PROBE, copy, pure=False)
    assert out["mode"] == "pure" and str(out["values"]).endswith("values.py")  # values itself is fresh
    assert "stale compiled modules: relay/binlog/rows.py" in str(out["describe"])
    assert stderr.count("running pure Python") == 1 and "relay/binlog/rows.py" in stderr


def test_the_switch_uses_the_source_of_a_fresh_build_without_a_warning(copy: Path) -> None:
    _manifest(copy)
    out, stderr = _run(_PROBE, copy, pure=True)
    assert out["mode"] == "pure" and str(out["values"]).endswith("values.py")
    assert out["describe"] == "pure Python (RELAY_PURE_PYTHON=1)"
    assert "running pure Python" not in stderr


@pytest.mark.parametrize("manifest", ["missing", "another interpreter", "unreadable"])
def test_an_extension_without_a_usable_manifest_is_never_loaded(copy: Path, manifest: str) -> None:
    if manifest == "another interpreter":
        _manifest(copy)
        path = copy / "relay" / "_compiled.json"
        doc = json.loads(path.read_text(encoding="utf-8"))
        path.write_text(json.dumps(doc | {"ext_suffix": ".cpython-399-other.so"}), encoding="utf-8")
    elif manifest == "unreadable":
        (copy / "relay" / "_compiled.json").write_text("{", encoding="utf-8")
    out, _ = _run(_PROBE, copy, pure=False)
    assert out["mode"] == "pure" and str(out["values"]).endswith("values.py")
    assert out["describe"] == "pure Python (not compiled: see scripts/build-compiled)"


def test_relay_version_says_which_build_runs() -> None:
    env = os.environ | {_native.ENV_PURE: "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "relay.cli", "--version"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.splitlines()[1] == "hot modules: pure Python (RELAY_PURE_PYTHON=1)"


# -- the C helper (relay/kafka/_jsontext.c) --------------------------------------------------------------


def test_the_c_helper_is_used_exactly_when_the_build_is_compiled() -> None:
    from relay.kafka import canal_json

    assert (canal_json.object_bytes is not None) == (_native.mode == "compiled")


def test_the_c_helper_gives_the_bytes_of_the_python_path() -> None:
    """Every one-byte character in every position, NULLs, str subclasses (TIMESTAMP instants) and odd
    column names: ``object_bytes`` == ``object_text(...).encode()``; text of wider characters is left to
    the Python path (None)."""
    import random

    from relay.binlog.values import Instant
    from relay.kafka import canal_json as cj

    helper = pytest.importorskip("relay.kafka._jsontext")  # built by scripts/build-compiled
    names = ["id", "naïve", "x%y", 'q"uote', "c\\d", "\x01ctl"]
    keys = tuple(f"{cj.dumps(n)}:" for n in names)
    form, key_bytes = cj.object_format(keys), tuple(k.encode() for k in keys)
    every = "".join(chr(i) for i in range(256))
    instant = Instant("2026-01-01 00:00:00")
    instant.micros = 1_767_225_600_000_000
    rnd = random.Random(17)
    pool: list[str | None] = [None, "", every, every[::-1], 'a"b\\c\n\r\t\b\f\x00\x1f\x7f\x80\xff', instant]
    pool += ["".join(chr(rnd.randrange(256)) for _ in range(rnd.randrange(40))) for _ in range(500)]
    for _ in range(2000):
        values = [rnd.choice(pool) for _ in keys]
        want = cj.object_text(form, values).encode()
        assert helper.object_bytes(key_bytes, values) == want
        assert helper.object_bytes(key_bytes, tuple(values)) == want
    for wide in ("中文", "\ud800", "\U0001f600"):
        assert helper.object_bytes(key_bytes, [wide, None, "", "", "", ""]) is None
    assert helper.object_bytes((), ()) == b"{}"
    with pytest.raises(ValueError):
        helper.object_bytes(key_bytes, ["too few"])


def test_an_edited_c_helper_makes_the_whole_set_pure(copy: Path) -> None:
    _manifest(copy)
    path = copy / "relay" / "_compiled.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    helper = copy / "relay" / "kafka" / "_jsontext.c"
    doc["c_modules"] = {"relay.kafka._jsontext": hashlib.sha256(helper.read_bytes()).hexdigest()}
    path.write_text(json.dumps(doc), encoding="utf-8")
    edited = helper.read_text(encoding="utf-8") + "\n/* edited after the build */\n"
    helper.write_text(edited, encoding="utf-8")
    out, stderr = _run(_PROBE, copy, pure=False)
    assert out["mode"] == "pure" and "stale compiled modules: relay/kafka/_jsontext.c" in str(out["describe"])
    assert "relay/kafka/_jsontext.c" in stderr
