"""A throwaway 3-node Kafka cluster (KRaft; every node broker and controller) for tests of broker
restarts, as production runs Kafka: replication factor 3, ``min.insync.replicas=2``, and the
transaction and offsets topics replicated 3 times with a minimum ISR of 2.

``LocalKafkaCluster(distribution).start()`` formats each node's storage and starts the nodes the way
``LocalKafkaBroker`` starts one (each node is one, with its quorum and ports set here); ``kill(n)``
SIGKILLs node ``n`` by PID, as a host that dies; ``revive(n)`` starts it again on the same ports
with the same data; ``stop()`` ends every process it started, and only those.

Listener ports come from below Linux's ephemeral range (32768-60999). A client that reconnects to a
downed node on a port inside that range can be given that very port as its own source port (a TCP
self-connect), and the restarted node then cannot bind it until TIME-WAIT ends.

``find_cluster()`` takes an external cluster from ``KAFKA_EOS_CLUSTER_BOOTSTRAP_SERVERS`` (nothing
started, nothing bounced: ``can_bounce`` is False), else starts one from ``KAFKA_HOME``, else from
the official jars on Maven Central (``KAFKA_EOS_KAFKA_VERSION``, default the newest 4.x).
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import signal
import socket
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from connectors.servers.server_errors import BrokerStartError, NoClusterError
from connectors.servers.kafka_distribution import VERSION_ENV, KafkaDistribution, as_distribution, from_environment
from connectors.servers.local_broker import LocalBrokerError, LocalKafkaBroker, _cluster_id

log = logging.getLogger(__name__)

_HOST = "127.0.0.1"
CLUSTER_ENV = "KAFKA_EOS_CLUSTER_BOOTSTRAP_SERVERS"
#: Ports are drawn from here: below the ephemeral range, above the well-known and most services'.
PORT_RANGE = (20000, 32000)
NODES = 3

REPLICATION_CONFIG: dict[str, str] = {
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "share.coordinator.state.topic.replication.factor": "3",
    "share.coordinator.state.topic.min.isr": "2",
    # A few coordinator partitions, so that a sink's transactions have coordinators on several
    # nodes (as with Kafka's 50) while loading stays quick on a small machine.
    "transaction.state.log.num.partitions": "3",
    "offsets.topic.num.partitions": "3",
    "unclean.leader.election.enable": "false",
}


def free_port_below_ephemeral(taken: set[int], rng: random.Random | None = None) -> int:
    """A loopback port in ``PORT_RANGE`` that is free now and not in ``taken``."""
    rng = rng or random.Random()
    for _ in range(500):
        port = rng.randrange(*PORT_RANGE)
        if port in taken:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((_HOST, port))
            except OSError:
                continue
        return port
    raise LocalBrokerError(f"no free loopback port in {PORT_RANGE[0]}-{PORT_RANGE[1]}")


class _ClusterNode(LocalKafkaBroker):
    """One node of ``LocalKafkaCluster``: a ``LocalKafkaBroker`` with fixed ports, a static quorum
    of the cluster's controllers, and the cluster's id."""

    def __init__(self, kafka_home: KafkaDistribution, work_dir: Path, *, node_id: int, ports: tuple[int, int],
                 voters: str, cluster_id: str, extra_config: Mapping[str, str], heap_opts: str,
                 start_timeout_s: float) -> None:
        config = {**REPLICATION_CONFIG, "node.id": str(node_id), **extra_config}
        super().__init__(kafka_home, work_dir, extra_config=config, heap_opts=heap_opts,
                         start_timeout_s=start_timeout_s, stop_grace_s=10.0)
        self.node_id = node_id
        self.ports = ports
        self._voters = voters
        self._cluster = cluster_id

    def _choose_ports(self) -> tuple[int, int]:
        return self.ports

    def _quorum_config(self, controller_port: int) -> dict[str, str]:
        # A static quorum (Kafka 3.9 and 4.x): every node knows all three controllers up front.
        return {"controller.quorum.voters": self._voters}

    def _quorum_format_arguments(self) -> list[str]:
        return []

    def _cluster_id(self) -> str:
        return self._cluster

    def launch(self) -> None:
        self.bootstrap_servers = self._launch()

    def wait_ready(self) -> None:
        assert self.bootstrap_servers is not None
        self._wait_until_ready(self.bootstrap_servers)

    def kill(self) -> None:
        """SIGKILL the node's JVM, as a host that dies: no clean shutdown, no leadership moved."""
        process = self._process
        if process is None or process.poll() is not None:
            return
        log.info("local Kafka cluster: SIGKILL node %d (pid %d)", self.node_id, process.pid)
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)

    def revive(self) -> None:
        """Start the killed node again on its ports, with its data, and wait until it serves."""
        assert self.work_dir is not None
        if self._process is not None and self._process.poll() is None:
            raise LocalBrokerError(f"node {self.node_id} is running (pid {self._process.pid})")
        self._spawn(self.work_dir / "server.properties", self._environment(self.work_dir), self.work_dir)
        self.wait_ready()
        log.info("local Kafka cluster: node %d back (pid %d)", self.node_id, self.pid)

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None


@dataclass
class KafkaCluster:
    """A cluster the tests use: its bootstrap address, and whether its nodes can be bounced."""

    bootstrap_servers: str
    origin: str
    local: "LocalKafkaCluster | None" = None
    skip_reason: str | None = field(default=None)

    @property
    def can_bounce(self) -> bool:
        return self.local is not None

    def stop(self) -> None:
        if self.local is not None:
            self.local.stop()


class LocalKafkaCluster:
    """Three local Kafka nodes (KRaft, combined roles) replicating every topic 3 times."""

    def __init__(self, kafka_home: str | os.PathLike[str] | KafkaDistribution,
                 work_dir: str | os.PathLike[str] | None = None, *,
                 extra_config: Mapping[str, str] | None = None, heap_opts: str = "-Xmx384m -Xms128m",
                 start_timeout_s: float = 120.0, seed: int | None = None) -> None:
        self.distribution = as_distribution(kafka_home)
        self._own_work_dir = work_dir is None
        self.work_dir = Path(work_dir) if work_dir is not None else Path(tempfile.mkdtemp(prefix="kafka-eos-cluster-"))
        self.extra_config = dict(extra_config or {})
        self.heap_opts = heap_opts
        self.start_timeout_s = start_timeout_s
        self._rng = random.Random(seed)
        self.nodes: dict[int, _ClusterNode] = {}

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"{_HOST}:{node.ports[0]}" for node in self.nodes.values())

    def start(self) -> str:
        """Format and start every node, and wait until each serves. Returns the bootstrap address."""
        if self.nodes:
            raise LocalBrokerError("this LocalKafkaCluster is already started")
        taken: set[int] = set()
        ports = {}
        for node_id in range(1, NODES + 1):
            broker_port = free_port_below_ephemeral(taken, self._rng)
            taken.add(broker_port)
            controller_port = free_port_below_ephemeral(taken, self._rng)
            taken.add(controller_port)
            ports[node_id] = (broker_port, controller_port)
        voters = ",".join(f"{node_id}@{_HOST}:{c}" for node_id, (_, c) in ports.items())
        cluster_id = _cluster_id()
        for node_id, node_ports in ports.items():
            self.nodes[node_id] = _ClusterNode(
                self.distribution, self.work_dir / f"node-{node_id}", node_id=node_id, ports=node_ports,
                voters=voters, cluster_id=cluster_id, extra_config=self.extra_config,
                heap_opts=self.heap_opts, start_timeout_s=self.start_timeout_s)
        try:
            # All nodes first: none serves before a majority of the controllers runs.
            for node in self.nodes.values():
                node._check_distribution()
                node.launch()
            for node in self.nodes.values():
                node.wait_ready()
            self.wait_until_healthy()
        except BaseException:
            self.stop()
            raise
        log.info("local Kafka cluster: ready at %s (pids %s)", self.bootstrap_servers,
                 [node.pid for node in self.nodes.values()])
        return self.bootstrap_servers

    def pid(self, node_id: int) -> int | None:
        return self.nodes[node_id].pid

    def running_nodes(self) -> list[int]:
        return [node_id for node_id, node in self.nodes.items() if node.running]

    def kill(self, node_id: int) -> None:
        self.nodes[node_id].kill()

    def revive(self, node_id: int) -> None:
        self.nodes[node_id].revive()

    def upgrade(self, node_id: int, distribution: KafkaDistribution) -> None:
        """One step of a rolling upgrade, as Kafka's upgrade notes describe it: stop node
        ``node_id`` cleanly (SIGTERM: it hands its leaderships over), start it again on the same
        ports and data with ``distribution`` (e.g. 3.9 -> 4.x), and wait until the whole cluster is
        back in sync. Finalise the new version afterwards (``finalize_features``)."""
        node = self.nodes[node_id]
        distribution.check()
        process = node._process
        if process is not None:
            node._terminate(process)
        node.distribution = distribution
        node.revive()
        self.wait_until_healthy()
        log.info("local Kafka cluster: node %d upgraded to %s", node_id, distribution.description)

    def bounce(self, node_id: int, downtime_s: float = 0.0) -> None:
        """SIGKILL the node, stay down ``downtime_s``, start it again and wait until it serves."""
        self.kill(node_id)
        time.sleep(max(0.0, downtime_s))
        self.revive(node_id)

    def wait_until_healthy(self, timeout_s: float | None = None) -> None:
        """Wait until every node is in the metadata and every partition has all its replicas in
        sync: only then may the next node go down without the cluster losing its ISR."""
        deadline = time.monotonic() + (timeout_s if timeout_s is not None else self.start_timeout_s)
        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers, "log_level": 0,
                             "socket.connection.setup.timeout.ms": 2000})
        last = "no answer yet"
        while time.monotonic() < deadline:
            try:
                metadata = admin.list_topics(timeout=5)
            except KafkaException as exc:
                last = str(exc)
                time.sleep(0.5)
                continue
            missing = sorted(set(self.nodes) - set(metadata.brokers))
            lagging = [f"{topic}-{p.id}" for topic, t in metadata.topics.items() for p in t.partitions.values()
                       if len(p.isrs) < len(p.replicas) or p.leader < 0]
            if not missing and not lagging:
                return
            last = f"nodes not in metadata: {missing}; partitions out of sync: {lagging[:10]}"
            time.sleep(0.5)
        raise LocalBrokerError(f"local Kafka cluster not healthy after the wait ({last})")

    def stop(self) -> None:
        """Stop every node this object started (by PID); idempotent."""
        # All at once: a node stopped last would wait in vain for a controller quorum to shut down
        # cleanly. The storage is thrown away, so a node that does not stop in its grace is killed.
        for node in self.nodes.values():
            if node.running and node.pid is not None:
                os.kill(node.pid, signal.SIGTERM)
        for node in self.nodes.values():
            node.stop()
        self.nodes = {}
        if self._own_work_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def log_tail(self, node_id: int, lines: int = 60) -> str:
        return self.nodes[node_id].log_tail(lines)

    def __enter__(self) -> "LocalKafkaCluster":
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def find_cluster(work_dir: str | os.PathLike[str] | None = None, *,
                 environ: Mapping[str, str] | None = None, heap_opts: str = "-Xmx384m -Xms128m") -> KafkaCluster:
    """An external cluster (``KAFKA_EOS_CLUSTER_BOOTSTRAP_SERVERS``), or one started from
    ``KAFKA_HOME``, or from Maven Central. Raises NoClusterError saying what to set."""
    env = os.environ if environ is None else environ
    external = env.get(CLUSTER_ENV, "").strip()
    if external:
        return KafkaCluster(external, origin=f"{CLUSTER_ENV}={external}",
                            skip_reason=f"the cluster of {CLUSTER_ENV} is not started here, so its nodes "
                                        "cannot be bounced")
    kafka_home = env.get("KAFKA_HOME", "").strip()
    try:
        distribution = from_environment(kafka_home, env.get(VERSION_ENV))
        cluster = LocalKafkaCluster(distribution, work_dir, heap_opts=heap_opts)
        cluster.start()
    except BrokerStartError as exc:
        raise NoClusterError(f"no 3-node Kafka cluster: set {CLUSTER_ENV} (a running cluster of 3+ brokers; tests "
                             "that bounce nodes are skipped), or KAFKA_HOME (a Kafka 3.9/4.x distribution), or have "
                             f"mvn and Java for Kafka from Maven Central. Tried: {str(exc).splitlines()[0]}") from exc
    return KafkaCluster(cluster.bootstrap_servers,
                        origin=f"LocalKafkaCluster of {distribution.description} on 127.0.0.1", local=cluster)
