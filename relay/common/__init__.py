"""Infrastructure every layer may use, and nothing else: atomic file writes, the retry policy, secret
redaction, MySQL TLS and the one MySQL connection helper, the one ZooKeeper client factory, binlog file names.

Imports only ``relay.errors`` (and third-party libraries). Nothing here knows about canal, Kafka or mappings.
"""
