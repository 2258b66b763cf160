"""Every use of kafka-python's private API, in one place.

kafka-python has no public call for what the transaction control plane needs: sending EndTxn (and
InitProducerId, for the tests) to a transaction coordinator, finding the coordinators of many
transactional ids in one batched FindCoordinator, dropping a coordinator it cached after the
broker said NOT_COORDINATOR, and counting the requests in flight to a broker (kafka-python refuses
a request past ``max_in_flight_requests_per_connection`` instead of queueing it). Its ``KafkaAdminClient`` does all of them internally; this module
reaches them, and nothing else does (``transaction_control.py`` and the integration tests go
through it).

It was checked against :data:`CHECKED_VERSIONS`, and pyproject pins kafka-python to that minor
release (``kafka-python>=3.0.12,<3.1``). :func:`missing_internals` names what an installed
release lacks; ``integration_tests/test_kafka_python_internals_on_real_kafka.py`` calls it and drives each
function against a real broker, so an upgrade that changes any of them fails there, not in a
query.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Sequence, TypeVar

import kafka
from kafka.admin import KafkaAdminClient
from kafka.protocol.metadata import CoordinatorType

T = TypeVar("T")

#: The kafka-python releases whose internals this module was checked against.
CHECKED_VERSIONS = ("3.0.12",)

#: What this module reaches, for :func:`missing_internals`.
_ADMIN_ATTRIBUTES = ("_manager", "_find_coordinator_ids", "_client")
_MANAGER_ATTRIBUTES = ("run", "send", "cluster")
_CLUSTER_ATTRIBUTES = ("_coordinators",)


def run(admin: KafkaAdminClient, coroutine: Callable[..., Awaitable[T]], *args: Any) -> T:
    """Run ``coroutine(*args)`` on the admin client's network thread and wait for its result."""
    return admin._manager.run(coroutine, *args)


def send(admin: KafkaAdminClient, request: Any, node_id: int) -> Awaitable[Any]:
    """Send ``request`` to broker ``node_id`` (inside :func:`run`); await the response."""
    return admin._manager.send(request, node_id=node_id)


async def transaction_coordinators(admin: KafkaAdminClient, transactional_ids: Sequence[str]) -> dict[str, int]:
    """The coordinator node of each transactional id, in one batched FindCoordinator (inside
    :func:`run`); cached by the client until :func:`forget_transaction_coordinator`."""
    return await admin._find_coordinator_ids(list(transactional_ids), key_type=CoordinatorType.TRANSACTION)


def in_flight_limit(admin: KafkaAdminClient) -> int:
    """How many requests the client lets be in flight on one connection
    (``max_in_flight_requests_per_connection``, a public setting): one more is refused at once
    with ``NodeNotReadyError('Node paused: {'max_in_flight'}')``, not queued."""
    return int(admin.config["max_in_flight_requests_per_connection"])


def in_flight_count(admin: KafkaAdminClient, node_id: int) -> int:
    """How many requests the client has in flight to broker ``node_id`` now (its own accounting,
    which its other requests, such as a metadata refresh, count in too); 0 with no connection."""
    return int(admin._client.in_flight_request_count(node_id))


def forget_transaction_coordinator(admin: KafkaAdminClient, transactional_id: str) -> None:
    """Drop the cached coordinator of ``transactional_id``, so the next call looks it up again.
    dict.pop is atomic under the GIL, so the network thread never sees a half-updated map."""
    admin._manager.cluster._coordinators.pop((CoordinatorType.TRANSACTION, transactional_id), None)


def missing_internals(admin: KafkaAdminClient) -> list[str]:
    """What of kafka-python's internals that this module uses ``admin`` lacks (empty: all there)."""
    missing = [f"KafkaAdminClient.{name}" for name in _ADMIN_ATTRIBUTES if not hasattr(admin, name)]
    if not hasattr(getattr(admin, "_client", None), "in_flight_request_count"):
        missing.append("KafkaAdminClient._client.in_flight_request_count")
    manager = getattr(admin, "_manager", None)
    if manager is not None:
        missing += [f"KafkaAdminClient._manager.{name}" for name in _MANAGER_ATTRIBUTES if not hasattr(manager, name)]
        cluster = getattr(manager, "cluster", None)
        if cluster is not None:
            coordinators = getattr(cluster, "_coordinators", None)
            if not isinstance(coordinators, dict):
                missing.append("KafkaAdminClient._manager.cluster._coordinators (a dict)")
    return missing


def installed_version() -> str:
    return str(kafka.__version__)
