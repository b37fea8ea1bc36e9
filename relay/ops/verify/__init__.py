"""``relay verify``: proof, in production and under live writes, that a topic's latest state or a Spark mirror
equals the source, exactly.

- ``digest``: the canonical canal text of a row, hashed alike by MySQL (per chunk, in SQL) and by Python;
- ``shards``: the physical tables of a logical table, their keys and how each is compared;
- ``source``: reads between two binlog positions (the snapshot's watermark method), digests, rows;
- ``target`` / ``topic`` (``topic_target``) / ``mirror``: what the target holds per key,
  and when each key last changed;
- ``engine`` / ``catchup`` / ``judge``: the passes, the target brought up to each source read, the
  comparison of keys and of keyless tables;
- ``report``, ``metrics``: the outcome, as text, JSON and ``relay_verify_*`` metrics;
- ``repair``: the differing keys snapshotted again through the running relay, then checked again;
- ``setup``: a run put together from a relay's configuration.

The mirror side reads tables through ``relay.spark.verify_mirror`` (pyarrow, no Spark), which the CLI
hands in: ``relay.ops`` and ``relay.spark`` do not import each other.
"""
