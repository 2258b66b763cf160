"""The driver's EndTxn round keeps within kafka-python's in-flight limit per connection.

kafka-python refuses a request past ``max_in_flight_requests_per_connection`` at once with
``NodeNotReadyError`` (kafka/net/connection.py ``send_request``: ``Node paused: {'max_in_flight'}``)
instead of queueing it. ``FakeConnections`` below refuses exactly so, answers each connection's
requests in order as a broker does, and counts in flight as the client does; the round is driven
through the coroutine protocol kafka-python's event loop uses (an awaited ``kafka.future.Future``
is yielded until it is resolved). The real-broker test, 200 transactions in one round:
integration_tests/test_kafka_python_internals_on_real_kafka.py."""

from __future__ import annotations

import logging
import threading
from collections import defaultdict, deque
from typing import Any

import kafka.errors as kafka_errors
import pytest
from kafka.future import Future

from connectors.kafka.clients import ProducerIdentity
from connectors.kafka.clients._kafka_python import admin_internals, transaction_control
from connectors.kafka.clients._kafka_python.transaction_control import KafkaPythonTransactionControl

LIMIT = 5


class FakeConnections:
    """kafka-python's connections as its EndTxn round sees them: per node, a FIFO of requests in
    flight, refused past the limit; ``foreign`` requests (a metadata refresh) count in too."""

    def __init__(self, nodes: int, foreign: int = 0) -> None:
        self.nodes = nodes
        self.in_flight: dict[int, deque[tuple[Any, Future]]] = defaultdict(deque)
        self.foreign = {node: foreign for node in range(nodes)}
        self.refused = 0
        self.most_in_flight = 0
        self.sent: list[str] = []

    def count(self, node: int) -> int:
        return len(self.in_flight[node]) + self.foreign[node]

    def send(self, request: Any, node: int) -> Future:
        if self.count(node) >= LIMIT:
            self.refused += 1
            return Future().failure(kafka_errors.NodeNotReadyError("Node paused: {'max_in_flight'}"))
        future = Future()
        self.in_flight[node].append((request, future))
        self.sent.append(request.transactional_id)
        self.most_in_flight = max(self.most_in_flight, self.count(node))
        return future

    def answer_through(self, awaited: Future) -> None:
        """Answer, in order, the requests of the connection ``awaited`` waits on up to it; a
        foreign request ahead of them is answered first."""
        for node, window in self.in_flight.items():
            if any(future is awaited for _, future in window):
                self.foreign[node] = 0
                while True:
                    request, future = window.popleft()
                    future.success(type("EndTxnResponse", (), {"error_code": 0, "producer_epoch": 1,
                                                               "transactional_id": request.transactional_id})())
                    if future is awaited:
                        return
        raise AssertionError("the round awaits a future that no connection holds")


def drive(connections: FakeConnections, transactions: list[tuple[str, ProducerIdentity]],
          monkeypatch: pytest.MonkeyPatch) -> list[tuple[int | None, Any]]:
    async def coordinators(admin: Any, ids: list[str]) -> dict[str, int]:
        return {tid: hash(tid) % connections.nodes for tid in ids}

    monkeypatch.setattr(admin_internals, "transaction_coordinators", coordinators)
    monkeypatch.setattr(admin_internals, "in_flight_limit", lambda admin: LIMIT)
    monkeypatch.setattr(admin_internals, "in_flight_count", lambda admin, node: connections.count(node))
    monkeypatch.setattr(admin_internals, "send", lambda admin, request, node: connections.send(request, node))
    coroutine = KafkaPythonTransactionControl._send_end_txns(object(), transactions, True)
    try:
        while True:
            awaited = coroutine.send(None)
            connections.answer_through(awaited)
    except StopIteration as done:
        return done.value


def transactions(count: int) -> list[tuple[str, ProducerIdentity]]:
    return [(f"q-{i}-0", ProducerIdentity(1000 + i, 0)) for i in range(count)]


@pytest.mark.parametrize("nodes", [1, 3])
def test_two_hundred_endtxns_queue_within_the_limit_and_none_is_refused(
        nodes: int, monkeypatch: pytest.MonkeyPatch) -> None:
    connections = FakeConnections(nodes)
    txns = transactions(200)
    outcomes = drive(connections, txns, monkeypatch)
    assert connections.refused == 0
    assert connections.most_in_flight == LIMIT  # pipelined, not one at a time
    assert [response.transactional_id for _, response in outcomes] == [tid for tid, _ in txns]
    assert sorted(connections.sent) == sorted(tid for tid, _ in txns)


def test_a_request_of_the_clients_own_in_flight_leaves_room_for_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # A metadata refresh in flight on the coordinator's connection when the round starts.
    connections = FakeConnections(1, foreign=1)
    outcomes = drive(connections, transactions(12), monkeypatch)
    assert connections.refused == 0
    assert connections.most_in_flight == LIMIT
    assert len(outcomes) == 12 and all(version == 4 for version, _ in outcomes)


def _round_on_fake_clients(monkeypatch: pytest.MonkeyPatch) -> tuple[KafkaPythonTransactionControl, dict[int, FakeConnections]]:
    """A control whose clients are fakes, each with connections of its own (one coordinator),
    and each lane's round run on the calling thread as kafka-python's network thread would."""
    by_client: dict[int, FakeConnections] = {}
    clients: list[object] = []
    lock = threading.Lock()

    def client(lane: int = 0) -> object:
        with lock:  # the lanes ask from threads of their own, as of the real control
            while len(clients) <= lane:
                clients.append(object())
                by_client[id(clients[-1])] = FakeConnections(1)
            return clients[lane]

    def run_on_this_thread(admin: Any, coroutine: Any, *args: Any) -> Any:
        generator = coroutine(*args)
        try:
            while True:
                by_client[id(admin)].answer_through(generator.send(None))
        except StopIteration as done:
            return done.value

    async def coordinators(admin: Any, ids: list[str]) -> dict[str, int]:
        return {tid: 0 for tid in ids}

    monkeypatch.setattr(admin_internals, "run", run_on_this_thread)
    monkeypatch.setattr(admin_internals, "transaction_coordinators", coordinators)
    monkeypatch.setattr(admin_internals, "in_flight_limit", lambda admin: LIMIT)
    monkeypatch.setattr(admin_internals, "in_flight_count", lambda admin, node: by_client[id(admin)].count(node))
    monkeypatch.setattr(admin_internals, "send",
                        lambda admin, request, node: by_client[id(admin)].send(request, node))
    control = KafkaPythonTransactionControl("127.0.0.1:9")
    monkeypatch.setattr(control, "_client", client)
    return control, by_client


def test_a_full_queue_logs_nothing_at_warning_level(monkeypatch: pytest.MonkeyPatch,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    control, by_client = _round_on_fake_clients(monkeypatch)
    txns = transactions(transaction_control.TRANSACTIONS_PER_CONNECTION)  # one connection's worth
    with caplog.at_level(logging.INFO, logger=transaction_control.__name__):
        results = control.end_txn_round(txns, commit=True)
    assert results == {tid: None for tid, _ in txns}
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    [connections] = by_client.values()
    assert connections.refused == 0 and connections.most_in_flight == LIMIT


def test_a_large_round_is_dealt_over_connections_of_their_own_each_transaction_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A broker serves one connection's requests one at a time: a round of 1,000 ends on up to
    ROUND_CONNECTIONS connections per coordinator, each transaction on one of them, once."""
    control, by_client = _round_on_fake_clients(monkeypatch)
    txns = transactions(1_000)
    results = control.end_txn_round(txns, commit=True)
    assert list(results) == [tid for tid, _ in txns] and set(results.values()) == {None}
    assert len(by_client) == transaction_control.ROUND_CONNECTIONS
    sent = [tid for connections in by_client.values() for tid in connections.sent]
    assert sorted(sent) == sorted(tid for tid, _ in txns)
    assert all(connections.refused == 0 for connections in by_client.values())
    # A small round makes no client it would not use.
    control, by_client = _round_on_fake_clients(monkeypatch)
    control.end_txn_round(transactions(3), commit=True)
    assert len(by_client) == 1
