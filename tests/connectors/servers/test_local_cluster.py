"""The 3-node cluster launcher's choices that need no Kafka: ports outside the ephemeral range, an
external cluster that is not bounced, and the reason given when there is no cluster at all."""

import random
import socket

import pytest

from connectors.servers.broker_discovery import cluster_broker
from connectors.servers.server_errors import NoBrokerError, NoClusterError
from connectors.servers.kafka_distribution import VERSION_ENV
from connectors.servers.local_cluster import (
    CLUSTER_ENV,
    PORT_RANGE,
    find_cluster,
    free_port_below_ephemeral,
)

EPHEMERAL = range(32768, 61000)


def test_ports_are_below_the_ephemeral_range_free_and_distinct():
    rng = random.Random(7)
    taken: set[int] = set()
    for _ in range(6):
        port = free_port_below_ephemeral(taken, rng)
        assert PORT_RANGE[0] <= port < PORT_RANGE[1] and port not in EPHEMERAL
        assert port not in taken
        taken.add(port)


def test_a_port_in_use_is_not_chosen():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        # Pin the generator to a port that is in use, then let it move on.
        port = busy.getsockname()[1]

        class Pinned(random.Random):
            calls = 0

            def randrange(self, *args):
                self.calls += 1
                return port if self.calls == 1 else random.randrange(*PORT_RANGE)

        rng = Pinned()
        assert free_port_below_ephemeral(set(), rng) != port
        assert rng.calls >= 2


def test_an_external_cluster_is_used_as_is_and_never_bounced():
    cluster = find_cluster(environ={CLUSTER_ENV: "k1:9092,k2:9092,k3:9092"})
    assert cluster.bootstrap_servers == "k1:9092,k2:9092,k3:9092"
    assert not cluster.can_bounce and "cannot be bounced" in cluster.skip_reason
    broker = cluster_broker(environ={CLUSTER_ENV: "k1:9092,k2:9092,k3:9092"})
    assert broker.bounce is None and "cannot be bounced" in broker.bounce_unavailable


def test_no_cluster_names_both_ways_to_get_one():
    with pytest.raises(NoClusterError, match=f"{CLUSTER_ENV}.*KAFKA_HOME"):
        find_cluster(environ={VERSION_ENV: "off"})
    with pytest.raises(NoBrokerError, match="KAFKA_HOME"):
        cluster_broker(environ={VERSION_ENV: "off"})
