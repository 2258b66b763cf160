"""Which ``KafkaClients`` serve a bootstrap address.

A list of ``host:port`` gets the real clients (``confluent_clients.RealKafkaClients``). An address
``<scheme>://<rest>`` whose scheme is registered under the entry-point group
``pyspark_kafka_eos.kafka_clients`` gets that implementation, built from ``<rest>``: the kit's
simulated Kafka (``connectors/simulated_kafka/``) registers ``fake-kafka``. The registry keeps the
seam free of any implementation, while Spark's Python workers, which only see option strings,
still find the cluster a job or a test chose.
"""

from __future__ import annotations

import re
from functools import lru_cache
from importlib.metadata import EntryPoint, entry_points
from typing import Mapping

from connectors.kafka.clients import KafkaClients
from twophase.errors import InvalidValueError

ENTRY_POINT_GROUP = "pyspark_kafka_eos.kafka_clients"

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://(.*)$", re.DOTALL)


@lru_cache(maxsize=None)
def _registered() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def registered_scheme(bootstrap_servers: str) -> str | None:
    """The registered client scheme of ``bootstrap_servers`` (e.g. ``fake-kafka``), or None for a
    real cluster's address. Security-protocol prefixes such as ``SASL_SSL://`` are not schemes."""
    match = _SCHEME.match(bootstrap_servers.strip())
    if match is None or match.group(1) not in _registered():
        return None
    return match.group(1)


def clients_for(bootstrap_servers: str, config: Mapping[str, str] | None = None) -> KafkaClients:
    """The clients for a bootstrap address. ``config`` is librdkafka-style client configuration,
    passed through to the real clients (security settings, timeouts)."""
    if not bootstrap_servers:
        raise InvalidValueError("bootstrap servers must be given, e.g. 'localhost:9092'")
    scheme = registered_scheme(bootstrap_servers)
    if scheme is not None:
        implementation = _registered()[scheme].load()
        clients: KafkaClients = implementation(bootstrap_servers.strip()[len(scheme) + 3:])
        return clients
    from connectors.kafka.clients._confluent.backend import RealKafkaClients

    return RealKafkaClients(bootstrap_servers, dict(config or {}))
