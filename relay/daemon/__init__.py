"""The long-running relay: the publish loop (get → encode → send → ack → save), hot reload of the mapping at
batch boundaries, its stats and status file. Gets every collaborator passed in (``relay.wiring`` builds them).
"""
