"""The Kafka conformance checks (kafka_testkit/kafka_conformance.py) against the kit's fake cluster.

integration_tests/test_kafka_conformance.py runs the same checks against a real broker: a fact
that passes there and fails here is a bug of the fake, to be fixed in connectors/simulated_kafka/.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from connectors.kafka.clients.factory import clients_for
from connectors.kafka.clients import KafkaClients
from kafka_testkit.kafka_conformance import CHECKS, ConformanceCheck, NameFactory, check_id
from connectors.simulated_kafka import FAKE_SCHEME


@pytest.fixture
def fake_clients(tmp_path: Path) -> KafkaClients:
    """The fake cluster chosen the way the connectors choose it: by its bootstrap address."""
    return clients_for(f"{FAKE_SCHEME}{tmp_path / 'cluster.db'}")


@pytest.fixture
def names(request: pytest.FixtureRequest) -> NameFactory:
    """Distinct names per call; readable in the fake's state file when a check fails."""
    test = re.sub(r"[^A-Za-z0-9]+", "-", request.node.name).strip("-")[:40]
    counter = itertools.count()
    return lambda label="t": f"{test}-{label}-{next(counter)}"


@pytest.mark.parametrize("check", CHECKS, ids=check_id)
def test_fake_cluster_conforms(check: ConformanceCheck, fake_clients: KafkaClients, names: NameFactory) -> None:
    check(fake_clients, names)
