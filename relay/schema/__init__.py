"""Schema history: the definitions of the captured tables at any binlog position.

Where the server does not write full row metadata (``binlog_row_metadata`` MINIMAL / NO_LOG, MySQL
5.7), a rows event carries no column names and no key. The relay then reads the tables' definitions
at its first start (``server``), applies every binlog DDL to them with a real SQL parser (``ddl``,
sqlglot's MySQL dialect), keeps them versioned by position in a durable history (``history``), and
fills and verifies every TABLE_MAP from it (``tracker``). ``model`` holds the values.
Sits below ``relay.source`` (which attaches a tracker to its stream) and above ``relay.positions``.
"""
