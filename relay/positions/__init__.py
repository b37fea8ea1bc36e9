"""Resume points (binlog place + entries of its transaction already published) and the stores that keep
them: an atomic JSON file, a ZooKeeper node with compare-and-set and an epoch fence; the instance lock.

Sits below ``relay.source``: the source starts from a resume point, the instance saves one on every ack.
"""
