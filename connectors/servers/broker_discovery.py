"""Choosing the Kafka cluster to run against (the one named, else one found or started) for
``demo``, ``replay``, ``broker``, the integration tests and the benchmarks, and checking it answers.

:func:`find_broker` tries, in this order:

1. an explicit bootstrap address (``--bootstrap``), which may also be a ``fake-kafka://<file>``
   cluster;
2. ``KAFKA_BOOTSTRAP_SERVERS``: a running cluster; nothing is started or stopped;
3. a Docker engine that answers: an ``apache/kafka`` container (KRaft, single node) started with
   testcontainers (image overridable with ``KAFKA_EOS_IMAGE``);
4. ``KAFKA_HOME``: a Kafka 3.9/4.x distribution started on loopback ports by the launcher
   registered under the entry-point group ``pyspark_kafka_eos.kafka_launchers`` (the kit registers
   ``local_broker`` of this package);
5. Maven Central: the official ``org.apache.kafka:kafka_2.13`` jars, resolved with the user's
   ``mvn`` into a cache and started the same way (``KAFKA_EOS_KAFKA_VERSION``: ``4``, the default,
   for the newest 4.x; ``3.9``; an exact version; ``off`` to skip this step).

When none is available it raises :class:`NoBrokerError` saying exactly what to provide.
``kafka-eos demo`` (and only it) then falls back to :func:`embedded_broker`, the kit's embedded
test cluster, loudly labelled with :data:`SIMULATED_NOTICE`.

The embedded cluster and the launchers are found through entry points (the first through the
client registry of ``connectors/kafka/clients/factory.py``), as Spark's Python workers find the
embedded cluster, so this module imports neither and another launcher may be registered instead.

A broker the tool started can be restarted by ``replay`` (the broker-restart scenario) when its
launcher supports a restart that keeps data and ports; a fake cluster is "restarted" by making it
unavailable for a while. A broker the tool did not start is never touched.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import time
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from types import TracebackType
from typing import Callable, Mapping, TypeVar

from tenacity import (
    RetryError,
    Retrying,
    retry_if_exception,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential,
)

from connectors.kafka.clients.factory import clients_for, registered_scheme
from connectors.kafka.clients import SimulatedCluster
from connectors.kafka.kafka_errors import RetriableKafkaError
from connectors.servers.server_errors import BrokerUnreachableError, LauncherUnavailableError, NoBrokerError
from twophase.errors import InvalidValueError, KafkaEosError

log = logging.getLogger(__name__)

DEFAULT_IMAGE = "apache/kafka:4.0.0"
#: The client scheme of the kit's embedded test cluster.
_FAKE = "fake-kafka"
#: Entry points that start a Kafka distribution on this machine: ``kafka-home`` is called with
#: ``(kafka_home, work_dir, extra_config=...)``, ``maven-central`` with ``(version_spec, work_dir,
#: extra_config=...)``; each returns a launcher with ``start()`` (returning the bootstrap address),
#: ``stop()``, ``pid``, ``description`` and, optionally, ``restart(downtime_s=...)``. A launcher
#: is a plugin with errors of its own: any error of the kit's root that one raises means that
#: source of a broker failed, and the next is tried.
LAUNCHER_GROUP = "pyspark_kafka_eos.kafka_launchers"
#: The broker aborts timed-out transactions only every this many ms (Kafka's default is 10 s).
#: Brokers the tool starts check every second, so the transaction-timeout scenario is quick.
TXN_CLEANUP_INTERVAL_KEY = "transaction.abort.timed.out.transaction.cleanup.interval.ms"
OWN_BROKER_TXN_CLEANUP_MS = 1000

#: The label of every run on the kit's embedded test cluster: console, Markdown and JSON reports.
SIMULATED_NOTICE = ("simulated Kafka (the kit's embedded test cluster): this shows the mechanism, "
                    "it is not evidence about a real broker")
#: Chooses the Kafka version started from Maven Central (read by the launcher).
KAFKA_VERSION_ENV = "KAFKA_EOS_KAFKA_VERSION"
REAL_BROKER_HELP = (
    "To run against a real broker, provide one of: KAFKA_BOOTSTRAP_SERVERS=host:port (or --bootstrap "
    "host:port), a running Kafka 3.x/4.x cluster; a running Docker engine, in which testcontainers "
    f"starts {DEFAULT_IMAGE}; KAFKA_HOME=<path>, an unpacked Apache Kafka 3.9/4.x distribution the kit "
    "starts on 127.0.0.1; or mvn and Java, with which the kit fetches the official Kafka jars from "
    "Maven Central and starts them on 127.0.0.1."
)
#: Why the broker-restart scenario is skipped on the embedded cluster.
EMBEDDED_NO_RESTART = ("needs a real broker: the embedded cluster is a file, with no broker process "
                       "to stop and start again")

NO_BROKER_HELP = (
    "No Kafka broker available. Provide one of:\n"
    "  - KAFKA_BOOTSTRAP_SERVERS=host:port   a running Kafka cluster (3.x/4.x, transactions enabled,\n"
    "                                        transaction state log replication factor <= brokers)\n"
    "  - a running Docker engine             testcontainers starts {image} (single-node KRaft)\n"
    "  - KAFKA_HOME=<path>                   an unpacked Apache Kafka 3.9/4.x distribution, with Java\n"
    "                                        on PATH; the kit starts it on 127.0.0.1\n"
    "  - mvn and Java on PATH                the kit fetches Apache Kafka from Maven Central (version:\n"
    "                                        KAFKA_EOS_KAFKA_VERSION, default the newest 4.x) and\n"
    "                                        starts it on 127.0.0.1\n"
    "Tried: {tried}"
)


@dataclass
class Broker:
    """A broker to run against: where it is, who started it, and what the tool may do with it."""

    bootstrap_servers: str
    origin: str
    owned: bool
    #: ``restart(downtime_s)``: take the broker down for ``downtime_s`` and bring it back with its
    #: data and address; None when not possible (``restart_unavailable`` says why).
    restart: Callable[[float], None] | None = None
    restart_unavailable: str | None = None
    #: How often the broker aborts timed-out transactions, when known.
    txn_cleanup_interval_ms: int | None = None
    #: True for the kit's embedded test cluster (``fake-kafka://``): no Kafka broker at all.
    simulated: bool = False
    #: ``bounce(node_id, downtime_s)``: SIGKILL one node of a multi-node cluster, keep it down for
    #: ``downtime_s``, start it again and wait until the cluster is back in sync; None when not
    #: possible (``bounce_unavailable`` says why). ``nodes`` are the node ids it takes.
    bounce: Callable[[int, float], None] | None = None
    nodes: tuple[int, ...] = ()
    bounce_unavailable: str | None = "a rolling restart needs a cluster of 3+ nodes started by this tool (--cluster)"
    _stop: Callable[[], None] | None = field(default=None, repr=False)

    def stop(self) -> None:
        """Stop the broker if the tool started it; idempotent."""
        stop, self._stop = self._stop, None
        if stop is not None:
            log.info("stopping %s", self.origin)
            stop()

    def __enter__(self) -> "Broker":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


# -- transient errors ----------------------------------------------------------------------------

T = TypeVar("T")


def is_transient(exc: BaseException) -> bool:
    """A Kafka error that goes away by itself: Kafka's own classification of the error code, applied
    by the clients' one error table (``connectors/kafka/clients/error_table.py``)."""
    return isinstance(exc, RetriableKafkaError)


def retry_transient(call: Callable[[], T], what: str, *, max_delay_s: float = 60.0) -> T:
    """``call()``, retried with backoff for up to ``max_delay_s`` while it fails with a transient
    Kafka error (a topic created a moment ago has no leader yet, a coordinator is loading, the
    broker is restarting); other errors pass through at once."""
    retrying = Retrying(
        retry=retry_if_exception(is_transient),
        stop=stop_after_delay(max_delay_s),
        wait=wait_exponential(multiplier=0.1, max=5),
        reraise=True,
        before_sleep=lambda state: log.info("%s failed (attempt %d): %r; retrying", what, state.attempt_number,
                                            state.outcome.exception() if state.outcome else None),
    )
    return retrying(call)


# -- reachability --------------------------------------------------------------------------------

def _addresses(bootstrap: str) -> list[tuple[str, int]]:
    found = []
    for entry in bootstrap.split(","):
        entry = re.sub(r"^[A-Za-z_]+://", "", entry.strip())
        if not entry:
            continue
        host, sep, port = entry.rpartition(":")
        if not sep or not port.isdigit():
            raise InvalidValueError(f"bootstrap address {entry!r} is not host:port (in {bootstrap!r})")
        found.append((host.strip("[]"), int(port)))
    if not found:
        raise InvalidValueError(f"no host:port in bootstrap address {bootstrap!r}")
    return found


def check_reachable(bootstrap: str, *, attempts: int = 4, connect_timeout_s: float = 3.0,
                    max_wait_s: float = 4.0) -> None:
    """Raise BrokerUnreachableError unless some bootstrap address accepts a TCP connection,
    retrying with exponential backoff ``attempts`` times. An address of a registered client scheme
    (``fake-kafka://``) is no TCP address and always passes. This catches the common mistakes
    (wrong host or port, broker not started) in seconds instead of the clients' 30 s timeouts."""
    if registered_scheme(bootstrap) is not None:
        return
    addresses = _addresses(bootstrap)
    errors: dict[str, str] = {}

    def try_all() -> None:
        for host, port in addresses:
            try:
                with socket.create_connection((host, port), timeout=connect_timeout_s):
                    return
            except OSError as exc:
                errors[f"{host}:{port}"] = exc.strerror or str(exc)
        raise ConnectionError("; ".join(f"{a}: {e}" for a, e in errors.items()))

    started = time.monotonic()
    retrying = Retrying(
        retry=retry_if_exception_type(ConnectionError),
        stop=stop_after_attempt(attempts),
        wait=wait_exponential(multiplier=0.5, max=max_wait_s),
        before_sleep=lambda state: log.info("Kafka at %s not reachable yet (attempt %d); retrying",
                                            bootstrap, state.attempt_number),
    )
    try:
        retrying(try_all)
    except RetryError:
        raise BrokerUnreachableError(
            f"cannot reach Kafka at {bootstrap}: {'; '.join(f'{a}: {e}' for a, e in errors.items())} "
            f"({attempts} attempts over {time.monotonic() - started:.0f} s). Check the address "
            "(--bootstrap or KAFKA_BOOTSTRAP_SERVERS), that the broker is running, and that its "
            "advertised listeners are reachable from this machine."
        ) from None


# -- discovery -----------------------------------------------------------------------------------

def _simulated_cluster(bootstrap: str) -> SimulatedCluster:
    """The embedded cluster at a ``fake-kafka://<file>`` address, from the client registry."""
    if registered_scheme(bootstrap) != _FAKE:
        raise NoBrokerError(f"no embedded test cluster is installed to serve {bootstrap!r} (the client "
                            f"scheme {_FAKE!r} is not registered). {REAL_BROKER_HELP}")
    cluster = clients_for(bootstrap)
    if not isinstance(cluster, SimulatedCluster):
        raise NoBrokerError(f"the clients registered for {_FAKE!r} cannot simulate a broker outage")
    return cluster


def _fake_broker(bootstrap: str) -> Broker:
    fake = _simulated_cluster(bootstrap)

    def outage(downtime_s: float) -> None:
        fake.set_available(False)
        try:
            time.sleep(downtime_s)
        finally:
            fake.set_available(True)

    return Broker(fake.bootstrap_servers, f"fake cluster {fake.path}", owned=True, restart=outage,
                  txn_cleanup_interval_ms=0, simulated=True)


def embedded_broker(path: str | os.PathLike[str]) -> Broker:
    """The kit's embedded test cluster in the SQLite file ``path``, for ``kafka-eos demo`` when no
    broker is available. Unlike a ``fake-kafka://`` address given by name, where the replay
    simulates a broker outage, it offers no restart: with no broker to restart, that scenario
    would show nothing about one."""
    fake = _simulated_cluster(f"{_FAKE}://{os.path.abspath(os.fspath(path))}")
    log.info("no Kafka broker found: using the embedded cluster %s", fake.path)
    return Broker(fake.bootstrap_servers, f"embedded test cluster {fake.path}", owned=True,
                  restart_unavailable=EMBEDDED_NO_RESTART, txn_cleanup_interval_ms=0, simulated=True)


def _docker_answers() -> bool:
    try:
        import docker

        client = docker.from_env(timeout=3)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception as exc:  # any failure means "no usable Docker engine"
        log.info("Docker engine not usable: %s", exc)
        return False


def _container_broker(image: str) -> Broker:
    """An apache/kafka container in KRaft mode. testcontainers' KafkaContainer targets the
    Confluent images (its start script calls /etc/confluent/docker/*); the apache image is driven
    by KAFKA_* variables and /etc/kafka/docker/run, so those two steps are replaced."""
    from testcontainers.community.kafka import KafkaContainer

    class ApacheKafkaContainer(KafkaContainer):
        def configure(self) -> None:
            self.wait_for = re.compile(r".*Kafka Server started.*")
            env = {
                "CLUSTER_ID": self.cluster_id,
                "KAFKA_NODE_ID": "1",
                "KAFKA_PROCESS_ROLES": "broker,controller",
                "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
                "KAFKA_CONTROLLER_QUORUM_VOTERS": "1@localhost:9094",
                "KAFKA_LISTENERS": f"{self.listeners},CONTROLLER://0.0.0.0:9094",
                "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": f"{self.security_protocol_map},CONTROLLER:PLAINTEXT",
                "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
                "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
                "KAFKA_TRANSACTION_STATE_LOG_NUM_PARTITIONS": "1",
                "KAFKA_TRANSACTION_ABORT_TIMED_OUT_TRANSACTION_CLEANUP_INTERVAL_MS": str(OWN_BROKER_TXN_CLEANUP_MS),
                "KAFKA_HEAP_OPTS": "-Xmx512m -Xms256m",
            }
            for name, value in env.items():
                self.with_env(name, value)

        def tc_start(self) -> None:
            host = self.get_container_host_ip()
            port = self.get_exposed_port(self.port)
            script = (
                "#!/bin/bash\n"
                f"export KAFKA_ADVERTISED_LISTENERS={self.listener_name}://{host}:{port},"
                "BROKER://$(hostname -i | cut -d' ' -f1):9092\n"
                "exec /etc/kafka/docker/run\n"
            )
            self.create_file(script.encode(), KafkaContainer.TC_START_SCRIPT)

    container = ApacheKafkaContainer(image=image)
    container.start(timeout=120)
    return Broker(
        container.get_bootstrap_server(), f"Docker container {image} (testcontainers)", owned=True,
        # The host port is mapped at random and changes when the container restarts, while the
        # advertised listener keeps the old one: a restart would leave clients unable to connect.
        restart_unavailable="the container's randomly mapped host port changes on a restart",
        txn_cleanup_interval_ms=OWN_BROKER_TXN_CLEANUP_MS, _stop=container.stop,
    )


def _launcher(name: str) -> EntryPoint:
    launchers = entry_points(group=LAUNCHER_GROUP, name=name)
    if not launchers:
        raise LauncherUnavailableError(f"no launcher {name!r} is installed (entry point of {LAUNCHER_GROUP}; the "
                                       "kit's connectors.servers.local_broker provides it)")
    return next(iter(launchers))


def _started_broker(launcher: EntryPoint, source: str, work_dir: str | None) -> Broker:
    """Start a broker with ``launcher`` (loaded from an entry point), called with ``source`` (a
    ``KAFKA_HOME`` path or a version spec)."""
    broker = launcher.load()(source, work_dir,
                             extra_config={TXN_CLEANUP_INTERVAL_KEY: str(OWN_BROKER_TXN_CLEANUP_MS)})
    bootstrap = broker.start()
    restart = getattr(broker, "restart", None)
    description = getattr(broker, "description", launcher.value)
    return Broker(
        bootstrap, f"{description}, started by the kit on {bootstrap} (pid {broker.pid})", owned=True,
        restart=(lambda downtime_s: restart(downtime_s=downtime_s)) if restart else None,
        restart_unavailable=None if restart else f"the launcher {launcher.value} cannot restart a broker",
        txn_cleanup_interval_ms=OWN_BROKER_TXN_CLEANUP_MS, _stop=broker.stop,
    )


def cluster_broker(*, environ: Mapping[str, str] | None = None, work_dir: str | None = None,
                   kafka_version: str | None = None) -> Broker:
    """A 3-node cluster from the ``kafka-cluster`` launcher of the entry-point group
    ``pyspark_kafka_eos.kafka_launchers`` (the test kit's): an external one from
    ``KAFKA_EOS_CLUSTER_BOOTSTRAP_SERVERS`` (not bounced), else three nodes started from
    ``KAFKA_HOME`` or Maven Central (``kafka_version``, else ``KAFKA_EOS_KAFKA_VERSION``), which
    ``bounce`` restarts one at a time. NoBrokerError if none."""
    launchers = entry_points(group=LAUNCHER_GROUP, name="kafka-cluster")
    if not launchers:
        raise NoBrokerError(f"no 3-node cluster launcher is installed (entry point 'kafka-cluster' of "
                            f"{LAUNCHER_GROUP})")
    env = dict(os.environ if environ is None else environ)
    if kafka_version:
        env[KAFKA_VERSION_ENV] = kafka_version
    try:
        cluster = next(iter(launchers)).load()(work_dir, environ=env)
    except KafkaEosError as exc:  # the launcher's own error says what to set
        raise NoBrokerError(str(exc)) from exc
    local = cluster.local
    if local is None:
        return Broker(cluster.bootstrap_servers, cluster.origin, owned=False,
                      restart_unavailable=cluster.skip_reason, bounce_unavailable=cluster.skip_reason)

    def bounce(node_id: int, downtime_s: float) -> None:
        local.bounce(node_id, downtime_s)
        local.wait_until_healthy()

    return Broker(cluster.bootstrap_servers, cluster.origin, owned=True,
                  restart_unavailable="a cluster's nodes restart one at a time (scenario rolling_restart)",
                  bounce=bounce, nodes=tuple(local.nodes), bounce_unavailable=None, _stop=cluster.stop)


def find_broker(explicit: str | None = None, *, environ: Mapping[str, str] | None = None,
                work_dir: str | None = None, kafka_version: str | None = None) -> Broker:
    """The first broker available, in the order of the module docstring; NoBrokerError if none."""
    env = os.environ if environ is None else environ
    if explicit:
        if registered_scheme(explicit) == _FAKE:
            return _fake_broker(explicit)
        return Broker(explicit, "--bootstrap", owned=False,
                      restart_unavailable="the broker was not started by this tool")
    from_env = env.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    if from_env:
        if registered_scheme(from_env) == _FAKE:
            return _fake_broker(from_env)
        return Broker(from_env, "KAFKA_BOOTSTRAP_SERVERS", owned=False,
                      restart_unavailable="the broker was not started by this tool")
    image = env.get("KAFKA_EOS_IMAGE", DEFAULT_IMAGE)
    kafka_home = env.get("KAFKA_HOME", "").strip()
    tried = ["KAFKA_BOOTSTRAP_SERVERS is not set"]
    if _docker_answers():
        try:
            return _container_broker(image)
        except Exception as exc:  # image pull, port, or startup failures: fall back to KAFKA_HOME
            log.warning("Kafka container %s did not start: %s", image, exc)
            tried.append(f"Docker answered but {image} did not start: {exc}")
    else:
        tried.append("no Docker engine answered")
    if kafka_home:
        try:
            return _started_broker(_launcher("kafka-home"), kafka_home, work_dir)
        except KafkaEosError as exc:  # the launcher's own error, or none installed
            tried.append(f"KAFKA_HOME={kafka_home} did not start: {str(exc).splitlines()[0]}")
    else:
        tried.append("KAFKA_HOME is not set")
    try:
        # The launcher reads the version (and "off") from KAFKA_VERSION_ENV itself when given none.
        version = kafka_version or env.get(KAFKA_VERSION_ENV, "").strip()
        return _started_broker(_launcher("maven-central"), version, work_dir)
    except KafkaEosError as exc:  # the launcher's own error, or none installed
        log.warning("Kafka from Maven Central did not start: %s", str(exc).splitlines()[0])
        tried.append(f"Kafka from Maven Central did not start: {str(exc).splitlines()[0]}")
    raise NoBrokerError(NO_BROKER_HELP.format(image=image, tried="; ".join(tried)))
