"""Which build of the hot modules runs: the mypyc-compiled extensions, or their Python source.

``scripts/build-compiled`` compiles the per-row modules with mypyc, beside their sources, and writes
``relay/_compiled.json``: the modules and the SHA-256 of each one's source when it was compiled.
``install()`` decides, once per process, before any of those modules is imported: the packages that hold
them (``relay.binlog``, ``relay.canal``, ``relay.kafka``, ``relay.source``) call it from their
``__init__.py``, so importing ``relay`` itself, ``relay.errors``, ``mapping`` or ``relay.spark`` decides
nothing and changes nothing (no manifest read, no source hashed, no finder added); reading ``mode``,
``reason``, ``compiled_modules`` or ``c_helpers`` (or ``describe()``) decides it too. It chooses:

- ``compiled``: the manifest exists, was built for this interpreter, and every listed source still has its
  recorded hash. Python's own import system then loads the extensions (they come before ``.py`` files).
- ``pure``: otherwise — nothing compiled, ``RELAY_PURE_PYTHON=1`` set, or a source edited since the build
  (``stale``; logged once as a warning naming the files). A finder placed first on ``sys.meta_path``
  then imports every ``relay.*`` module from its ``.py`` file, so an extension never shadows the source
  it was built from (nor one left without a manifest by an interrupted build). One stale module makes
  the whole set pure: compiled modules call each other directly, so a fresh extension could still run
  the stale one's old code.

The Python source is the truth and stays complete: the extensions are only a faster form of it, checked to
give byte-identical records (``tests/unit/test_golden_records.py``). Standard library only; imports nothing
from the relay.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import logging
import os
import sys
import sysconfig
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType

log = logging.getLogger("relay")

ENV_PURE = "RELAY_PURE_PYTHON"
MANIFEST = Path(__file__).resolve().parent / "_compiled.json"
_ROOT = MANIFEST.parent.parent

# Set by ``install()``; until then reading one of them calls it (``__getattr__``).
mode: str  # "compiled" or "pure"; see ``describe()``
reason: str  # why pure ("" when compiled)
compiled_modules: tuple[str, ...]  # the modules running compiled (empty when pure)
c_helpers: tuple[str, ...]  # the hand-written C helpers in use (empty when pure)
_DECIDED = ("mode", "reason", "compiled_modules", "c_helpers")
_deciding = threading.RLock()  # two packages imported at once by two threads: one decision, one finder


def __getattr__(name: str) -> object:
    """The build, decided on first use (``install``)."""
    if name in _DECIDED:
        install()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def describe() -> str:
    """One line for ``relay --version`` and ``relay bench``: the build in use, and why."""
    install()
    if mode == "compiled":
        helpers = f", {len(c_helpers)} C helpers" if c_helpers else ""
        return f"compiled (mypyc: {len(compiled_modules)} modules{helpers})"
    return f"pure Python ({reason})"


def _source(module: str) -> Path:
    if module.endswith(".c"):  # a C helper (scripts/build_compiled.py C_MODULES): its C source
        return _ROOT / (module[:-2].replace(".", "/") + ".c")
    return _ROOT / (module.replace(".", "/") + ".py")


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


class _SourceFinder(importlib.abc.MetaPathFinder):
    """Imports every ``relay.*`` module that has a ``.py`` file from that file, never from an extension."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith("relay."):
            return None
        source = _source(fullname)
        if not source.is_file():
            return None  # a package (its __init__.py) or no module at all: Python's own finders decide
        return importlib.util.spec_from_file_location(fullname, source)


def _read_manifest() -> dict[str, str] | None:
    """The compiled modules and their source hashes (C helpers: of their ``.c`` source, under their name +
    ``.c``); None when nothing usable was built."""
    try:
        doc = json.loads(MANIFEST.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    modules = doc.get("modules") if isinstance(doc, dict) else None
    if not isinstance(modules, dict) or doc.get("ext_suffix") != sysconfig.get_config_var("EXT_SUFFIX"):
        return None
    helpers = doc.get("c_modules", {})
    if not isinstance(helpers, dict):
        return None
    return {str(k): str(v) for k, v in modules.items()} | {f"{k}.c": str(v) for k, v in helpers.items()}


def decide(environ: Mapping[str, str]) -> tuple[str, str, tuple[str, ...]]:
    """(mode, reason, compiled modules) for a process started with ``environ``; changes nothing."""
    built = _read_manifest()
    if environ.get(ENV_PURE, "") not in ("", "0"):
        return "pure", f"{ENV_PURE}={environ[ENV_PURE]}", ()
    if built is None:
        return "pure", "not compiled: see scripts/build-compiled", ()
    stale = sorted(str(_source(m).relative_to(_ROOT)) for m, d in built.items() if _digest(_source(m)) != d)
    if stale:
        return "pure", f"stale compiled modules: {', '.join(stale)} changed since scripts/build-compiled", ()
    return "compiled", "", tuple(sorted(m for m in built if not m.endswith(".c")))


def install() -> None:
    """Decide the build (once per process); for the pure one, put the source finder first."""
    global mode, reason, compiled_modules, c_helpers
    with _deciding:
        if "mode" in globals():
            return
        chosen, why, compiled = decide(os.environ)
        if chosen == "compiled":
            built = _read_manifest() or {}
            c_helpers = tuple(sorted(m[:-2] for m in built if m.endswith(".c")))
        else:
            c_helpers = ()
            if why.startswith("stale"):
                log.warning("running pure Python: %s (run it again)", why)
            # Even with no (usable) manifest: extensions left by an interrupted or foreign build never load.
            sys.meta_path.insert(0, _SourceFinder())
        mode, reason, compiled_modules = chosen, why, compiled
