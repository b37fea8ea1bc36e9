#!/usr/bin/env python3
"""The sizes a reader must hold in their head: modules, classes and functions over the project's limits.

    python3 scripts/sizes.py            # every module, class and function over its limit, biggest first
    python3 scripts/sizes.py --all      # also the ten biggest of each kind, over the limit or not

Limits (docs/architecture.md, "Rooms"): a module 500 lines, a class 300, a function 60 — counted from the
first line of the definition (decorators included) to its last, blank lines and docstrings included.
Generated protobuf code is not counted; argument-parser builders (``add_*_parser``, ``build_parser``) may
exceed the function limit. A module that keeps an exception says why in its docstring, and lists itself in
``EXCEPTIONS`` below with that reason. Exit status 1 when something is over its limit. Standard library only.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("relay", "mapping")
MODULE_LIMIT, CLASS_LIMIT, FUNCTION_LIMIT = 500, 300, 60
PARSER_BUILDERS = ("add_", "build_parser")
EXCEPTIONS: dict[str, str] = {}  # "relay/x.py": why it keeps being over a limit


def sources() -> list[Path]:
    out: list[Path] = []
    for package in PACKAGES:
        out.extend(p for p in (ROOT / package).rglob("*.py") if not p.name.endswith("_pb2.py"))
    return sorted(out)


def measure() -> tuple[list[tuple[int, str]], list[tuple[int, str]], list[tuple[int, str]]]:
    modules, classes, functions = [], [], []
    for path in sources():
        rel = path.relative_to(ROOT).as_posix()
        text = path.read_text(encoding="utf-8")
        modules.append((len(text.splitlines()), rel))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                size = (node.end_lineno or node.lineno) - first + 1
                name = f"{rel}:{node.lineno} {node.name}"
                if isinstance(node, ast.ClassDef):
                    classes.append((size, name))
                elif not node.name.lstrip("_").startswith(PARSER_BUILDERS):
                    functions.append((size, name))
    return modules, classes, functions


def main(argv: list[str]) -> int:
    show_all = "--all" in argv
    modules, classes, functions = measure()
    over = 0
    for kind, items, limit in (
        ("modules", modules, MODULE_LIMIT),
        ("classes", classes, CLASS_LIMIT),
        ("functions", functions, FUNCTION_LIMIT),
    ):
        items.sort(reverse=True)
        big = [(n, name) for n, name in items if n > limit and name.split(":")[0] not in EXCEPTIONS]
        kept = [(n, name) for n, name in items if n > limit and name.split(":")[0] in EXCEPTIONS]
        over += len(big)
        note = f" (+{len(kept)} kept, see EXCEPTIONS)" if kept else ""
        print(f"{kind} over {limit} lines: {len(big)}{note}")
        for n, name in big:
            print(f"  {n:5d}  {name}")
        for n, name in kept:
            print(f"  {n:5d}  {name}  (kept: {EXCEPTIONS[name.split(':')[0]]})")
        if show_all:
            print(f"  biggest {kind}:")
            for n, name in items[:10]:
                print(f"    {n:5d}  {name}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
