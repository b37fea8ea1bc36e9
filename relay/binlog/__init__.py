"""The MySQL/MariaDB replication protocol, read by us: connection and dump (``stream``), event framing and
parsing (``parse``, ``events``, ``tablemap``), row images to canal's text values (``rows``: the row loop;
``values``: one decoder per column type; ``types``, ``charsets``, ``jsonb``), and what MySQL 8/9 and MariaDB
add on top: compressed events and transaction payloads (``compressed``), partial JSON updates
(``jsondiff``), tagged GTIDs (``serialization``, ``gtidset``).

Why our own decoder rather than python-mysql-replication's event classes: canal's text form must be
exact for every column type (that library mis-decodes negative fractional TIME and empty SET and drops
compressed events silently), and the per-row path must be fast (it rebuilds every TABLE_MAP and is
the rate ceiling ``relay bench`` measures). python-mysql-replication stays the benchmark baseline.
"""

from relay import _native

_native.install()  # before this package's compiled modules load (relay._native): extensions, or sources
