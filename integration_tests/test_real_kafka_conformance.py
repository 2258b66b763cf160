"""The Kafka conformance checks (kafka_testkit/kafka_conformance.py) against a real Kafka broker.

(Named apart from tests/kafka_testkit/test_kafka_conformance.py: tests/ and integration_tests/ are not packages,
so pytest imports both by basename and two equal basenames clash in one session.)

Each check runs against the integration tests' broker (Kafka 4.x unless one is given) and against
Kafka 3.9. tests/kafka_testkit/test_kafka_conformance.py runs the same checks against the kit's fake cluster; together
they are the evidence that the fake behaves like Kafka on every fact the protocol relies on.
integration_tests/conftest.py puts tests/ on sys.path (and never accepts the fake here).
"""

from __future__ import annotations

from typing import Callable

import pytest

from connectors.kafka.clients import KafkaClients
from kafka_testkit.kafka_conformance import CHECKS, ConformanceCheck, check_id


#: The broker of the integration tests (Kafka 4.x by default), and a Kafka 3.9 one.
BROKERS = {"kafka": "kafka_clients", "kafka-3.9": "kafka39_clients"}


@pytest.mark.parametrize("broker", list(BROKERS))
@pytest.mark.parametrize("check", CHECKS, ids=check_id)
def test_real_kafka_conforms(check: ConformanceCheck, broker: str, request: pytest.FixtureRequest,
                             unique_name: Callable[[str], str]) -> None:
    clients: KafkaClients = request.getfixturevalue(BROKERS[broker])
    check(clients, unique_name)
