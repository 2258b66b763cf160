"""Fixtures for tests against a real Kafka broker.

``kafka_bootstrap`` finds a broker, in this order:

1. ``KAFKA_BOOTSTRAP_SERVERS``: an already running cluster (nothing is started or stopped);
2. a Docker engine that answers: an ``apache/kafka`` container (KRaft) through testcontainers
   (image overridable with ``KAFKA_TEST_IMAGE``);
3. ``KAFKA_HOME``: a Kafka 4.x distribution, started by ``LocalKafkaBroker`` on loopback ports.

Without any of them every integration test is skipped, with a reason naming all three.
"""

from __future__ import annotations

import logging
import os
import re
import uuid
from pathlib import Path
from typing import Callable, Iterator

import pytest

from connectors.kafka.clients import KafkaClients, clients_for

log = logging.getLogger(__name__)

_HERE = Path(__file__).resolve().parent
_DEFAULT_IMAGE = "apache/kafka:4.0.0"
_SKIP_REASON = (
    "no Kafka broker for integration tests: set KAFKA_BOOTSTRAP_SERVERS to a running cluster, "
    "or run a Docker engine (testcontainers starts {image}), or set KAFKA_HOME to a Kafka 4.x "
    "distribution (LocalKafkaBroker starts it on 127.0.0.1){details}"
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # This hook sees the whole session's items, not only this directory's.
    for item in items:
        if _HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.integration)


def _docker_answers() -> bool:
    try:
        import docker

        client = docker.from_env(timeout=3)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception as exc:  # any failure means "no usable Docker"
        log.info("Docker engine not usable: %s", exc)
        return False


def _start_container(image: str) -> tuple[str, Callable[[], None]]:
    """An apache/kafka container in KRaft mode. testcontainers' KafkaContainer targets the
    Confluent images (its start script calls /etc/confluent/docker/*); the apache image is driven
    by KAFKA_* variables and /etc/kafka/docker/run instead, so those two steps are replaced."""
    from testcontainers.community.kafka import KafkaContainer

    class ApacheKafkaContainer(KafkaContainer):
        def configure(self) -> None:
            self.wait_for = re.compile(r".*Kafka Server started.*")
            self.with_env("CLUSTER_ID", self.cluster_id)
            self.with_env("KAFKA_NODE_ID", "1")
            self.with_env("KAFKA_PROCESS_ROLES", "broker,controller")
            self.with_env("KAFKA_CONTROLLER_LISTENER_NAMES", "CONTROLLER")
            self.with_env("KAFKA_CONTROLLER_QUORUM_VOTERS", "1@localhost:9094")
            self.with_env("KAFKA_LISTENERS", f"{self.listeners},CONTROLLER://0.0.0.0:9094")
            self.with_env(
                "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP",
                f"{self.security_protocol_map},CONTROLLER:PLAINTEXT",
            )
            self.with_env("KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR", "1")
            self.with_env("KAFKA_TRANSACTION_STATE_LOG_MIN_ISR", "1")
            self.with_env("KAFKA_TRANSACTION_STATE_LOG_NUM_PARTITIONS", "1")
            self.with_env("KAFKA_HEAP_OPTS", "-Xmx512m -Xms256m")

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
    return container.get_bootstrap_server(), container.stop


def _start_local_broker(kafka_home: str) -> tuple[str, Callable[[], None]]:
    from connectors.kafka.local_broker import LocalKafkaBroker

    broker = LocalKafkaBroker(kafka_home)
    return broker.start(), broker.stop


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    explicit = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    if explicit:
        yield explicit
        return
    image = os.environ.get("KAFKA_TEST_IMAGE", _DEFAULT_IMAGE)
    kafka_home = os.environ.get("KAFKA_HOME", "").strip()
    notes: list[str] = ["KAFKA_BOOTSTRAP_SERVERS not set"]
    if _docker_answers():
        try:
            bootstrap, stop = _start_container(image)
        except Exception as exc:
            if not kafka_home:
                raise
            # Docker answered but the container did not come up; KAFKA_HOME still can.
            log.warning("Kafka container %s failed to start (%s); trying KAFKA_HOME", image, exc)
            notes.append(f"container {image} failed: {exc}")
        else:
            try:
                yield bootstrap
            finally:
                stop()
            return
    else:
        notes.append("Docker engine did not answer")
    if kafka_home:
        bootstrap, stop = _start_local_broker(kafka_home)
        try:
            yield bootstrap
        finally:
            stop()
        return
    notes.append("KAFKA_HOME not set")
    pytest.skip(_SKIP_REASON.format(image=image, details=f" ({'; '.join(notes)})"))


@pytest.fixture(scope="session")
def kafka_clients(kafka_bootstrap: str) -> KafkaClients:
    return clients_for(kafka_bootstrap)


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """Names (topics, transactional ids) unique to this test and call:
    ``unique_name("out")`` -> ``it-<test>-out-<random>``."""
    test = re.sub(r"[^A-Za-z0-9]+", "-", request.node.name).strip("-")[:40]

    def make(label: str = "t") -> str:
        return f"it-{test}-{label}-{uuid.uuid4().hex[:8]}"

    return make


@pytest.fixture
def unique_topic(unique_name: Callable[[str], str]) -> Callable[[], str]:
    """A fresh topic name on every call (the topic itself is not created)."""
    return lambda: unique_name("topic")
