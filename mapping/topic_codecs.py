"""One codec per topic: the topics a mapping's rules name, and the topics two rules give different codecs.

Owns ``TopicUse``, ``static_topics`` (the topics decided by logical names alone, with the codec each rule
uses there) and ``codec_conflicts`` (a ``MappingError`` naming the later rule's codec setting and the
earlier rule). Pure functions, safe on any thread; ``mapping.checks`` calls them while a mapping is built.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mapping.names import (
    expand_topic,
    has_physical_placeholder,
    has_placeholder,
    name_path,
    table_path,
    template_problem,
)
from mapping.parts import MappingFields
from relay.errors import MappingError


@dataclass(frozen=True)
class TopicUse:
    """A topic that a rule of the mapping publishes to, with the codec it uses there and the key paths
    of the rule and of the codec setting it inherits (``defaults.codec`` when none is written)."""

    topic: str
    codec: str
    rule: str
    codec_path: str


def static_topics(mapping: MappingFields) -> list[TopicUse]:
    """The topics the mapping's rules name without physical names ({db}/{table}), with their codecs."""
    d = mapping.defaults
    out: list[TopicUse] = []
    for db in mapping.logical_dbs:
        path = name_path("logical_dbs", db.name)
        db_codec, db_codec_path = (db.codec, f"{path}.codec") if db.codec else (d.codec, "defaults.codec")
        own = db.topic or d.topic
        unclaimed = db.unclaimed_tables or d.unclaimed_tables
        fixed = template_problem(own) is None and not has_physical_placeholder(own)
        if unclaimed == "own_name" and fixed and "{logical_table}" not in own:
            topic = expand_topic(own, "", "", db.name, "")
            out.append(TopicUse(topic, db_codec, f"{path} (its unclaimed tables)", db_codec_path))
        for table in db.tables:
            template = table.topic or db.topic or d.topic
            if has_physical_placeholder(template) or template_problem(template) is not None:
                continue
            tpath = table_path(db.name, table)
            codec, codec_path = (table.codec, f"{tpath}.codec") if table.codec else (db_codec, db_codec_path)
            out.append(
                TopicUse(expand_topic(template, "", "", db.name, table.name), codec, tpath, codec_path)
            )
    rule = mapping.unmapped
    if rule.topic is not None and not rule.drops and not has_placeholder(rule.topic):  # names decide the rest
        out.append(TopicUse(rule.topic, d.codec, "unmapped", "defaults.codec"))
    return out


def codec_conflicts(uses: Sequence[TopicUse]) -> list[MappingError]:
    """A topic given two codecs: its consumers decode every record with one (canal's client, Spark's
    ``--codec``), so the records of the other would be unreadable. The error names the later rule's
    codec setting and the earlier rule."""
    first: dict[str, TopicUse] = {}
    errors: list[MappingError] = []
    for use in uses:
        seen = first.setdefault(use.topic, use)
        if seen.codec != use.codec:
            errors.append(
                MappingError(
                    use.codec_path,
                    f"topic {use.topic!r} would carry {use.codec} records from {use.rule} and {seen.codec} "
                    f"records from {seen.rule}: one topic, one codec (a consumer decodes a topic with one); "
                    "give them the same codec or different topics",
                )
            )
    return errors
