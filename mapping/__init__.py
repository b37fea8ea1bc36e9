"""Roma's logical model: which logical db/table and Kafka topic each physical MySQL table maps to.

The shared contract between the relay daemon (its router calls ``Mapping.resolve`` per row event),
the Spark readers (topic names, logical names) and the people who edit mappings. It imports nothing
of the daemon's runtime (no ``relay.source.instance``, ``relay.binlog*``, confluent_kafka or pyspark): only
``relay.errors`` for ``MappingError``. ``model`` holds the immutable values, ``checks`` the static
validation and topic templates, ``load`` the YAML format (``conf/mapping.yaml`` documents every key).
"""

from mapping.checks import CODECS, UNCLAIMED_CHOICES
from mapping.load import dump_mapping, load_mapping, parse_mapping, save_mapping
from mapping.model import (
    Coverage,
    Defaults,
    LogicalDb,
    LogicalTable,
    Mapping,
    MappingWarning,
    Route,
    TopicSettings,
    UnmappedRule,
)
from mapping.names import PLACEHOLDERS
from relay.errors import InvalidMappingError, MappingError

__all__ = [
    "CODECS",
    "PLACEHOLDERS",
    "UNCLAIMED_CHOICES",
    "Coverage",
    "Defaults",
    "InvalidMappingError",
    "LogicalDb",
    "LogicalTable",
    "Mapping",
    "MappingError",
    "MappingWarning",
    "Route",
    "TopicSettings",
    "UnmappedRule",
    "dump_mapping",
    "load_mapping",
    "parse_mapping",
    "save_mapping",
]
