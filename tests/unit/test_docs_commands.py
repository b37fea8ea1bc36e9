"""What the README and the documentation site's pages show holds as written: every `relay …` line of a
code block, and every inline `relay …` giving an option a value, is given to the CLI's own parser (nothing
runs; what follows a shell operator, `> log &`, `|| echo …`, is the shell's), so a command shown without
an option it requires (`relay schema show --table …` without `-c`) fails here, not in a user's shell;
and every deploy/ file the docs and the conf/ examples name exists.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from relay.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[2]
# The README and every page of docs/ but the generated command reference (its usage lines are synopses).
DOCS = ("README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md")
                             if p.relative_to(ROOT).as_posix() != "docs/reference/cli.md"))  # fmt: skip
_RELAY = re.compile(r"^(?:\S*/)?relay(?=\s)")
_SHELL = ("|", "||", "&&", "&", ";")
_OPTION_VALUE = re.compile(r"\s--?[\w-]+[ =][^-\s]")


def shown_commands(text: str) -> list[str]:
    """`relay …` commands: lines of fenced blocks (continuations joined; not ```text blocks, which show
    output), inline spans holding an option."""
    candidates: list[str] = []
    for info, block in re.findall(r"```([^\n]*)\n(.*?)```", text, re.DOTALL):
        if info.strip() == "text":  # a command's output, not a command
            continue
        candidates += block.replace("\\\n", " ").splitlines()
    prose = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    # An inline span is an example to run when it gives an option a value (`relay schema show --table t`);
    # without one it names a command or mode in prose (`relay replay --remap`).
    candidates += [span for span in re.findall(r"`([^`\n]+)`", prose) if _OPTION_VALUE.search(span)]
    commands = []
    for candidate in candidates:
        for part in candidate.split(";"):  # `relay mapping history …; relay mapping rollback 3 …`
            command = _RELAY.sub("relay", part.strip())
            if command.startswith("relay "):
                commands.append(command)
    return commands


def argv_of(command: str) -> list[str]:
    """The arguments, without a trailing comment, [optional parts] and <placeholders>."""
    command = re.sub(r"\s+#.*$", "", command)
    command = re.sub(r"\[[^\]]*\]", "", command)
    command = re.sub(r"<[^>]*>", "X", command)
    argv = shlex.split(command)[1:]
    cut = next((i for i, a in enumerate(argv) if a in _SHELL or a.startswith((">", "2>"))), len(argv))
    return argv[:cut]


def elided(argv: list[str]) -> bool:
    """`relay spark mirror … --out DIR`: a bare `…` (not an option's value) stands for arguments left out."""
    return any(
        arg in ("…", "...") and (i == 0 or not argv[i - 1].startswith("-")) for i, arg in enumerate(argv)
    )


@pytest.mark.parametrize("doc", DOCS)
def test_every_command_shown_parses(doc: str) -> None:
    commands = shown_commands((ROOT / doc).read_text(encoding="utf-8"))
    parser = build_parser()
    refused = []
    for command in commands:
        if elided(argv_of(command)):
            continue
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                parser.parse_args(argv_of(command))
        except SystemExit as exc:
            if exc.code:
                refused.append(f"{command}\n    {err.getvalue().strip().splitlines()[-1]}")
    assert not refused, f"{doc}: commands the CLI refuses as written:\n" + "\n".join(refused)


def test_the_scan_finds_the_commands_the_docs_show() -> None:
    found = {doc: len(shown_commands((ROOT / doc).read_text(encoding="utf-8"))) for doc in DOCS}
    assert sum(found.values()) > 150, f"the scan found almost nothing: its patterns are out of date: {found}"
    assert found["docs/runbook.md"] > 5 and found["docs/operations/cluster.md"] > 5, found


def test_the_scan_sees_a_command_without_its_config() -> None:
    text = "Show it: `relay schema show --table db.t`.\n```\nrelay status -c conf/relay.yaml\n```\n"
    assert shown_commands(text) == ["relay status -c conf/relay.yaml", "relay schema show --table db.t"]
    with pytest.raises(SystemExit), contextlib.redirect_stderr(io.StringIO()):
        build_parser().parse_args(argv_of("relay schema show --table db.t"))
    assert elided(argv_of("relay spark mirror … --out DIR"))
    assert not elided(argv_of("relay schema resync --table … --yes"))


@pytest.mark.parametrize("doc", [*DOCS, "conf/relay.yaml", "conf/mapping.yaml", "CHANGELOG.md"])
def test_every_deploy_file_named_exists(doc: str) -> None:
    # (deploy/.env is the one the user makes from deploy/.env.example)
    text = (ROOT / doc).read_text(encoding="utf-8")
    named = {m.rstrip(".,:;)") for m in re.findall(r"\bdeploy/[\w./@-]*\w", text)} - {"deploy/.env"}
    missing = sorted(path for path in named if not (ROOT / path).exists())
    assert not missing, f"{doc} names files that do not exist: {missing}"
