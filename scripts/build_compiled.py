"""Compile the relay's hot modules with mypyc, in place; called by ``scripts/build-compiled``.

    .venv/bin/python scripts/build_compiled.py [--force] [--modules relay.binlog.values,...]

The modules in ``MODULES`` are compiled together as one mypyc group (their calls to each other are
native calls) into extension modules beside their sources (``relay/binlog/values.cpython-*.so`` …) and
one shared library ``relay/_compiled__mypyc.cpython-*.so``; the hand-written C helpers in ``C_MODULES``
(``relay/kafka/_jsontext.c``) are built beside them. The build then writes ``relay/_compiled.json``: the
modules and the SHA-256 of each one's source (``c_modules``: of each C helper's). ``relay._native``
(called by the packages holding them, ``relay/binlog/__init__.py`` …) uses the extensions only while
every listed source still has its recorded hash; otherwise, and with ``RELAY_PURE_PYTHON=1``, every
listed module is imported from its ``.py`` file (and the C helpers are not used). The pure-Python source
is the truth; the extensions are a cache of it.

Nothing is rebuilt when the manifest already matches the sources, this script, mypy's version and the
interpreter (``--force`` rebuilds anyway). Build outputs are ignored by git (``.gitignore``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = ROOT / "relay" / "_compiled.json"
GROUP = "relay._compiled"  # the shared library: relay/_compiled__mypyc.<EXT_SUFFIX>

# The per-row and per-record path, chosen by measurement (README, "Compiled against pure Python"). Left out:
# relay.kafka.canal_protobuf (mypyc refuses its surrogate-range regex literal; canal-json is the default), and
# the per-batch stages (server, publish loop). The binlog source and the instance's parser loop are in: every
# event passes through them (W1: 53 -> ~40 us CPU/row with them and the explicit __init__s of the
# per-transaction types); so is the walk that finds a time in the binlog (binlog_time: every event of the
# files it scans passes through it), compiled since it was part of the binlog source. The server checks and
# the start position, split from the binlog source too, run once per start and stay interpreted. mypyc names
# a C struct field after its attribute with one more underscore, so an attribute called ``_thread`` becomes
# ``__thread``, a GCC keyword: the C does not compile.
MODULES = (
    "relay.binlog.charsets",
    "relay.binlog.events",
    "relay.binlog.parse",
    "relay.binlog.rows",
    "relay.binlog.stream",
    "relay.binlog.tablemap",
    "relay.binlog.types",
    "relay.binlog.values",
    "relay.canal.entry",
    "relay.canal.entry_builder",
    "relay.canal.ring_store",
    "relay.canal.sink",
    "relay.canal.xa",
    "relay.kafka.barriers",
    "relay.kafka.canal_json",
    "relay.kafka.codec",
    "relay.kafka.debezium_json",
    "relay.kafka.debezium_rows",
    "relay.kafka.debezium_types",
    "relay.kafka.delivery",
    "relay.kafka.headers",
    "relay.kafka.json_rows",
    "relay.kafka.keys",
    "relay.kafka.partitioner",
    "relay.kafka.plans",
    "relay.kafka.protobuf_rows",
    "relay.kafka.publisher",
    "relay.kafka.records",
    "relay.kafka.sequences",
    "relay.kafka.session",
    "relay.kafka.settings",
    "relay.kafka.topics",
    "relay.kafka.transaction",
    "relay.kafka.verdicts",
    "relay.kafka.window",
    "relay.source.binlog_source",
    "relay.source.binlog_time",
    "relay.source.parser",
    "relay.source.read_ahead",
    "relay.source.snapshot_rows",
)


# C helpers with no Python source of their own: the modules that use them take their Python path whenever
# the relay runs pure (relay._native). relay.kafka._jsontext: a canal-json row's ``data`` object as bytes;
# relay.binlog._rowimage: a row image's values as canal's text; relay.ops.verify._rowdigest: the row digests
# of canal-json records, for relay verify's topic read.
C_MODULES = ("relay.binlog._rowimage", "relay.kafka._jsontext", "relay.ops.verify._rowdigest")


def c_source_of(module: str) -> Path:
    return ROOT / (module.replace(".", "/") + ".c")


def source_of(module: str) -> Path:
    return ROOT / (module.replace(".", "/") + ".py")


def extension_of(module: str) -> Path:
    return ROOT / (module.replace(".", "/") + sysconfig.get_config_var("EXT_SUFFIX"))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def wanted_manifest(modules: tuple[str, ...]) -> dict[str, object]:
    import mypy.version

    return {
        "ext_suffix": sysconfig.get_config_var("EXT_SUFFIX"),
        "mypy": mypy.version.__version__,
        "builder": sha256(Path(__file__)),
        "modules": {m: sha256(source_of(m)) for m in modules},
        "c_modules": {m: sha256(c_source_of(m)) for m in C_MODULES},
    }


def up_to_date(want: dict[str, object], modules: tuple[str, ...]) -> bool:
    try:
        have = json.loads(MANIFEST.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    shared = ROOT / (GROUP.replace(".", "/") + "__mypyc" + str(want["ext_suffix"]))
    built = (*modules, *C_MODULES)
    return have == want and shared.exists() and all(extension_of(m).exists() for m in built)


def clean() -> None:
    """Remove every extension and the manifest (the relay then runs from source)."""
    MANIFEST.unlink(missing_ok=True)
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    for path in (ROOT / "relay").rglob("*" + suffix):
        path.unlink()


def build(modules: tuple[str, ...]) -> None:
    from mypyc.build import mypycify
    from setuptools import Distribution, Extension

    clean()  # a half-replaced set of extensions must never be loaded: the manifest comes last
    os.chdir(ROOT)
    with tempfile.TemporaryDirectory(prefix="relay-mypyc-") as tmp:
        extensions = mypycify(
            [str(source_of(m).relative_to(ROOT)) for m in modules],
            opt_level=os.environ.get("MYPYC_OPT_LEVEL", "3"),
            group_name=GROUP,
            target_dir=tmp,  # mypyc's generated C
        )
        helpers = [
            Extension(m, [str(c_source_of(m).relative_to(ROOT))], extra_compile_args=["-O3"])
            for m in C_MODULES
        ]
        dist = Distribution({"name": "canal-relay-compiled", "ext_modules": [*extensions, *helpers]})
        cmd = dist.get_command_obj("build_ext")
        cmd.inplace = True
        cmd.build_temp = tmp
        cmd.parallel = os.cpu_count() or 1
        cmd.ensure_finalized()
        cmd.run()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--force", action="store_true", help="rebuild even when up to date")
    parser.add_argument("--clean", action="store_true", help="remove the compiled modules and stop")
    parser.add_argument("--modules", help="comma-separated modules instead of the default set (measuring)")
    args = parser.parse_args(argv)
    if args.clean:
        clean()
        print("build-compiled: removed the compiled modules; the relay runs from source")
        return 0
    modules = tuple(args.modules.split(",")) if args.modules else MODULES
    want = wanted_manifest(modules)
    if not args.force and up_to_date(want, modules):
        print("build-compiled: up to date")
        return 0
    started = time.monotonic()
    build(modules)
    # The hashes taken before the build: a source edited while it ran reads as stale afterwards.
    MANIFEST.write_text(json.dumps(want, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(
        f"build-compiled: {len(modules)} modules and {len(C_MODULES)} C helpers compiled in "
        f"{time.monotonic() - started:.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
