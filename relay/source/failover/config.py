"""The master's and the standby's source configs (``source.standby`` + ``source.failover``).

Threads: called by whoever builds the instance's sources (wiring, the parser thread on a switch).
"""

from __future__ import annotations

from dataclasses import replace

from relay.config.sections import SourceConfig, StandbyConfig, StartConfig

MODES = ("auto", "gtid", "timestamp")


def has_standby(cfg: SourceConfig) -> bool:
    return bool(cfg.standby.host)


def master_config(cfg: SourceConfig) -> SourceConfig:
    """The master's source config: with a standby, reconnecting gives up after ``failover.attempts``."""
    if not has_standby(cfg):
        return cfg
    return replace(cfg, retry=replace(cfg.retry, max_tries=cfg.failover.attempts))


def standby_config(cfg: SourceConfig) -> SourceConfig:
    sb = cfg.standby
    return replace(
        cfg,
        host=sb.host,
        port=sb.port,
        user=sb.user or cfg.user,
        password=sb.password or cfg.password,
        start=StartConfig(),
        standby=StandbyConfig(),
    )
