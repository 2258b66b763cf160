"""A throwaway single-node Kafka (KRaft, broker and controller in one JVM) for ``kafka-eos demo``,
``replay``, ``broker`` and the tests.

``LocalKafkaBroker(distribution).start()`` formats fresh storage in a work directory, starts the
broker on two free loopback ports and returns the bootstrap address once an admin client sees the
broker. ``stop()`` ends exactly the process it started (SIGTERM, then SIGKILL after a grace
period). The distribution (``connectors.servers.kafka_distribution``) is an unpacked Kafka 3.9/4.x
(``KAFKA_HOME``, also accepted as a plain path) or the official jars from Maven Central; either
needs Java.

Only loopback addresses are used: this broker has no authentication. ``secured_broker`` starts the
same node with SASL_SSL, SCRAM users and an ACL authorizer (test kit: ``kafka_testkit.secured_broker``).
"""

from __future__ import annotations

import atexit
import base64
import logging
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from types import TracebackType
from typing import Mapping

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from connectors.servers.server_errors import LocalBrokerError
from connectors.servers.child_process import log_tail, stop_gracefully
from connectors.servers.kafka_distribution import KafkaDistribution, KafkaDistributionError, MavenKafka, as_distribution

log = logging.getLogger(__name__)

_HOST = "127.0.0.1"
_LOG_TAIL_LINES = 60


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((_HOST, 0))
        return int(sock.getsockname()[1])


def _cluster_id() -> str:
    # Kafka's Uuid text form: URL-safe base64 of 16 random bytes without padding. Kafka itself
    # never hands out ids starting with '-' (they read like command-line options).
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")
        if not text.startswith("-"):
            return text


class LocalKafkaBroker:
    """One local Kafka 4.x node. Use as a context manager, or call ``start()`` and ``stop()``."""

    def __init__(
        self,
        kafka_home: str | os.PathLike[str] | KafkaDistribution,
        work_dir: str | os.PathLike[str] | None = None,
        *,
        extra_config: Mapping[str, str] | None = None,
        heap_opts: str = "-Xmx512m -Xms256m",
        start_timeout_s: float = 90.0,
        stop_grace_s: float = 20.0,
    ) -> None:
        self.distribution = as_distribution(kafka_home)
        self._own_work_dir = work_dir is None
        self._work_dir_arg = Path(work_dir) if work_dir is not None else None
        self.work_dir: Path | None = None
        self.extra_config = dict(extra_config or {})
        self.heap_opts = heap_opts
        self.start_timeout_s = start_timeout_s
        self.stop_grace_s = stop_grace_s
        self.bootstrap_servers: str | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._log_file: Path | None = None

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> str:
        """Format storage, start the broker and wait until it serves clients. Returns the
        bootstrap address."""
        if self._process is not None:
            raise LocalBrokerError("this LocalKafkaBroker is already started")
        self._check_distribution()
        try:
            self.bootstrap_servers = self._launch()
            self._wait_until_ready(self.bootstrap_servers)
        except BaseException:
            # Leave nothing behind: no process, no temporary storage (the error carries the log).
            self.stop()
            raise
        assert self._process is not None and self.bootstrap_servers is not None
        log.info("local Kafka: %s ready at %s (pid %d)", self.distribution.description,
                 self.bootstrap_servers, self._process.pid)
        return self.bootstrap_servers

    def stop(self) -> None:
        """Stop the broker this object started (and only that process); idempotent."""
        process, self._process = self._process, None
        atexit.unregister(self.stop)
        if process is not None:
            self._terminate(process)
        self.bootstrap_servers = None
        if self._own_work_dir and self.work_dir is not None:
            shutil.rmtree(self.work_dir, ignore_errors=True)
            self.work_dir = None

    def restart(self, downtime_s: float = 0.0) -> str:
        """Stop the broker (SIGTERM, a clean shutdown), stay down for ``downtime_s`` seconds, and
        start it again on the same ports with the same data, as an operator's rolling restart
        would. Returns the (unchanged) bootstrap address once clients are served again."""
        process, bootstrap = self._process, self.bootstrap_servers
        if process is None or bootstrap is None or self.work_dir is None:
            raise LocalBrokerError("restart() needs a broker started by start()")
        self._terminate(process)
        time.sleep(max(0.0, downtime_s))
        # No format this time: the storage keeps its cluster id, topics and transaction state.
        self._spawn(self.work_dir / "server.properties", self._environment(self.work_dir), self.work_dir)
        try:
            self._wait_until_ready(bootstrap)
        except BaseException:
            self.stop()
            raise
        assert self._process is not None
        log.info("local Kafka: restarted at %s (pid %d)", bootstrap, self._process.pid)
        return bootstrap

    def _terminate(self, process: subprocess.Popen[bytes]) -> None:
        if process.poll() is None:
            log.info("local Kafka: stopping pid %d", process.pid)
        stop_gracefully(process, self.stop_grace_s, "local Kafka")

    @property
    def description(self) -> str:
        """What runs, e.g. "Apache Kafka 4.1.0 from Maven Central" (the version once started)."""
        return self.distribution.description

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def __enter__(self) -> "LocalKafkaBroker":
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- steps ----------------------------------------------------------------------------------

    def _launch(self) -> str:
        work_dir = self._prepare_work_dir()
        broker_port, controller_port = self._choose_ports()
        self._log_file = work_dir / "broker.log"
        self._prepare_security(work_dir)
        props = self._write_properties(work_dir, broker_port, controller_port)
        env = self._environment(work_dir)
        self._format_storage(props, env)
        log.info("local Kafka: starting in %s on %s:%d", work_dir, _HOST, broker_port)
        self._spawn(props, env, work_dir)
        return f"{_HOST}:{broker_port}"

    def _choose_ports(self) -> tuple[int, int]:
        """The broker's and the controller's listener ports."""
        broker_port, controller_port = free_port(), free_port()
        while controller_port == broker_port:
            controller_port = free_port()
        return broker_port, controller_port

    def _spawn(self, props: Path, env: Mapping[str, str], work_dir: Path) -> None:
        assert self._log_file is not None
        with open(self._log_file, "ab") as out:
            # Either distribution's command is the broker JVM itself (kafka-server-start.sh exec's
            # into java). A new session keeps a terminal's Ctrl-C from killing the broker behind
            # stop()'s back.
            self._process = subprocess.Popen(
                self.distribution.server_command(props, self.heap_opts),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=dict(env),
                cwd=work_dir,
                start_new_session=True,
            )
        # A test run that dies without stop() must not leave a JVM behind.
        atexit.register(self.stop)

    def _check_distribution(self) -> None:
        try:
            self.distribution.check()
        except KafkaDistributionError as exc:
            raise LocalBrokerError(str(exc)) from exc

    def _prepare_work_dir(self) -> Path:
        if self._work_dir_arg is None:
            work_dir = Path(tempfile.mkdtemp(prefix="kafka-eos-broker-"))
        else:
            work_dir = self._work_dir_arg
            work_dir.mkdir(parents=True, exist_ok=True)
            # Stale KRaft storage from an earlier run has another cluster id: start clean.
            shutil.rmtree(work_dir / "data", ignore_errors=True)
        self.work_dir = work_dir
        return work_dir

    # -- what a secured subclass changes (kafka_testkit.secured_broker) -------------------------

    def _prepare_security(self, work_dir: Path) -> None:
        """Make what the listeners need before the configuration is written (certificates)."""

    def _listener_config(self, broker_port: int, controller_port: int) -> dict[str, str]:
        return {
            "listeners": f"PLAINTEXT://{_HOST}:{broker_port},CONTROLLER://{_HOST}:{controller_port}",
            "advertised.listeners": (
                f"PLAINTEXT://{_HOST}:{broker_port},CONTROLLER://{_HOST}:{controller_port}"
            ),
            "inter.broker.listener.name": "PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        }

    def _format_arguments(self) -> list[str]:
        """Extra arguments of ``kafka-storage.sh format`` (SCRAM users, for a secured broker)."""
        return []

    def _quorum_config(self, controller_port: int) -> dict[str, str]:
        """How the node finds the controller quorum: a Kafka 4.x dynamic quorum of this node alone,
        formatted with ``_quorum_format_arguments``."""
        return {"controller.quorum.bootstrap.servers": f"{_HOST}:{controller_port}"}

    def _quorum_format_arguments(self) -> list[str]:
        return ["--standalone"]

    def client_config(self) -> dict[str, str]:
        """librdkafka settings a client needs besides ``bootstrap.servers`` (none: plaintext)."""
        return {}

    def _write_properties(self, work_dir: Path, broker_port: int, controller_port: int) -> Path:
        config = {
            "process.roles": "broker,controller",
            "node.id": "1",
            **self._quorum_config(controller_port),
            **self._listener_config(broker_port, controller_port),
            "log.dirs": str(work_dir / "data" / "logs"),
            "metadata.log.dir": str(work_dir / "data" / "metadata"),
            "num.partitions": "1",
            "num.network.threads": "2",
            "num.io.threads": "4",
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            # Few internal partitions: the group and transaction coordinators load in a moment
            # instead of the seconds 50 partitions take on a fresh node.
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.num.partitions": "1",
            "group.initial.rebalance.delay.ms": "0",
        }
        config.update(self.extra_config)
        props = work_dir / "server.properties"
        props.write_text("".join(f"{key}={value}\n" for key, value in config.items()))
        return props

    def _environment(self, work_dir: Path) -> dict[str, str]:
        return self.distribution.environment(os.environ, work_dir, self.heap_opts)

    def _format_storage(self, props: Path, env: Mapping[str, str]) -> None:
        assert self._log_file is not None
        command = self.distribution.storage_command([
            "format",
            *self._quorum_format_arguments(),
            "--cluster-id",
            self._cluster_id(),
            "--config",
            str(props),
            *self._format_arguments(),
        ])
        with open(self._log_file, "ab") as out:
            # Passwords of SCRAM users given to the format command stay out of the log.
            shown = re.sub(r"password=[^,\]]*", "password=***", " ".join(command))
            shown = re.sub(r" -cp \S+", " -cp <jars>", shown)
            out.write(f"$ {shown}\n".encode())
            out.flush()
            try:
                result = subprocess.run(
                    command,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=dict(env),
                    timeout=self.start_timeout_s,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                raise LocalBrokerError(
                    f"kafka-storage.sh format did not finish in {self.start_timeout_s:.0f} s\n"
                    + self.log_tail()
                ) from None
        if result.returncode != 0:
            raise LocalBrokerError(
                f"kafka-storage.sh format failed with exit code {result.returncode}\n"
                + self.log_tail()
            )

    def _cluster_id(self) -> str:
        return _cluster_id()

    def _wait_until_ready(self, bootstrap: str) -> None:
        # Ready means an admin client gets metadata listing the broker, not merely an open port:
        # the socket server accepts connections before the broker has caught up with the metadata
        # log.
        assert self._process is not None
        # log_level 0: "connection refused" until the port opens is expected, not worth logging.
        admin = AdminClient(
            {
                **self.client_config(),
                "bootstrap.servers": bootstrap,
                "socket.connection.setup.timeout.ms": 2000,
                "log_level": 0,
            }
        )
        deadline = time.monotonic() + self.start_timeout_s
        last_error = "no answer yet"
        while time.monotonic() < deadline:
            code = self._process.poll()
            if code is not None:
                raise LocalBrokerError(
                    f"Kafka exited with code {code} while starting\n" + self.log_tail()
                )
            try:
                metadata = admin.list_topics(timeout=2)
                if metadata.brokers:
                    return
                last_error = "metadata lists no broker"
            except KafkaException as exc:
                last_error = str(exc)
            time.sleep(0.2)
        raise LocalBrokerError(
            f"Kafka at {bootstrap} not ready after {self.start_timeout_s:.0f} s "
            f"(last: {last_error})\n" + self.log_tail()
        )

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        """The last lines of the broker's stdout/stderr log, for error messages."""
        return log_tail(self._log_file, lines, missing="(no broker log)")


def maven_central_broker(version_spec: str | None, work_dir: str | os.PathLike[str] | None = None, *,
                         extra_config: Mapping[str, str] | None = None) -> LocalKafkaBroker:
    """A node of the official Kafka jars from Maven Central (``version_spec``, else
    ``KAFKA_EOS_KAFKA_VERSION``, else the newest 4.x): the ``maven-central`` launcher of
    ``kafka-eos demo`` and ``replay``."""
    try:
        distribution = MavenKafka(version_spec or None)
    except KafkaDistributionError as exc:
        raise LocalBrokerError(str(exc)) from exc
    return LocalKafkaBroker(distribution, work_dir, extra_config=extra_config)
