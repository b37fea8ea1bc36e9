"""Where a relay keeps what it writes: the state directory, and the one rule for paths.

Owns the rule, its file names and the guards around it. Configuration (``relay.yaml``, the mapping file,
TLS files) is only read; everything a relay or its operator commands write — the saved position and its
lock, the status file, the schema history, snapshot requests, the mapping history, replay checkpoints —
lives in ONE directory per instance:

- ``state_dir`` (default ``var/{instance}``), or the environment variable ``RELAY_STATE_DIR`` when set
  (it wins over the file, so an image or a unit can place state without editing the config);
  ``{instance}`` is replaced; a relative value is relative to the WORKING DIRECTORY of the process;
- the file names inside it are fixed (``STATE_FILES``); the keys that once named them one by one
  (``positions.path``, ``status.file``, ``schema.path``, ``snapshot.request_file``) are refused with a
  message saying where the file lives now (``moved_key_problem``).

Relative paths that are configuration keep resolving as before, against the config file's folder (its
parent when that folder is named ``conf``): ``mapping.file: conf/mapping.yaml`` finds the mapping
beside ``conf/relay.yaml`` from any working directory, because the two are written, shipped and
mounted together. TLS files (``source.tls.*``, ``kafka.settings``) are handed to their libraries as
written (relative to the working directory), as before.

Earlier versions resolved the state files against the config's folder too. A relay upgraded in place
would find no position in its new state directory and start from scratch — re-snapshotting, or
skipping to the binlog's end. ``legacy_state_problem`` finds durable state (a position, a schema
history) at the old place with none at the new one, and the relay and the commands that read that state
refuse to go on, naming both places and the command that moves the files. They refuse rather than move
the files themselves: the old place may be read-only (a config mount), may belong to a relay of the
old version still running there, and a move done behind the operator's back is a move nobody can
check. Pure paths and ``stat`` calls, on the caller's thread.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from relay.errors import ConfigError

STATE_ENV = "RELAY_STATE_DIR"
DEFAULT_STATE_DIR = "var/{instance}"

POSITION_FILE = "position.json"  # file backend: the resume point (``relay.positions.store``), + ``.lock``
STATUS_FILE = "status.json"  # what ``relay status`` reads
SCHEMA_HISTORY_FILE = "schema-history.jsonl"  # file backend: the schema history (``relay.schema.history``)
SNAPSHOT_REQUEST_FILE = "snapshot-request.json"  # ``relay snapshot run|cancel`` → the running relay
MAPPING_HISTORY_DIR = "mapping-history"  # file store: every mapping version (``mapping.store``)

STATE_FILES = (POSITION_FILE, STATUS_FILE, SCHEMA_HISTORY_FILE, SNAPSHOT_REQUEST_FILE, MAPPING_HISTORY_DIR)

# Keys of earlier versions that named one state file each, and the file that replaced them.
MOVED_KEYS = {
    ("positions", "path"): POSITION_FILE,
    ("status", "file"): STATUS_FILE,
    ("schema", "path"): SCHEMA_HISTORY_FILE,
    ("snapshot", "request_file"): SNAPSHOT_REQUEST_FILE,
}


def resolve_state_dir(
    configured: str, instance: str, work_dir: Path, environ: Mapping[str, str] = os.environ
) -> Path:
    """The absolute state directory: ``RELAY_STATE_DIR`` when set, else ``configured``; ``{instance}``
    replaced; a relative value joined to ``work_dir``. ``ConfigError`` naming where the value came from."""
    from_env = environ.get(STATE_ENV, "")
    value, key = (from_env, STATE_ENV) if from_env else (configured, "state_dir")
    if not value.strip():
        raise ConfigError(key, "must name a directory (default var/{instance})")
    try:
        text = value.format(instance=instance)
    except (KeyError, IndexError, ValueError) as exc:
        raise ConfigError(key, f"{value!r}: only {{instance}} may be used in braces ({exc})") from None
    path = Path(text).expanduser()
    return Path(os.path.normpath(path if path.is_absolute() else work_dir / path))


def legacy_base(config_file: Path) -> Path:
    """The folder earlier versions resolved every relative path against (and the mapping file still is):
    the config file's folder, or its parent when that folder is named ``conf``."""
    base = config_file.resolve().parent
    return base.parent if base.name == "conf" else base


def moved_key_problem(section: str, key: str, value: object, state_dir: Path, base: Path | None) -> str:
    """Why ``section.key`` is refused, and what to write instead (the file's place now)."""
    name = MOVED_KEYS[(section, key)]
    text = f"no longer a setting: everything the relay writes lives in its state directory ({state_dir}), "
    text += f"this file as {state_dir / name}. Remove the key"
    if isinstance(value, str) and value.strip() and base is not None:
        old = Path(value)
        old_dir = old.parent if old.is_absolute() else (base / old).parent
        rename = "" if old.name == name else f" and rename {old.name} to {name}"
        text += f"; to keep using the files where they are, set state_dir: {old_dir}{rename}"
    return text


def legacy_state_problem(
    state_dir: Path, config_file: Path | None, instance: str, durable: tuple[str, ...]
) -> str | None:
    """Why the relay must not start: ``durable`` state files (``POSITION_FILE``, ``SCHEMA_HISTORY_FILE``)
    exist where an earlier version kept them (``legacy_base``/var/{instance}) and not in ``state_dir``;
    None when there is nothing to move (or no config file to have been relative to)."""
    if config_file is None or not durable:
        return None
    old_dir = legacy_base(config_file) / "var" / instance
    if _same(old_dir, state_dir):
        return None
    stranded = [name for name in durable if (old_dir / name).exists() and not (state_dir / name).exists()]
    if not stranded:
        return None
    found = ", ".join(str(old_dir / n) for n in stranded)
    return (
        f"found {found}, where earlier versions kept this instance's state (relative to the config "
        f"file's folder), but not in the state directory {state_dir} (state_dir, or {STATE_ENV}; relative "
        "to the working directory): started as it is, the relay would begin from scratch. Move the "
        f"state: mkdir -p {state_dir} && mv {old_dir}/* {state_dir}/ — or point state_dir (or "
        f"{STATE_ENV}) at {old_dir}. Nothing was started"
    )


def _same(one: Path, two: Path) -> bool:
    try:
        return one.resolve() == two.resolve()
    except OSError:
        return one == two
