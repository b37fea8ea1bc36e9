"""A MySQL server as a gap-free stream of canal entries: server checks and refusals, the start position,
reconnects with backoff, failover to a standby, and the canal instance (source → entry builder → sink →
ring store, saving the resume point on every ack).

The instance's parser thread runs here. Imports the layers below (positions, canal, binlog, config, common).
"""

from relay import _native

_native.install()  # before this package's compiled modules load (relay._native): extensions, or sources
