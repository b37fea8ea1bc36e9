"""Write or check the documentation site's generated reference pages (docs/reference/).

``python -m relay.cli.docs_reference`` (``scripts/docs reference``) writes them; ``--check`` writes nothing
and exits 1 naming each page that differs from what the code generates now, with its first differing line
(tests/docs runs it, so a page cannot drift from the code). The command line page comes from the real
parser (``relay.cli.main.build_parser``: every command, subcommand, option, help text and default), the
exit statuses from ``EXIT_STATUSES``; relay.yaml, the mapping and the metrics from
``relay.dev.docs_reference``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from relay.cli.console import _USERS_ENV as USERS_ENV
from relay.cli.instance import ZOOKEEPER_ENV
from relay.cli.main import EXIT_STATUSES, build_parser
from relay.dev import docs_reference as gen

PAGES_DIR = gen.ROOT / "docs" / "reference"
# Environment variables some options take their default from (relay.cli.remote, instance, console).
_DEFAULTS_FROM_ENV = (ZOOKEEPER_ENV, USERS_ENV)


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, one-line help, parser) of each subcommand, in the order ``--help`` lists them."""
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._get_subactions()}
            seen: set[int] = set()
            for name, sub in action.choices.items():
                if id(sub) in seen:  # an alias
                    continue
                seen.add(id(sub))
                out.append((name, helps.get(name, ""), sub))
    return out


def _walk(
    parser: argparse.ArgumentParser, words: tuple[str, ...], help_text: str
) -> Iterator[tuple[tuple[str, ...], str, argparse.ArgumentParser]]:
    yield words, help_text, parser
    for name, text, sub in _subcommands(parser):
        yield from _walk(sub, (*words, name), text)


def _option_rows(parser: argparse.ArgumentParser) -> list[str]:
    formatter = parser._get_formatter()
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction | argparse._HelpAction):
            continue
        if action.help == argparse.SUPPRESS:
            continue
        if action.option_strings:
            metavar = formatter._format_args(action, action.dest.upper()) if action.nargs != 0 else ""
            name = ", ".join(f"`{o}{' ' + metavar if metavar else ''}`" for o in action.option_strings)
        else:
            name = f"`{formatter._format_args(action, action.dest)}`"
        text = formatter._expand_help(action) if action.help else ""
        default = action.default
        shown = (
            ""
            if default in (None, False, argparse.SUPPRESS) or action.nargs == 0 or not action.option_strings
            else gen.value_text(default)
        )
        rows.append(f"| {name} | {gen._cell(' '.join(text.split()))} | {gen._cell(shown)} |")
    return rows


def cli_page() -> str:
    # Usage lines wrap the same on every terminal, and defaults taken from the environment show as unset.
    saved = {name: os.environ.pop(name, None) for name in _DEFAULTS_FROM_ENV}
    columns, os.environ["COLUMNS"] = os.environ.get("COLUMNS"), "100"
    try:
        parser = build_parser()
        return _cli_text(parser)
    finally:
        for name, value in [*saved.items(), ("COLUMNS", columns)]:
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _cli_text(parser: argparse.ArgumentParser) -> str:
    lines = [
        "# Command line",
        "",
        gen.GENERATED,
        "",
        "Every `relay` command, subcommand and option, as `relay … --help` shows them. How a command ends "
        "is in [Exit statuses](exit-codes.md).",
    ]
    for words, help_text, sub in _walk(parser, (), parser.description or ""):
        title = " ".join(("relay", *words))
        lines += ["", f"{'#' * min(2 + max(len(words) - 1, 0), 4)} `{title}`", ""]
        text = " ".join((sub.description or help_text or "").split())
        if text:
            lines += [gen.escape(text), ""]
        usage = sub.format_usage().replace("usage: ", "", 1).strip()
        lines += ["```", usage, "```"]
        rows = _option_rows(sub)
        if rows:
            lines += ["", "| Option | Meaning | Default |", "|---|---|---|", *rows]
        commands = _subcommands(sub)
        if commands:
            lines += ["", "| Command | What it does |", "|---|---|"]
            lines += [f"| `{title} {n}` | {gen._cell(' '.join(h.split()))} |" for n, h, _ in commands]
    return "\n".join(lines) + "\n"


def exit_codes_page() -> str:
    """The statuses of ``EXIT_STATUSES`` (what ``relay --help`` ends with) as a table."""
    rows: list[list[str]] = []
    for line in EXIT_STATUSES.splitlines()[1:]:
        m = re.match(r"^\s{2}(\d+)\s+(.*)$", line)
        if m:
            rows.append([m.group(1), m.group(2).strip()])
        elif rows and line.strip():
            rows[-1][1] += " " + line.strip()
    lines = [
        "# Exit statuses",
        "",
        gen.GENERATED,
        "",
        "Every `relay` command ends with one of these (also at the end of `relay --help`). No command prints "
        "a traceback: `--debug` after `relay` (`relay --debug check -c conf/relay.yaml`) adds it after the "
        "one error line.",
        "",
        "| Status | Meaning |",
        "|---|---|",
    ]
    lines += [f"| {code} | {gen._cell(text)} |" for code, text in rows]
    return "\n".join(lines) + "\n"


def errors_page() -> str:
    """Every error class of ``relay.errors`` (the one-line errors a command stops with), in the order the
    module defines them: what it means (its docstring), its kind, and whether the relay retries it itself."""
    import inspect

    from relay import errors

    classes = [
        c
        for _, c in inspect.getmembers(errors, inspect.isclass)
        if issubclass(c, errors.RelayError) and c.__module__ == errors.__name__
    ]
    classes.sort(key=lambda c: inspect.getsourcelines(c)[1])
    lines = [
        "# Errors",
        "",
        gen.GENERATED,
        "",
        "Every error the relay stops with on purpose is one of these. A command prints it as one line, "
        "`relay: error: …` naming what is wrong and where (the setting, flag, table or server to change), "
        "and exits with status 2 ([Exit statuses](exit-codes.md)); `relay run` retries the retriable ones "
        "itself (with a backoff) and stops on the others. The messages an operator meets most, with their "
        "causes and fixes, are in [Troubleshooting](../operations/troubleshooting.md).",
        "",
        "| Error | Kind | Retried by the relay | Meaning |",
        "|---|---|---|---|",
    ]
    for cls in classes:
        parent = next((b.__name__ for b in cls.__bases__ if issubclass(b, errors.RelayError)), "")
        doc = " ".join((inspect.getdoc(cls) or "").split("\n\n")[0].split()).replace("``", "`")
        retried = "yes" if getattr(cls, "retriable", False) else "no"
        lines.append(f"| `{cls.__name__}` | {parent or '-'} | {retried} | {gen._cell(doc)} |")
    return "\n".join(lines) + "\n"


PAGES: dict[str, Callable[[], str]] = {
    "cli.md": cli_page,
    "config.md": gen.config_page,
    "mapping.md": gen.mapping_page,
    "metrics.md": gen.metrics_page,
    "exit-codes.md": exit_codes_page,
    "errors.md": errors_page,
}


def differences(pages_dir: Path = PAGES_DIR) -> list[str]:
    """One line per page whose committed text differs from the generated one: the page and the first
    differing line."""
    out = []
    for name, make in PAGES.items():
        path = pages_dir / name
        want = make()
        have = path.read_text(encoding="utf-8") if path.is_file() else None
        if have == want:
            continue
        if have is None:
            out.append(f"docs/reference/{name}: missing")
            continue
        a, b = have.splitlines(), want.splitlines()
        n = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        committed = a[n] if n < len(a) else "(end of page)"
        generated = b[n] if n < len(b) else "(end of page)"
        out.append(f"docs/reference/{name}:{n + 1}: committed {committed!r}, the code gives {generated!r}")
    return out


def write(pages_dir: Path = PAGES_DIR) -> list[Path]:
    pages_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, make in PAGES.items():
        path = pages_dir / name
        text = make()
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m relay.cli.docs_reference",
        description="Write docs/reference/ from the code (--check: only say which pages differ, exit 1).",
    )
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page differs")
    args = parser.parse_args(argv)
    if args.check:
        problems = differences()
        for line in problems:
            print(line, file=sys.stderr)
        if problems:
            print("regenerate them: scripts/docs reference", file=sys.stderr)
        return 1 if problems else 0
    for path in write():
        print(f"wrote {path.relative_to(gen.ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
