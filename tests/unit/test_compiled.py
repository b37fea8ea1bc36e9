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


def test_the_c_helper_gives_the_old_field_of_the_python_path() -> None:
    """An UPDATE's ``old``: ``old_bytes`` == ``old_text(...).encode()`` over generated before/after images
    (columns kept, changed, set to or from NULL, equal text in distinct objects, str subclasses); a changed
    column of wider characters is left to the Python path (None), an unchanged one is not written."""
    import random

    from relay.binlog.values import Instant
    from relay.kafka import canal_json as cj

    helper = pytest.importorskip("relay.kafka._jsontext")  # built by scripts/build-compiled
    names = ["id", "naïve", "x%y", 'q"uote', "c\\d", "\x01ctl"]
    keys = tuple(f"{cj.dumps(n)}:" for n in names)
    key_bytes = tuple(k.encode() for k in keys)
    instant = Instant("2026-01-01 00:00:00")
    rnd = random.Random(43)
    pool: list[str | None] = [
        None,
        "",
        "".join(chr(i) for i in range(256)),
        'a"b\\c\n\x00\x7f\x80\xff',
        instant,
    ]
    pool += ["".join(chr(rnd.randrange(256)) for _ in range(rnd.randrange(12))) for _ in range(300)]
    for n in range(3000):
        before = [rnd.choice(pool) for _ in keys]
        after = [b if rnd.random() < 0.6 else rnd.choice(pool) for b in before]
        if n % 7 == 0:  # equal text, another object
            after = [None if b is None else "".join(list(b)) for b in before]
        want = cj.old_text(keys, before, after).encode()
        assert helper.old_bytes(key_bytes, tuple(before), tuple(after)) == want, (before, after)
        assert helper.old_bytes(key_bytes, before, after) == want
    wide = ["中文", "x", "", "", "", ""]
    assert helper.old_bytes(key_bytes, tuple(wide), ("中", *wide[1:])) is None
    assert helper.old_bytes(key_bytes, tuple(wide), (*wide[:1], "y", *wide[2:])) == '[{"naïve":"x"}]'.encode()
    assert helper.old_bytes((), (), ()) == b"null"
    with pytest.raises(ValueError):
        helper.old_bytes(key_bytes, ("too few",), ("too few",))


def test_record_keys_by_the_c_helper_are_the_keys_of_the_format() -> None:
    """A row's key written by the C helper (``KeyShape.key_fragments``) equals the key the object format
    writes, for one and several key columns, a ``_shard`` column, a constant ``_shard`` (the format
    alone), odd names, NULLs and text of wider characters (the format again)."""
    import dataclasses
    import random

    from relay.kafka import keys as k

    rnd = random.Random(43)
    pool: list[str | None] = [None, "", "42", 'a"b\\c\n\x00\x80\xff', "中文", "\U0001f600"]
    pool += ["".join(chr(rnd.randrange(256)) for _ in range(rnd.randrange(10))) for _ in range(100)]
    shapes = [
        ((("id", 0),), None),
        ((("line", 2), ("id", 0)), None),
        ((("id", 0),), 1),
        ((("naïve", 0), ('q"x%y', 3)), 2),
        ((("id", 0),), "shop_07.orders_33"),
    ]
    for key_columns, shard in shapes:
        text = k._key_text(key_columns, shard)
        fast = k.KeyShape(key_columns, b"t", text, shard, (), k._key_fragments(key_columns, shard))
        slow = dataclasses.replace(fast, key_fragments=None)
        assert (fast.key_fragments is None) == isinstance(shard, str)
        for _ in range(500):
            image = tuple(rnd.choice(pool) for _ in range(4))
            assert fast.of(image) == slow.of(image), (key_columns, shard, image)


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


# -- the C row reader (relay/binlog/_rowimage.c) ---------------------------------------------------------


def test_the_c_row_reader_is_used_exactly_when_the_build_is_compiled() -> None:
    from relay.binlog import rows

    assert (rows.C_READER is not None) == (_native.mode == "compiled")


def _columns() -> list[object]:
    """One column of every kind the C reader reads itself, and some it leaves to the decoders."""
    from relay.binlog import types as t
    from relay.binlog.events import ColumnMeta

    utf8, latin1, gbk, binary = 45, 8, 28, 63
    integers = (t.TINY, t.SHORT, t.INT24, t.LONG, t.LONGLONG)
    kinds: list[tuple[int, int, bool, int | None, tuple[str, ...] | None]] = [
        *[(code, 0, unsigned, None, None) for code in integers for unsigned in (False, True)],
        (t.FLOAT, 4, False, None, None),
        (t.DOUBLE, 8, False, None, None),
        (t.NEWDECIMAL, (12 << 8) | 2, False, None, None),
        (t.NEWDECIMAL, (10 << 8) | 0, False, None, None),
        (t.NEWDECIMAL, (30 << 8) | 30, False, None, None),
        (t.NEWDECIMAL, (65 << 8) | 17, False, None, None),
        (t.NEWDECIMAL, (18 << 8) | 9, False, None, None),
        (t.NEWDECIMAL, (2 << 8) | 5, False, None, None),  # scale above precision: left to its decoder
        (t.DATE, 0, False, None, None),
        *[(t.DATETIME2, fsp, False, None, None) for fsp in range(7)],
        (t.TIMESTAMP2, 3, False, None, None),  # left to its decoder
        (t.TIME2, 2, False, None, None),  # left to its decoder
        (t.YEAR, 0, False, None, None),  # left to its decoder
        (t.VARCHAR, 64 * 4, False, utf8, None),
        (t.VARCHAR, 40, False, latin1, None),
        (t.VARCHAR, 300, False, binary, None),
        (t.VARCHAR, 60, False, gbk, None),
        (t.STRING, (t.STRING << 8) | 30, False, utf8, None),
        (t.STRING, (t.STRING << 8) | 8, False, binary, None),  # BINARY(8): padded by its decoder
        *[(t.BLOB, prefix, False, charset, None) for prefix in (1, 2, 3, 4) for charset in (utf8, binary)],
        (t.BLOB, 2, False, None, None),
        (t.ENUM, (t.ENUM << 8) | 1, False, utf8, ("NEW", "PAID", "DONE")),
        (t.ENUM, (t.ENUM << 8) | 2, False, utf8, None),
    ]
    return [
        ColumnMeta(i, f"c{i}", code, meta, True, unsigned, charset, False, "x", 0, 0, enum_values=names)
        for i, (code, meta, unsigned, charset, names) in enumerate(kinds)
    ]


def _value(column: object, rnd: object) -> bytes:
    """Random stored bytes of one value (mostly valid, sometimes not)."""
    import random

    from relay.binlog import types as t
    from relay.binlog.events import ColumnMeta

    assert isinstance(column, ColumnMeta) and isinstance(rnd, random.Random)
    code, meta = column.type_code, column.meta
    fixed = {t.TINY: 1, t.SHORT: 2, t.INT24: 3, t.LONG: 4, t.LONGLONG: 8, t.FLOAT: 4, t.DOUBLE: 8}
    if code in fixed:
        return rnd.randbytes(fixed[code])
    if code == t.NEWDECIMAL:
        precision, scale = meta >> 8, meta & 0xFF
        intg = precision - scale
        if intg < 0:
            return rnd.randbytes(rnd.randrange(8))
        size = t.DIG2BYTES[intg % 9] + 4 * (intg // 9) + 4 * (scale // 9) + t.DIG2BYTES[scale % 9]
        if rnd.random() < 0.2:
            return rnd.randbytes(size)  # often digit groups out of range: the decoder's arithmetic
        digits = "".join(rnd.choice("0000123456789") for _ in range(precision))
        sign = rnd.choice("+-")
        import decimal

        value = decimal.Decimal(f"{sign}{digits[:intg] or '0'}.{digits[intg:] or '0'}")
        return _decimal_bytes(value, precision, scale)
    if code == t.DATE:
        if rnd.random() < 0.8:
            y, m, d = rnd.randrange(10000), rnd.randrange(13), rnd.randrange(32)
            return ((y << 9) | (m << 5) | d).to_bytes(3, "little")
        return rnd.randbytes(3)
    if code == t.DATETIME2:
        fsize = (meta + 1) // 2
        if rnd.random() < 0.8:
            y, mo, d = rnd.randrange(10000), rnd.randrange(13), rnd.randrange(32)
            h, mi, s = rnd.randrange(24), rnd.randrange(60), rnd.randrange(60)
            packed = (((y * 13 + mo) << 5 | d) << 17 | (h << 12 | mi << 6 | s)) + 0x8000000000
            frac = rnd.randrange(10**meta) * 10 ** (fsize * 2 - meta) if fsize else 0
            return packed.to_bytes(5, "big") + frac.to_bytes(fsize, "big")
        return rnd.randbytes(5 + fsize)
    if code == t.TIMESTAMP2:
        return rnd.randbytes(4 + 2)
    if code == t.TIME2:
        return (0x800000 + rnd.randrange(-500000, 500000)).to_bytes(3, "big") + rnd.randbytes(1)
    if code == t.YEAR:
        return rnd.randbytes(1)
    if code in (t.VARCHAR, t.STRING, t.BLOB):
        if code == t.BLOB:
            prefix = meta
        elif code == t.STRING:
            prefix = 1 if t.string_type(meta)[1] < 256 else 2
        else:
            prefix = 1 if meta < 256 else 2
        pool = ["plain", "naïve café", "中文", "\U0001f600", 'a"b\\c\n']
        raw = rnd.choice(pool).encode() if rnd.random() < 0.5 else rnd.randbytes(rnd.randrange(12))
        raw = raw[: (1 << (8 * prefix)) - 1]
        return len(raw).to_bytes(prefix, "little") + raw
    if code == t.ENUM:
        size = meta & 0xFF
        return rnd.randrange(5 if size == 1 else 300).to_bytes(size, "little")
    raise AssertionError(code)


def _decimal_bytes(value: object, precision: int, scale: int) -> bytes:
    """MySQL's decimal2bin of ``value`` (a decimal.Decimal)."""
    import decimal

    from relay.binlog import types as t

    assert isinstance(value, decimal.Decimal)
    negative = value < 0
    text = f"{abs(value):.{scale}f}"
    ipart, _, fpart = text.partition(".")
    intg = precision - scale
    ipart = ipart.rjust(intg, "0")[-intg:] if intg else ""
    groups: list[tuple[int, str]] = []
    lead = intg % 9
    if lead:
        groups.append((lead, ipart[:lead]))
    groups += [(9, ipart[lead + 9 * k : lead + 9 * k + 9]) for k in range(intg // 9)]
    groups += [(9, fpart[9 * k : 9 * k + 9]) for k in range(scale // 9)]
    if scale % 9:
        groups.append((scale % 9, fpart[9 * (scale // 9) :]))
    out = b"".join(int(digits or "0").to_bytes(t.DIG2BYTES[w], "big") for w, digits in groups)
    raw = bytearray(out)
    raw[0] ^= 0x80
    if negative:
        raw = bytearray(b ^ 0xFF for b in raw)
    return bytes(raw)


def test_the_c_row_reader_gives_the_text_of_the_python_decoders() -> None:
    """Random images of every column kind (random NULLs, columns left out, invalid values, images cut
    short): the C reader's values and end position — or its error — equal the Python path's."""
    import random

    from relay.binlog import rows, values

    if rows.C_READER is None:
        pytest.skip("the C row reader is not built (or the relay runs pure Python)")
    columns = tuple(_columns())
    plan = rows._Plan(columns, values.UTC_ZONE)  # type: ignore[arg-type]
    assert {op for op, *_ in plan.native} >= set(range(8))  # every op is exercised
    rnd = random.Random(23)
    compared = 0
    for _ in range(3000):
        present = plan.full if rnd.random() < 0.5 else rnd.getrandbits(plan.ncols) | 1
        steps = plan.steps(present)
        nulls = 0 if rnd.random() < 0.3 else rnd.getrandbits(len(steps))
        body = b"".join(_value(columns[i], rnd) for bit, (i, _) in enumerate(steps) if not nulls >> bit & 1)
        image = nulls.to_bytes((len(steps) + 7) >> 3, "little") + body
        if rnd.random() < 0.05:
            image = image[: rnd.randrange(len(image) + 1)]
        data = rnd.randbytes(rnd.randrange(3)) + image
        start = len(data) - len(image)
        native = plan.native
        reader = rows.C_READER(tuple((i, *native[i], d) for i, d in steps), plan.ncols)
        want: object
        try:
            want = rows._image(data, start, steps, plan.ncols)
        except Exception as exc:
            want = (type(exc), str(exc))
        got: object
        try:
            got = reader(data, start)
        except Exception as exc:
            got = (type(exc), str(exc))
        assert got == want, (present, nulls, data.hex())
        compared += 1
    assert compared == 3000


def test_the_c_row_reader_writes_the_integer_and_date_edges_as_the_decoders() -> None:
    """Each integer width, signed and unsigned, at 0, ±1 and both ends; dates and datetimes with the
    smallest and largest year, month and day fields their bits hold: the C reader's digits (written
    without printf) equal the Python decoders' text."""
    from relay.binlog import rows, values
    from relay.binlog import types as t

    if rows.C_READER is None:
        pytest.skip("the C row reader is not built (or the relay runs pure Python)")
    columns = [c for c in _columns() if c.type_code in (t.TINY, t.SHORT, t.INT24, t.LONG, t.LONGLONG, t.DATE)]  # type: ignore[attr-defined]
    columns += [c for c in _columns() if c.type_code == t.DATETIME2 and c.meta in (0, 3)]  # type: ignore[attr-defined]
    plan = rows._Plan(tuple(columns), values.UTC_ZONE)  # type: ignore[arg-type]
    steps = plan.steps(plan.full)
    native = plan.native
    reader = rows.C_READER(tuple((i, *native[i], d) for i, d in steps), plan.ncols)
    sizes = {t.TINY: 1, t.SHORT: 2, t.INT24: 3, t.LONG: 4, t.LONGLONG: 8, t.DATE: 3}
    for pick in range(6):
        body = b""
        for column in columns:
            code = column.type_code  # type: ignore[attr-defined]
            if code == t.DATETIME2:
                size = 5 + (column.meta + 1) // 2  # type: ignore[attr-defined]
                edge = [
                    b"\x80" + bytes(size - 1),
                    b"\xff" * size,
                    b"\x80\x00\x00\x00\x00" + b"\x00" * (size - 5),
                ]
                body += edge[pick % 3]
                continue
            n = sizes[code]
            edges = [0, 1, (1 << (8 * n)) - 1, 1 << (8 * n - 1), (1 << (8 * n - 1)) - 1, (1 << (8 * n)) - 2]
            body += edges[pick].to_bytes(n, "little")
        data = bytes((len(steps) + 7) >> 3) + body
        assert reader(data, 0) == rows._image(data, 0, steps, plan.ncols), (pick, data.hex())


_QUIET = """
import json, sys
before = list(sys.meta_path)
import mapping, relay, relay.errors, relay.spark
import relay._native as n
packages = ("relay.binlog", "relay.canal", "relay.kafka", "relay.source")
hot = sorted(m for m in sys.modules if m.startswith(packages))
decided = "mode" in vars(n)
print(json.dumps({"decided": decided, "finders": sys.meta_path == before, "hot": hot, "mode": n.mode}))
"""


@pytest.mark.parametrize("pure", [True, False], ids=["RELAY_PURE_PYTHON=1", "default"])
def test_importing_mapping_or_the_spark_readers_decides_nothing(pure: bool) -> None:
    out, _ = _run(_QUIET, ROOT, pure)
    # nothing decided, no finder added, no hot package loaded; reading the build decides it then
    assert (out["decided"], out["finders"], out["hot"]) == (False, True, [])
    assert out["mode"] == ("pure" if pure else _native.decide({})[0])


def _packaged(path: str, patterns: list[str]) -> bool:
    """Whether setuptools' package-data ``patterns`` take ``path`` (relative to the package): ``*`` never
    crosses a ``/``."""
    import fnmatch

    parts = path.split("/")
    for pattern in patterns:
        steps = pattern.split("/")
        if len(steps) != len(parts):
            continue
        if all(fnmatch.fnmatchcase(p, s) for p, s in zip(parts, steps, strict=True)):
            return True
    return False


def test_the_wheel_takes_every_compiled_module_and_c_source() -> None:
    # a wheel without a helper's .c reads as stale to relay._native, and the image ran pure Python (the
    # container build's `relay --version | grep compiled` failed on relay/ops/verify/_rowdigest.c)
    import tomllib

    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import build_compiled
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = project["tool"]["setuptools"]["package-data"]["relay"]
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    wanted = ["_compiled.json", f"_compiled__mypyc{suffix}"]
    for module in (*build_compiled.MODULES, *build_compiled.C_MODULES):
        inner = module.removeprefix("relay.").replace(".", "/")
        wanted.append(inner + suffix)
        if module in build_compiled.C_MODULES:
            wanted.append(inner + ".c")
    assert [w for w in wanted if not _packaged(w, patterns)] == []
