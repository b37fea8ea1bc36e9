"""canal-relay: canal's binlog parser and ring store in Python, relaying every change durably to Kafka.

The packages read as the data flow, bottom layer first (each imports only the layers below it; the
rule is checked by ``lint-imports``, see ``docs/architecture.md``):

``errors`` (one exception root) · ``common`` (infrastructure) · ``config`` (conf/relay.yaml as typed
values) · ``binlog`` (replication protocol and event decoding) · ``canal`` (Entries, the sink's filters,
the ring store, the streaming get/ack/rollback API) · ``positions`` (resume points and their stores) ·
``source`` (a server as a gap-free stream; the canal instance) · ``kafka`` (codecs and the publisher) ·
``ha`` (leadership and fencing) · ``daemon`` (the publish loop) · ``wiring`` (builds the parts from the
config) · ``ops`` / ``spark`` (status, replay; the PySpark readers) · ``dev`` (local services, demo,
benchmark) · ``cli`` (the command line). ``mapping`` (a package of its own) is the logical model.

Importing ``relay`` (or ``relay.errors``, ``relay.common``, ``mapping``, ``relay.spark``) has no side
effects: the build of the hot modules (compiled extensions, or their sources) is decided by
``relay._native.install()``, which the packages holding them call from their ``__init__``.
"""

__version__ = "0.1.0"
