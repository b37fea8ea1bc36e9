"""Mapping edits in the browser, checked exactly as ``relay mapping validate`` and every CLI edit check them.

Owns turning an edited text (or a version to roll back to) into a ``Preview`` — every problem with its key
path, the warnings, the logical changes (``mapping.diff.logical_changes``), the unified diff against the
version the edit is based on, and for each physical table whose route changes what the move implies —
and ``apply``, which checks again (never trusting a preview) and stores the next version with a
compare-and-set on the base version, as ``relay mapping import`` / ``rollback`` do, the console's user
recorded as its author (``mapping.store.acting_as``). The checks are the CLI's: ``parse_mapping`` (every
problem of the text), ``relay.ops.mapping_live`` against the source when it answers (two claimants, two
codecs in one topic, column controls), ``mapping.diff.moves`` / ``codec_moves`` for what moves. Running
relays pick the new version up at a batch boundary, as after a CLI edit. Runs on request threads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mapping.diff import Move, codec_moves, logical_changes, moves, text_diff
from mapping.document import strip_header
from mapping.load import dump_mapping, parse_mapping
from mapping.model import Mapping, Route
from mapping.store import VersionInfo, acting_as
from relay.config.load import RelayConfig
from relay.errors import InvalidMappingError, MappingError
from relay.ops.mapping_live import live_problems, live_source, reachable
from relay.wiring import mapping_store

__all__ = ["Current", "MoveNote", "Preview", "apply", "current", "preview", "version_text"]


@dataclass(frozen=True)
class Current:
    """The stored mapping of an instance: its version, its text (comments kept), the history."""

    store: str
    version: int
    text: str
    history: list[VersionInfo]
    move_mode: str


@dataclass
class MoveNote:
    """The physical tables whose route changes alike (from ``old`` to ``new``), and what that implies."""

    tables: list[str]
    old: str
    new: str
    topic_changes: bool
    notes: tuple[str, ...]


@dataclass
class Preview:
    """What an edit would do; ``ok``: it may be applied (no problem found)."""

    base: int
    text: str
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)
    diff: str = ""
    moves: list[MoveNote] = field(default_factory=list)
    against: str = ""
    rollback_to: int | None = None
    mapping: Mapping | None = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        return not self.errors and self.mapping is not None

    @property
    def unchanged(self) -> bool:
        return self.ok and not self.changes and not self.diff


def current(config: RelayConfig) -> Current:
    store = mapping_store(config)
    try:
        mapping = store.read()
        history = store.history()
        name = store.name
    finally:
        store.close()
    return Current(name, mapping.version, _text(mapping), history, config.mapping.move)


def version_text(config: RelayConfig, version: int) -> str:
    store = mapping_store(config)
    try:
        return _text(store.version(version))
    finally:
        store.close()


def _text(mapping: Mapping) -> str:
    return strip_header(mapping.text) if mapping.text is not None else dump_mapping(mapping)


def preview(config: RelayConfig, base: int, text: str, rollback_to: int | None = None) -> Preview:
    """The checks of an edit based on version ``base``: the new ``text``, or version ``rollback_to``."""
    store = mapping_store(config)
    try:
        old = store.version(base)
        stored = store.read()
        if rollback_to is not None:
            target = store.version(rollback_to)
            text = _text(target)
    finally:
        store.close()
    out = Preview(base, text, rollback_to=rollback_to)
    if stored.version != base:
        out.errors.append(
            f"the mapping changed while you edited it: your edit is based on version {base}, the stored "
            f"version is now {stored.version} (reload the page and redo the edit)"
        )
    try:
        new = parse_mapping(text, source="the edited mapping")
    except MappingError as exc:
        out.errors.extend(_lines(exc))
        return out
    _check(config, old, new, out)
    return out


def _check(config: RelayConfig, old: Mapping, new: Mapping, out: Preview) -> None:
    warned: list[str] = []
    live = reachable(live_source(config), columns=bool(new.column_controls()), warn=warned.append)
    out.warnings.extend(warned)
    out.warnings.extend(str(w) for w in new.warnings())
    if live is not None:
        out.errors.extend(str(e) for e in live_problems(new, live))
        out.against = f"checked against the {len(live[0])} tables of the source"
    else:
        out.against = "the source did not answer: patterns checked against each other only"
    out.changes = logical_changes(old, new)
    out.diff = text_diff(old, new, f"version {old.version} (current)", "edited")
    for name in codec_moves(old, new):
        problem = (
            f"{name}: its topic and its codec change together; a relay with mapping.move: copy refuses "
            "this version (the history cannot be copied into the new topic in another codec): change one "
            "at a time"
        )
        (out.errors if config.mapping.move == "copy" else out.warnings).append(problem)
    if live is not None:
        found = moves(old, new, live[0])
        out.errors.extend(f"{m.db}.{m.table}: {m.error}" for m in found if m.error is not None)
        out.moves = _grouped([_note(config, m) for m in found if m.error is None])
    if not out.errors:
        out.mapping = new


def _grouped(notes: list[MoveNote]) -> list[MoveNote]:
    """One line per (old route, new route, implications), listing its tables."""
    groups: dict[tuple[str, str, tuple[str, ...]], MoveNote] = {}
    for note in notes:
        key = (note.old, note.new, note.notes)
        if key in groups:
            groups[key].tables.extend(note.tables)
        else:
            groups[key] = note
    return list(groups.values())


def _note(config: RelayConfig, move: Move) -> MoveNote:
    name = [f"{move.db}.{move.table}"]
    old, new = move.old, move.new
    was, now = _route(old), _route(new)
    if old is None or new is None or old.topic == new.topic:
        what = "now published" if old is None else ("no longer published" if new is None else "")
        extra = _key_note(old, new)
        notes = tuple(n for n in (what, extra) if n) or ("routing details change; the topic stays",)
        return MoveNote(name, was, now, False, notes)
    if config.mapping.move == "copy":
        replay = (
            f"replay: the running relay first copies the history {old.topic} retains of this table into "
            f"{new.topic} (it keeps publishing under the current version meanwhile; the last round pauses it "
            "briefly), then switches: no `relay replay` is needed"
        )
    else:
        replay = (
            f"no replay: with mapping.move: switch the relay switches at once and the history stays in "
            f"{old.topic}; `relay replay --remap` would place it behind newer changes (refused): re-snapshot "
            "the table (`relay snapshot run --table`) to give the new topic its rows"
        )
    order = (
        f"per-key order: every change of a key goes to one partition of {new.topic} in binlog order, the "
        f"copied history before the first new change; a consumer must not merge {old.topic} and "
        f"{new.topic} by offset (order them by sequence, part)"
    )
    return MoveNote(name, was, now, True, tuple(n for n in (replay, order, _key_note(old, new)) if n))


def _key_note(old: Route | None, new: Route | None) -> str:
    if old is None or new is None or (old.key_columns, old.key_shard) == (new.key_columns, new.key_shard):
        return ""
    return "the record key changes: a row's later changes may go to another partition than its earlier ones"


def _route(route: Route | None) -> str:
    if route is None:
        return "(dropped)"
    return f"{route.topic} as {route.logical_db}.{route.logical_table} ({route.codec})"


def _lines(exc: MappingError) -> list[str]:
    if isinstance(exc, InvalidMappingError):
        return [str(e) for e in exc.errors]
    return [str(exc)]


def apply(
    config: RelayConfig, base: int, text: str, user: str, note: str, rollback_to: int | None
) -> Preview:
    """Check again and store the next version (``preview.ok`` False: nothing stored, ``errors`` say why);
    the stored version is in ``preview.mapping``."""
    out = preview(config, base, text, rollback_to)
    if not out.ok or out.unchanged:
        return out
    assert out.mapping is not None
    if rollback_to is not None:
        note = note or f"rollback to version {rollback_to}"
    store = mapping_store(config)
    try:
        with acting_as(f"{user} (relay console)"):
            out.mapping = store.write(out.mapping, expected=base, note=note or "edited in relay console")
    except MappingError as exc:
        out.errors.extend(_lines(exc))
        out.mapping = None
    finally:
        store.close()
    return out


def summary(preview: Preview) -> dict[str, Any]:
    """The preview as the audit log keeps it."""
    return {
        "base": preview.base,
        "rollback_to": preview.rollback_to,
        "changes": preview.changes,
        "moves": [t for m in preview.moves if m.topic_changes for t in m.tables],
        "errors": preview.errors,
    }
