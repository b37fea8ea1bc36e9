"""What operators look at and do around a relay: ``relay status``, Prometheus metrics, the retention runway,
moving a saved position, replaying retained records into the topics they now belong to.
"""
