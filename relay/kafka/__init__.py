"""Kafka records from canal entries: the codecs (canal-json, canal-protobuf), record keys and headers under
the mapping, partitioning, topics, and the idempotent (acks=all) publisher with delivered-prefix tracking and
dead letters. Runs on the publisher thread (librdkafka's threads deliver).
"""

from relay import _native

_native.install()  # before this package's compiled modules load (relay._native): extensions, or sources
