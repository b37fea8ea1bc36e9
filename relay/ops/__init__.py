"""What operators run beside a relay, in another process: ``relay status`` (the report), and ``relay replay``
(retained records re-published into the topics they now belong to). They open stores through
``relay.wiring``. (Metrics are served by the relay itself: ``relay.daemon.metrics``; the retention runway
is ``relay.source.retention``; moving a position is ``relay.cli.positions``.)
"""
