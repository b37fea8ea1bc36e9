"""canal's core, in memory: the Entry model and its wire form, binlog events → Entries (entry builder, DDL),
the sink's filters, the DDL-isolating ring store and the streaming get/ack/rollback API.

Nothing here does I/O; the parser thread puts into the store, the publisher thread gets and acks. Imports
``relay.binlog`` (event values), ``relay.config``, ``relay.common`` and ``relay.errors``.
"""

from relay import _native

_native.install()  # before this package's compiled modules load (relay._native): extensions, or sources
