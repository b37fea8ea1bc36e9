"""High availability: ZooKeeper leadership with an epoch per term, fencing before every send and ack, and the
cluster report (who is active, who stands by) for ``relay status``.
"""
