"""YAML as the relay's files need it: safe, and a key written twice in one mapping is a problem.

PyYAML's ``safe_load`` keeps the last of two equal keys silently, which hides a duplicated logical db
in a mapping or a second ``source:`` section in ``relay.yaml`` (the first one's settings then never
apply). ``load_strict`` parses like ``safe_load`` and returns every duplicate it found, each with its
line, so the caller reports them together with its other problems. Pure functions; no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

__all__ = ["Duplicate", "load_strict"]


@dataclass(frozen=True)
class Duplicate:
    """``key`` written again on ``line`` (1-based, column ``column``) after ``first_line``."""

    key: str
    line: int
    column: int
    first_line: int

    def problem(self) -> str:
        return f"duplicate key {self.key!r} (first written on line {self.first_line})"


class _Loader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that records duplicate keys (in ``duplicates``) instead of dropping them."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.duplicates: list[Duplicate] = []


def _construct_mapping(loader: _Loader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: dict[Any, yaml.Mark] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            first = seen.setdefault(key, key_node.start_mark)
        except TypeError:
            continue  # an unhashable key; construct_mapping reports it
        if first is not key_node.start_mark:
            mark = key_node.start_mark
            loader.duplicates.append(Duplicate(str(key), mark.line + 1, mark.column + 1, first.line + 1))
    return loader.construct_mapping(node, deep=True)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_strict(text: str) -> tuple[Any, list[Duplicate]]:
    """The YAML tree of ``text`` (as ``yaml.safe_load`` builds it) and every duplicate key in it.
    Raises ``yaml.YAMLError`` (a ``MarkedYAMLError`` with its place) when ``text`` is not YAML."""
    loader = _Loader(text)
    try:
        data = loader.get_single_data()
    finally:
        loader.dispose()
    return data, loader.duplicates
