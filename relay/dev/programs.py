"""Every program (and system file) the development services and the tests run, and the Debian package of each.

The one list: ``scripts/bootstrap`` runs this file with the system ``python3`` (standard library only, no
project imports, so it works before the virtualenv exists) to learn what to check and install, and
``relay.dev.services.find_binary`` names the package from it when a program is missing. Packages are
Debian 12's, the smallest that provides the program (checked with ``dpkg -S`` / ``dpkg -c``):
``mariadb-tzinfo-to-sql`` is in ``mariadb-client``, not in ``mariadb-server-core``.

``python3 relay/dev/programs.py`` prints one ``program-or-path<TAB>package`` line per entry.
"""

from __future__ import annotations

import sys

# program → (Debian package, who runs it)
PROGRAMS: dict[str, tuple[str, str]] = {
    "mariadbd": ("mariadb-server-core", "the embedded MariaDB (relay.dev.services: tests, demo, bench)"),
    "mariadb-install-db": ("mariadb-server-core", "creating the embedded MariaDB's data directory"),
    "my_print_defaults": ("mariadb-client-core", "called by mariadb-install-db"),
    "mysql": ("mariadb-client-core", "tests: deploy/mysql/init/10-relay-user.sh runs the mysql client"),
    "mariadb": ("mariadb-client-core", "the same client under its MariaDB name (the script takes either)"),
    "mariadb-tzinfo-to-sql": ("mariadb-client", "tests: loading time zones into MariaDB"),
    "java": ("default-jre-headless", "the embedded ZooKeeper and Apache Kafka"),
    "keytool": ("default-jre-headless", "Maven's trust in the machine's CA bundle (relay.common.truststore)"),
    "mvn": ("maven", "resolving pinned Java artifacts from Maven Central once (relay.common.jars)"),
    "openssl": ("openssl", "tests: certificates for MySQL TLS"),
    "chromium": ("chromium", "tests: the browser Playwright drives through the console's pages"),
    "bash": ("bash", "Spark's launch scripts (relay spark); tests: the tutorials' runnable blocks"),
}

# Programs some tests use where they exist and skip without (saying so): listed, never installed by
# scripts/bootstrap. A container engine takes machine-wide set-up (see tests/integration/containers.py).
OPTIONAL: dict[str, tuple[str, str]] = {
    "podman": ("podman", "tests: building and running deploy/Dockerfile (docker serves too)"),
    "podman-compose": ("podman-compose", "tests: running deploy/test/compose.yml"),
    "docker": ("docker.io", "tests: the same with docker, where podman is missing"),
}

# absolute path → (Debian package, who reads it)
FILES: dict[str, tuple[str, str]] = {
    "/usr/share/java/zookeeper.jar": ("zookeeper", "the embedded ZooKeeper"),
    "/usr/share/java/slf4j-simple.jar": ("libslf4j-java", "ZooKeeper's log output"),
}


def package_of(name: str) -> str:
    """The Debian package that provides ``name`` (a program of ``PROGRAMS`` or a path of ``FILES``)."""
    entry = PROGRAMS.get(name) or FILES.get(name)
    if entry is None:
        raise KeyError(f"{name} is not listed in relay/dev/programs.py")
    return entry[0]


def main() -> int:
    for name, (package, _why) in {**PROGRAMS, **FILES}.items():
        sys.stdout.write(f"{name}\t{package}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
