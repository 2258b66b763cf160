"""The client seam defines the contract and knows no implementation; the factory finds them."""

import ast
import subprocess
import sys
from pathlib import Path

from connectors.kafka.clients.factory import clients_for, registered_scheme
from connectors.simulated_kafka import FakeKafkaClients


def test_the_seam_imports_no_client_implementation():
    code = ("import sys, connectors.kafka.clients; "
            "print(sorted(m for m in sys.modules if m.startswith(('confluent_kafka', 'kafka', 'connectors.simulated_kafka'))))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == "[]"


def test_a_registered_scheme_selects_its_implementation(tmp_path):
    clients = clients_for(f"fake-kafka://{tmp_path / 'k.db'}")
    assert isinstance(clients, FakeKafkaClients)
    assert clients.path == str(tmp_path / "k.db")


def test_security_protocol_prefixes_and_plain_addresses_are_real_clusters():
    assert registered_scheme("SASL_SSL://broker:9093") is None
    assert registered_scheme("broker-1:9092,broker-2:9092") is None
    assert registered_scheme(" fake-kafka:///tmp/x.db") == "fake-kafka"
    assert type(clients_for("broker:9092")).__name__ == "RealKafkaClients"


def test_no_product_module_imports_the_test_kit():
    # The examples are failure-replay jobs: they may take the test kit's seeded task failures.
    root = Path(__file__).resolve().parents[3]
    importers = []
    for package in ("twophase", "connectors"):
        for path in (root / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                         else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                if any(name.split(".")[0] == "kafka_testkit" for name in names):
                    importers.append(str(path.relative_to(root)))
    assert importers == []


def test_the_tools_find_simulated_kafka_through_the_registry(tmp_path):
    from connectors.servers.broker_discovery import embedded_broker, find_broker

    named = find_broker(f"fake-kafka://{tmp_path / 'k.db'}")
    assert named.simulated and named.bootstrap_servers == f"fake-kafka://{tmp_path / 'k.db'}"
    named.restart(0)  # an outage of no length: down, then up again
    assert FakeKafkaClients(tmp_path / "k.db").admin().list_topics() == []
    embedded = embedded_broker(tmp_path / "e.db")
    assert embedded.simulated and embedded.restart is None
