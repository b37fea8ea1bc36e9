"""The physical-name patterns of a mapping: compiled, matched, and checked for overlaps.

Owns ``Pattern`` and ``Claimant`` (a logical db or table with its compiled regexes: the index
``Mapping.resolve`` walks), ``compile_patterns`` (a bad or duplicate regex named by its key path),
``literal_of`` (the one name a plain pattern matches) and ``check_overlaps`` (two claimants whose patterns
can match one name, proven by an example). Pure functions, safe on any thread; ``mapping.checks`` calls
them while a mapping is built.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass

from mapping.parts import LogicalDb, LogicalTable
from mapping.samples import examples
from relay.errors import MappingError

_REGEX_META = frozenset(".^$*+?{}[]|()")


@dataclass(frozen=True)
class Pattern:
    pattern: str
    regex: re.Pattern[str]
    path: str


@dataclass(frozen=True)
class Claimant:
    """A logical db or table with its compiled patterns (``tables`` only for a db)."""

    item: LogicalDb | LogicalTable
    path: str
    patterns: tuple[Pattern, ...]
    tables: tuple[Claimant, ...] = ()


def quoted(pattern: str) -> str:
    """A regex as the user wrote it, in quotes (``repr`` would double every backslash)."""
    return f"'{pattern}'"


def first_match(patterns: Sequence[Pattern], name: str) -> Pattern | None:
    for pat in patterns:
        if pat.regex.fullmatch(name):
            return pat
    return None


def literal_of(pattern: str) -> str | None:
    """The one name ``pattern`` matches when it is a plain (possibly escaped) literal, else None."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            if i + 1 >= len(pattern) or pattern[i + 1].isalnum():
                return None  # \d, \w, \1 ... are classes or references, not literals
            out.append(pattern[i + 1])
            i += 2
            continue
        if char in _REGEX_META:
            return None
        out.append(char)
        i += 1
    return "".join(out)


def compile_patterns(patterns: Sequence[str], path: str, errors: list[MappingError]) -> tuple[Pattern, ...]:
    if not patterns:
        errors.append(MappingError(path, "empty list: give at least one regex"))
    out: list[Pattern] = []
    seen: set[str] = set()
    for i, pattern in enumerate(patterns):
        where = f"{path}[{i}]"
        if not pattern:
            errors.append(MappingError(where, "empty pattern"))
            continue
        if pattern in seen:
            errors.append(MappingError(where, f"duplicate pattern {quoted(pattern)}"))
            continue
        seen.add(pattern)
        try:
            out.append(Pattern(pattern, re.compile(pattern), where))
        except re.error as exc:
            errors.append(
                MappingError(where, f"bad regex {quoted(pattern)}: {exc.msg} at position {exc.pos}")
            )
    return tuple(out)


def check_overlaps(claimants: Sequence[Claimant], kind: str, errors: list[MappingError]) -> None:
    for i, first in enumerate(claimants):
        for second in claimants[i + 1 :]:
            for one in first.patterns:
                for two in second.patterns:
                    why = _overlap(one, two)
                    if why is not None:
                        problem = (
                            f"{kind} pattern {quoted(two.pattern)} of {second.path} overlaps pattern "
                            f"{quoted(one.pattern)} of {first.path}: {why}"
                        )
                        errors.append(MappingError(two.path, problem))


def _overlap(one: Pattern, two: Pattern) -> str | None:
    """Why a physical name can match both patterns (an example of one the other matches), or None
    when none was found here: ``resolve`` and ``validate_against`` then judge real names."""
    if one.pattern == two.pattern:
        return "identical patterns"
    for lit, other in ((_literal(one.pattern), two), (_literal(two.pattern), one)):
        if lit is not None and other.regex.fullmatch(lit):
            return f"{lit!r} matches both"
    for first, other in ((one, two), (two, one)):
        for name in _examples(first.pattern):
            if other.regex.fullmatch(name):
                return f"{name!r} matches both"
    return None


# Each pattern meets every other one of its level: its literal and examples are worked out once, not once a
# pair (a mapping of 300 tables took 52 s to validate when they were).
@functools.lru_cache(maxsize=8192)
def _literal(pattern: str) -> str | None:
    return literal_of(pattern)


@functools.lru_cache(maxsize=8192)
def _examples(pattern: str) -> tuple[str, ...]:
    return tuple(examples(pattern))
