"""Secrets never leave the process: one redaction function for logs, errors, ``status`` and metrics.

``redact(text)`` replaces, in any text about to be shown or written:

- every secret value registered with ``register_secret`` — the config registers its passwords, SASL
  credentials, tokens and ZooKeeper digest identities when it is loaded (``register_config_secrets``),
  so a secret is hidden even where it appears without a telling key (an error echoing a DSN, a
  librdkafka message quoting its settings);
- ``key=value`` / ``key: value`` / ``"key": "value"`` pairs whose key names a secret (password,
  passwd, secret, token, sasl.jaas.config, ...), and the password of ``scheme://user:password@host``.

``RedactingFormatter`` wraps a logging formatter (plain or JSON) and redacts what it produces; it runs
on whatever thread logs. The registry is process-wide on purpose: a secret is a secret everywhere, and
loggers of every module must hide it without being handed the config.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import threading
from collections.abc import Mapping
from typing import Any

MASK = "***"
MIN_SECRET_LENGTH = 3  # shorter values ("", "x") would mask ordinary text everywhere

# Key names whose values are secrets (matched case-insensitively as a suffix of a dotted/underscored key).
_SECRET_KEY = r"(?:password|passwd|pwd|secret|token|api[_.-]?key|credentials?|sasl\.jaas\.config|auth)"
_PAIR = re.compile(
    r"""(?P<key>["']?[\w.-]*""" + _SECRET_KEY + r"""["']?\s*[:=]\s*)"""
    r"""(?P<value>"(?:[^"\\]|\\.)*"|'[^']*'|[^\s,;&}\])"']+)""",
    re.IGNORECASE,
)
_URL_PASSWORD = re.compile(r"(?P<head>[a-z][a-z0-9+.-]*://[^:/@\s]+:)(?P<value>[^@\s]+)(?=@)", re.IGNORECASE)
# The words documentation and error messages write where a password goes (``mysql://user:password@host``):
# masking them garbles the message and hides nothing (a real secret is registered and masked first).
_PLACEHOLDERS = frozenset({"password", "pass", "pw", "passwd", "secret", MASK})
# The first words of the config's own messages about a secret key ("source.password: environment variable X
# is not set", "…: must be a ${NAME} reference", "…: expected a string"): the message, not a value, follows
# the key there, and masking it garbles the one error that says what to fix. A real secret equal to one of
# these words is registered when its config is loaded, and masked before this pattern runs.
_MESSAGE_WORDS = frozenset(
    {"a", "an", "the", "must", "expected", "environment", "unknown", "not", "cannot", "missing", "required"}
)
_BEARER = re.compile(r"(?P<head>\b(?:Bearer|Basic)\s+)(?P<value>[\w.~+/=-]+)", re.IGNORECASE)

# An ``auth`` key (``zookeeper.auth: user:password``) shares its suffix with logger names
# (``….auth: message``): after a colon, only a value shaped like a credential (``user:password``, quoted,
# or more than letters) is one; after ``=``, any value.
_AUTH_KEY = re.compile(r"auth[\"']?\s*:\s*$", re.IGNORECASE)


def _credential(value: str) -> bool:
    return value[0] in "\"'" or ":" in value or not value.isalpha()


_lock = threading.Lock()
_secrets: set[str] = set()


def register_secret(value: str | None) -> None:
    """Hide ``value`` (and its JSON-escaped form) wherever it appears from now on."""
    if not value or len(value) < MIN_SECRET_LENGTH:
        return
    escaped = json.dumps(value)[1:-1]
    with _lock:
        _secrets.update({value, escaped})


def registered_secrets() -> frozenset[str]:
    with _lock:
        return frozenset(_secrets)


def clear_secrets() -> None:
    """For tests: forget every registered secret."""
    with _lock:
        _secrets.clear()


def redact(text: str) -> str:
    """``text`` with every known secret value and every secret-looking key's value replaced by ``***``."""
    if not text:
        return text
    # Longest first, so that a secret containing another is replaced whole.
    for secret in sorted(registered_secrets(), key=len, reverse=True):
        text = text.replace(secret, MASK)
    text = _PAIR.sub(_mask_pair, text)
    text = _URL_PASSWORD.sub(_mask_url, text)
    return _BEARER.sub(lambda m: m.group("head") + MASK, text)


def _mask_url(m: re.Match[str]) -> str:
    if m.group("value").lower() in _PLACEHOLDERS:
        return m.group(0)
    return m.group("head") + MASK


def _mask_pair(m: re.Match[str]) -> str:
    value = m.group("value")
    if value in ("null", "None", "''", '""', MASK, f'"{MASK}"', f"'{MASK}'"):
        return m.group(0)  # nothing secret to hide: keep "password: null" readable
    if value in _MESSAGE_WORDS and m.end() < len(m.string) and m.string[m.end()] == " ":
        return m.group(0)  # "source.password: environment variable … is not set": a message, not a value
    if _AUTH_KEY.search(m.group("key")) and ":" in m.group("key") and not _credential(value):
        return m.group(0)  # "kazoo.auth: sent digest": a logger ending in "auth", then its message
    quote = value[0] if value[0] in "\"'" else ""
    return f"{m.group('key')}{quote}{MASK}{quote}"


def redact_value(value: Any) -> Any:
    """A JSON-like tree (status reports, metric labels) with every string redacted and every value of a
    secret-named key masked."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, Mapping):
        return {k: (MASK if _is_secret_key(str(k)) and v else redact_value(v)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_value(v) for v in value]
    return value


def redact_settings(settings: Mapping[str, Any]) -> dict[str, str]:
    """Client settings (librdkafka's dotted keys) as text, every secret one masked: secret-named keys,
    every ``sasl.*`` value and private-key material (``ssl.key.*``, ``*.key.pem``)."""
    out: dict[str, str] = {}
    for key, value in settings.items():
        lowered = key.lower()
        secret = _is_secret_key(lowered) or lowered.startswith(("sasl.", "ssl.key.")) or "key.pem" in lowered
        out[key] = MASK if secret else redact(str(value))
    return out


def _is_secret_key(key: str) -> bool:
    return re.search(_SECRET_KEY + r"$", key, re.IGNORECASE) is not None


def is_secret_setting(key: str) -> bool:
    """Whether a config key (``password``, ``auth``) or client setting (``sasl.password``,
    ``ssl.key.pem``) holds a secret: what is masked in reports, and what an instance definition stored
    in ZooKeeper must give as a ``${NAME}`` reference (``relay.cluster.definition``)."""
    lowered = key.lower()
    return _is_secret_key(lowered) or "key.pem" in lowered  # ssl.key.location is a path, not a secret


def secrets_in(config: Any) -> list[str]:
    """Every string value under a secret-named key of a config tree (dataclasses and dicts)."""
    found: list[str] = []

    def walk(node: Any, key: str) -> None:
        if dataclasses.is_dataclass(node) and not isinstance(node, type):
            for f in dataclasses.fields(node):
                walk(getattr(node, f.name), f.name)
        elif isinstance(node, Mapping):
            for k, v in node.items():
                walk(v, str(k))
        elif isinstance(node, str) and _is_secret_key(key):
            found.append(node)
            if key.endswith("auth") and ":" in node:  # user:password digest identities
                found.append(node.split(":", 1)[1])

    walk(config, "")
    return found


def register_config_secrets(config: Any) -> None:
    """Register every secret of a loaded config (``relay.config.load.load_config`` calls this)."""
    for value in secrets_in(config):
        register_secret(value)


class RedactingFormatter(logging.Formatter):
    """Formats with ``inner`` (plain or JSON lines), then redacts the whole line, tracebacks included."""

    def __init__(self, inner: logging.Formatter) -> None:
        super().__init__()
        self.inner = inner

    def format(self, record: logging.LogRecord) -> str:
        return redact(self.inner.format(record))
