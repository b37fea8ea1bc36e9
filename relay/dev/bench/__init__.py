"""``relay bench``: the relay measured against the stock python-mysql-replication reader on one binlog.

``runner`` (services, backlogs, repetitions, latency, the whole run), ``stall`` (the SIGSTOPped broker),
``common`` (options, context, child processes), ``worker`` (one measurement per child process: its
modes in ``relay_modes`` and ``baselines``, the relay it measures in ``harness``, what it measures of
itself in ``probes``),
``workloads`` (W1-W4 as SQL), ``stats`` (percentiles, medians, the table). The command line is
``relay.cli.bench``.
"""
