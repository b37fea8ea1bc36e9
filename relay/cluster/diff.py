"""What changes between two versions of an instance definition: its settings, key by key, and its text.

Owns the comparisons ``relay instance add|update|remove --dry-run`` and ``relay instance history``
show. Pure functions over YAML trees and texts, run on the caller's thread; they hand back lines.
``${NAME}`` references are compared as written: a definition never holds a resolved secret.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from typing import Any

__all__ = ["changes", "flatten", "summary", "text_diff"]

_ABSENT = object()


def flatten(document: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Every leaf of a YAML tree by its dotted key path (``source.port``, ``kafka.settings.linger.ms``);
    a list is one leaf, an empty mapping too."""
    out: dict[str, Any] = {}
    for key, value in document.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, path))
        else:
            out[path] = value
    return out


def changes(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> list[str]:
    """One line per key added (``+``), removed (``-``) or changed (``~``), in key order. ``None``: no
    definition (before the first version, after a removal)."""
    a = flatten(old or {})
    b = flatten(new or {})
    lines: list[str] = []
    for key in sorted(a.keys() | b.keys()):
        x, y = a.get(key, _ABSENT), b.get(key, _ABSENT)
        if x is _ABSENT:
            lines.append(f"+ {key}: {_show(y)}")
        elif y is _ABSENT:
            lines.append(f"- {key}: {_show(x)}")
        elif x != y:
            lines.append(f"~ {key}: {_show(x)} -> {_show(y)}")
    return lines


def text_diff(old: str, new: str, old_label: str = "old", new_label: str = "new") -> str:
    """A unified diff of the two YAML texts as written ("" when equal)."""
    a = old.splitlines(keepends=True)
    b = new.splitlines(keepends=True)
    return "".join(difflib.unified_diff(a, b, old_label, new_label))


def summary(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> str:
    """A short description of what a version changed (for ``history``)."""
    if new is None:
        return "removed"
    if old is None:
        return "defined"
    keys = [line[2:].split(":", 1)[0] for line in changes(old, new)]
    if not keys:
        return "no setting changed"
    text = "changed " + ", ".join(keys)
    return text if len(text) <= 100 else text[:97] + "..."


def _show(value: Any) -> str:
    if isinstance(value, str):
        return value if value and value.strip() == value and "\n" not in value else json.dumps(value)
    return json.dumps(value, ensure_ascii=False, default=str)
