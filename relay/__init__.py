"""canal-relay: canal's binlog parser and ring store in Python, relaying every change durably to Kafka.

The data flow reads from the module names: ``binlog`` (replica protocol and event decoding) →
``binlog_source`` (start position, server checks, reconnect) → ``entry_builder`` (canal Entries) →
``sink`` (filters) → ``ring_store`` → ``server`` (canal's get/ack/rollback) → ``positions``.
``instance`` wires one canal instance together.
"""

__version__ = "0.1.0"
