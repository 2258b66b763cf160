"""Fixtures for tests against a real Kafka broker.

``kafka_bootstrap`` finds a broker the way ``kafka-eos demo`` does (connectors/tools/broker.py):

1. ``KAFKA_BOOTSTRAP_SERVERS``: an already running cluster (nothing is started or stopped);
2. a Docker engine that answers: an ``apache/kafka`` container (KRaft) through testcontainers
   (image overridable with ``KAFKA_EOS_IMAGE``);
3. ``KAFKA_HOME``: a Kafka 4.x distribution, started by ``LocalKafkaBroker`` on loopback ports.

Without any of them every integration test is skipped, with a reason naming all three. The fake
cluster is never accepted here: these tests are the evidence that the fake is faithful.
"""

from __future__ import annotations

import logging
import os
import re
import uuid
from pathlib import Path
from typing import Callable, Iterator

import pytest

from connectors.kafka.client_factory import clients_for
from connectors.kafka.clients import KafkaClients
from connectors.tools.broker import NoBrokerError, find_broker
from kafka_testkit.fake_cluster import FAKE_SCHEME

log = logging.getLogger(__name__)

_HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # This hook sees the whole session's items, not only this directory's.
    for item in items:
        if _HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip().startswith(FAKE_SCHEME):
        pytest.skip("integration tests need a real Kafka broker; KAFKA_BOOTSTRAP_SERVERS names the "
                    "fake cluster, which is what these tests check the fake against")
    try:
        broker = find_broker(work_dir=str(tmp_path_factory.mktemp("kafka-broker")))
    except NoBrokerError as exc:
        pytest.skip(f"no Kafka broker for integration tests. {exc}")
    log.info("integration tests run against %s at %s", broker.origin, broker.bootstrap_servers)
    try:
        yield broker.bootstrap_servers
    finally:
        broker.stop()


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
