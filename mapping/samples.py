"""Names a physical-name pattern matches: examples that prove two patterns overlap without a server.

Owns ``examples(pattern)``: a few short strings the regex fully matches, built from its parse tree
(Python's own regex parser): each literal as written, each class by a few members, each repetition at
its fewest counts and a little more, each alternative. ``mapping.patterns`` tries every example of one
pattern against the other: a match is a proof that some physical name (``shop_0`` for ``shop_\\d+``
beside ``shop_.*``) would be claimed twice, found when the mapping is built instead of when a relay
first sees such a table. Finding none proves nothing; ``Mapping.validate_against`` then decides on the
server's real names. Every example is checked against its own pattern before it is offered; any
construct this does not model (back-references, look-arounds it cannot satisfy) just gives fewer
examples. Pure functions.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

try:  # the stdlib's regex parser: its tree is what the regex engine runs
    from re import _parser as _sre  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - an interpreter without it: no examples, overlaps found later
    _sre = None

__all__ = ["examples"]

LIMIT = 32  # examples per pattern (and per partial product while building them)
_DIGITS = ("0", "1", "7")
_WORD = ("a", "0", "_")
_POOL = ("a", "z", "0", "1", "7", "9", "_", "-", ".", "A")


def examples(pattern: str, limit: int = LIMIT) -> list[str]:
    """Up to ``limit`` strings that ``pattern`` fully matches (shortest first); [] when unknown."""
    if _sre is None:
        return []
    try:
        regex = re.compile(pattern)
        found = _sequence(list(_sre.parse(pattern)))
    except (re.error, ValueError, TypeError, IndexError, RecursionError):
        return []
    out = sorted({s for s in found if regex.fullmatch(s)}, key=lambda s: (len(s), s))
    return out[:limit]


def _sequence(items: list[Any]) -> list[str]:
    """The concatenations of each item's options, kept to ``LIMIT``."""
    results = [""]
    for op, arg in items:
        options = _options(str(op), arg)
        results = [a + b for a, b in itertools.islice(itertools.product(results, options), LIMIT)]
    return results


def _options(op: str, arg: Any) -> list[str]:
    if op == "LITERAL":
        return [chr(arg)]
    if op == "NOT_LITERAL":
        return [c for c in _POOL if ord(c) != arg][:3]
    if op == "ANY":
        return ["a", "0", "_"]
    if op == "IN":
        return _class(arg)
    if op in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
        low, high, sub = arg
        counts = sorted({low, min(low + 1, high), min(low + 2, high)})
        inner = _sequence(list(sub))
        out: list[str] = []
        for count in counts:
            parts = itertools.islice(itertools.product(inner, repeat=count), LIMIT)
            out.extend("".join(p) for p in parts)
        return out[:LIMIT]
    if op in ("SUBPATTERN", "ATOMIC_GROUP"):
        return _sequence(list(arg[-1]))
    if op == "BRANCH":
        return [s for alternative in arg[1] for s in _sequence(list(alternative))][:LIMIT]
    if op in ("AT", "ASSERT", "ASSERT_NOT"):
        return [""]  # anchors and look-arounds take no characters (the final check filters)
    raise ValueError(f"not modelled: {op}")


def _class(members: list[Any]) -> list[str]:
    out: list[str] = []
    for op, arg in members:
        name = str(op)
        if name == "LITERAL":
            out.append(chr(arg))
        elif name == "RANGE":
            low, high = arg
            out.extend(dict.fromkeys((chr(low), chr(min(low + 1, high)), chr(high))))
        elif name == "CATEGORY":
            category = str(arg)
            if "DIGIT" in category and "NOT" not in category:
                out.extend(_DIGITS)
            elif "WORD" in category and "NOT" not in category:
                out.extend(_WORD)
            elif "SPACE" in category and "NOT" not in category:
                out.append(" ")
            else:
                out.extend(_POOL)
        elif name == "NEGATE":
            return list(_POOL)  # every candidate; the final check keeps those outside the class
    return list(dict.fromkeys(out))[:6] or list(_POOL)
