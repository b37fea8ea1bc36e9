"""Development and demonstration only: local MariaDB/broker/ZooKeeper services, the demo, the benchmark.
Never imported by the layers above the CLI: production code does not depend on it.
"""
