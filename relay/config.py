"""The relay's configuration: ``conf/relay.yaml`` as typed, validated values.

``load_config(path)`` reads YAML, replaces ``${ENV}`` references (for secrets), and builds a
``RelayConfig`` with ``relay.settings.build``: an unknown key, a wrong type or a bad value raises
``ConfigError`` naming the key path (``source.port``, ``kafka.settings.acks``) before anything starts.
Every key and its default is documented in ``conf/relay.yaml``; a test keeps the two in step.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from relay.binlog_source import SourceConfig
from relay.errors import ConfigError, StoreError
from relay.publisher import validate_kafka_settings
from relay.retry import RetryPolicy
from relay.ring_store import BatchMode, StoreConfig
from relay.settings import build, interpolate
from relay.sink import SinkConfig


@dataclass(frozen=True)
class FilterSettings:
    """canal's filters over ``schema.table`` (comma-separated regexes); ``exclude`` applies after."""

    include: str = ".*\\..*"
    exclude: str = ""
    empty_transaction_interval_ms: int = 5_000
    empty_transaction_threshold: int = 8_192


@dataclass(frozen=True)
class StoreSettings:
    buffer_size: int = 16_384
    memunit: int = 1_024
    batch_mode: str = "MEMSIZE"
    ddl_isolation: bool = True


@dataclass(frozen=True)
class PositionSettings:
    backend: str = "file"
    path: str = "var/{instance}/position.json"


@dataclass(frozen=True)
class MappingSettings:
    file: str = "conf/mapping.yaml"


@dataclass(frozen=True)
class KafkaSettings:
    bootstrap_servers: str = "127.0.0.1:9092"
    client_id: str = "canal-relay-{instance}"
    settings: dict[str, str] = field(default_factory=dict)
    delivery_timeout_seconds: float = 120.0
    ddl_topic: str | None = "relay.ddl"
    dead_letter_topic: str | None = None
    dead_letter_value_bytes: int = 1_024


@dataclass(frozen=True)
class PublishSettings:
    batch_size: int = 256
    batch_wait_seconds: float = 0.05
    max_inflight_batches: int = 4
    retry: RetryPolicy = field(default_factory=lambda: RetryPolicy(initial=0.5, maximum=30.0))
    drain_seconds: float = 30.0


@dataclass(frozen=True)
class StatusSettings:
    file: str = "var/{instance}/status.json"
    interval_seconds: float = 1.0


@dataclass(frozen=True)
class LoggingSettings:
    level: str = "INFO"
    format: str = "plain"


@dataclass(frozen=True)
class RelayConfig:
    instance: str = "default"
    source: SourceConfig = field(default_factory=SourceConfig)
    filter: FilterSettings = field(default_factory=FilterSettings)
    store: StoreSettings = field(default_factory=StoreSettings)
    positions: PositionSettings = field(default_factory=PositionSettings)
    mapping: MappingSettings = field(default_factory=MappingSettings)
    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    publish: PublishSettings = field(default_factory=PublishSettings)
    status: StatusSettings = field(default_factory=StatusSettings)
    logging: LoggingSettings = field(default_factory=LoggingSettings)
    base_dir: str = "."  # relative paths are relative to the config file's directory's parent

    # -- derived values, each validated once ------------------------------------------------------
    def path(self, template: str) -> Path:
        p = Path(template.format(instance=self.instance))
        return p if p.is_absolute() else Path(self.base_dir) / p

    def store_config(self) -> StoreConfig:
        s = self.store
        try:
            return StoreConfig(s.buffer_size, s.memunit, BatchMode(s.batch_mode.upper()), s.ddl_isolation)
        except ValueError:
            modes = ", ".join(m.value for m in BatchMode)
            raise ConfigError("store.batch_mode", f"must be one of {modes}, got {s.batch_mode!r}") from None
        except StoreError as exc:  # its message starts with the field name: "buffer_size: must be …"
            name, _, problem = str(exc).partition(": ")
            raise ConfigError(f"store.{name}", problem) from exc

    def sink_config(self) -> SinkConfig:
        f = self.filter
        try:
            return SinkConfig(
                filter=f.include,
                black_filter=f.exclude,
                empty_transaction_interval_ms=f.empty_transaction_interval_ms,
                empty_transaction_threshold=f.empty_transaction_threshold,
            )
        except ConfigError as exc:  # the sink names its own keys: sink.filter → filter.include
            key = {"sink.filter": "filter.include", "sink.black_filter": "filter.exclude"}.get(
                exc.key, exc.key.replace("sink.", "filter.")
            )
            raise ConfigError(key, exc.problem) from exc

    def validate(self) -> None:
        """Everything that can be checked without a network, so a bad config changes nothing."""
        if not self.instance or not all(c.isalnum() or c in "._-" for c in self.instance):
            raise ConfigError("instance", f"must be letters, digits, '.', '_' or '-', got {self.instance!r}")
        if self.positions.backend != "file":
            raise ConfigError("positions.backend", f"unknown backend {self.positions.backend!r}; known: file")
        if not 0 < self.source.port < 65536:
            raise ConfigError("source.port", f"must be a TCP port, got {self.source.port}")
        if self.source.server_id <= 0:
            raise ConfigError("source.server_id", "must be a positive replica server id")
        if self.publish.batch_size <= 0:
            raise ConfigError("publish.batch_size", "must be positive")
        if self.publish.max_inflight_batches <= 0:
            raise ConfigError("publish.max_inflight_batches", "must be positive")
        if self.logging.format not in ("plain", "json"):
            raise ConfigError("logging.format", f"must be plain or json, got {self.logging.format!r}")
        if self.logging.level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
            levels = "DEBUG, INFO, WARNING or ERROR"
            raise ConfigError("logging.level", f"must be {levels}, got {self.logging.level!r}")
        self.store_config()
        self.sink_config()
        try:
            validate_kafka_settings(self.kafka.settings)
        except (
            ConfigError
        ) as exc:  # the publisher names "kafka.<setting>"; in this file it is kafka.settings.*
            raise ConfigError("kafka.settings." + exc.key.removeprefix("kafka."), exc.problem) from exc


def parse_config(data: Any, base_dir: str = ".") -> RelayConfig:
    config = build(RelayConfig, interpolate(data))
    config = replace(config, base_dir=base_dir)
    config.validate()
    return config


def load_config(path: str | os.PathLike[str]) -> RelayConfig:
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(str(p), f"cannot read the config file: {exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(str(p), f"not valid YAML: {exc}") from exc
    # Relative paths in the file are relative to the directory holding conf/ (the project or install root).
    base = p.resolve().parent
    if base.name == "conf":
        base = base.parent
    return parse_config(data, str(base))
