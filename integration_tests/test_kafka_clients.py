"""The real client seam (librdkafka + kafka-python) against a real broker.

The first block checks the Kafka facts the exactly-once protocol relies on
(design/exactly-once-protocol.md); the rest checks the seam's own contract.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest
from tenacity import retry, retry_if_exception_type, stop_after_delay, wait_exponential

from connectors.kafka.clients import (
    ConsumedRecord,
    KafkaClients,
    ProducerIdentity,
    TopicPartition,
    TransactionControl,
)
from connectors.kafka.errors import (
    InvalidTxnStateError,
    OffsetOutOfRangeError,
    ProducerFencedError,
    RecordTooLargeError,
    RetriableKafkaError,
    TransactionalIdNotFoundError,
    UnknownTopicError,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
TXN_TIMEOUT_MS = "60000"
PRODUCER_CONFIG = {"transaction.timeout.ms": TXN_TIMEOUT_MS}

# Opens a transaction, writes records, flushes, prints the identity and dies without ending the
# transaction and without running any destructor: what a crashed Spark executor leaves behind.
CHILD = r"""
import json, os, sys
from connectors.kafka.client_factory import clients_for
bootstrap, transactional_id, topic, count, label = sys.argv[1:6]
producer = clients_for(bootstrap).producer(transactional_id, {"transaction.timeout.ms": "60000"})
producer.init_transactions(30)
producer.begin_transaction()
for i in range(int(count)):
    producer.produce(topic, f"{label}-{i}".encode(), key=str(i).encode(), partition=0)
producer.flush(30)
identity = producer.identity()
sys.stdout.write(json.dumps({"producer_id": identity.producer_id,
                             "producer_epoch": identity.producer_epoch}) + "\n")
sys.stdout.flush()
os._exit(0)
"""


def open_txn_in_child(
    bootstrap: str, transactional_id: str, topic: str, count: int, label: str
) -> ProducerIdentity:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, "-c", CHILD, bootstrap, transactional_id, topic, str(count), label],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=REPO_ROOT,
    )
    assert result.returncode == 0, f"child failed:\n{result.stdout}\n{result.stderr}"
    identity = json.loads(result.stdout.strip().splitlines()[-1])
    return ProducerIdentity(identity["producer_id"], identity["producer_epoch"])


@retry(
    retry=retry_if_exception_type(RetriableKafkaError),
    stop=stop_after_delay(30),
    wait=wait_exponential(multiplier=0.02, max=0.5),
    reraise=True,
)
def end_txn(
    control: TransactionControl, transactional_id: str, identity: ProducerIdentity, commit: bool
) -> None:
    """EndTxn as the sink sends it: retriable errors (CONCURRENT_TRANSACTIONS while the previous
    EndTxn's markers are still being written, coordinator moves) are retried by the caller."""
    control.end_transaction(transactional_id, identity, commit)


def wait_for_end_offset(
    clients: KafkaClients, tp: TopicPartition, expected: int, read_committed: bool = True
) -> None:
    """EndTxn returns once the decision is logged; the markers, and with them the LSO, follow a
    moment later."""
    deadline = time.monotonic() + 30
    while (current := end_offset(clients, tp, read_committed)) != expected:
        assert time.monotonic() < deadline, f"{tp} end offset stuck at {current}, not {expected}"
        time.sleep(0.05)


def create_topic(clients: KafkaClients, name: str, partitions: int = 1) -> TopicPartition:
    admin = clients.admin()
    try:
        admin.create_topic(name, partitions)
    finally:
        admin.close()
    return TopicPartition(name, 0)


def end_offset(clients: KafkaClients, tp: TopicPartition, read_committed: bool) -> int:
    admin = clients.admin()
    try:
        return admin.list_offsets([tp], "latest", read_committed=read_committed)[tp]
    finally:
        admin.close()


def read_visible(
    clients: KafkaClients, tp: TopicPartition, read_committed: bool = True
) -> list[ConsumedRecord]:
    """Every record the isolation level can see, from offset 0 to its end (LSO or HW)."""
    end = end_offset(clients, tp, read_committed)
    reader = clients.reader(read_committed=read_committed)
    try:
        return list(reader.read({tp: (0, end)}))
    finally:
        reader.close()


@pytest.fixture
def txn_prefix(kafka_clients: KafkaClients, unique_name: Callable[[str], str]) -> Iterator[str]:
    """A transactional id prefix for this test; whatever it leaves open is aborted afterwards, so
    no read_committed consumer of a later test stalls on it."""
    prefix = unique_name("txn") + "-"
    yield prefix
    control = kafka_clients.txn_control()
    try:
        for txn in control.list_open_transactions(prefix):
            end_txn(
                control,
                txn.transactional_id,
                ProducerIdentity(txn.producer_id, txn.producer_epoch),
                commit=False,
            )
    finally:
        control.close()


# -- the facts of design/exactly-once-protocol.md ---------------------------------------------


def test_commit_of_a_dead_processes_transaction_makes_every_record_visible(
    kafka_bootstrap: str, kafka_clients: KafkaClients, unique_topic: Callable[[], str], txn_prefix: str
) -> None:
    tp = create_topic(kafka_clients, unique_topic())
    tid = txn_prefix + "0"
    identity = open_txn_in_child(kafka_bootstrap, tid, tp.topic, 5, "committed")
    assert identity.producer_id >= 0 and identity.producer_epoch >= 0
    assert read_visible(kafka_clients, tp) == []  # the open transaction holds the LSO at 0

    control = kafka_clients.txn_control()
    try:
        end_txn(control, tid, identity, commit=True)
    finally:
        control.close()

    wait_for_end_offset(kafka_clients, tp, 6)  # 5 records and the commit marker
    records = read_visible(kafka_clients, tp)
    assert [r.value for r in records] == [f"committed-{i}".encode() for i in range(5)]
    assert [r.key for r in records] == [str(i).encode() for i in range(5)]
    assert [r.offset for r in records] == [0, 1, 2, 3, 4]
    assert all(r.topic == tp.topic and r.partition == 0 and r.timestamp_ms > 0 for r in records)


def test_repeating_a_commit_is_not_an_error(
    kafka_bootstrap: str, kafka_clients: KafkaClients, unique_topic: Callable[[], str], txn_prefix: str
) -> None:
    tp = create_topic(kafka_clients, unique_topic())
    tid = txn_prefix + "0"
    identity = open_txn_in_child(kafka_bootstrap, tid, tp.topic, 3, "twice")
    control = kafka_clients.txn_control()
    try:
        end_txn(control, tid, identity, commit=True)
        # At once, the repeat may meet CONCURRENT_TRANSACTIONS (retriable, markers still being
        # written); the retried repeat succeeds.
        end_txn(control, tid, identity, commit=True)
        wait_for_end_offset(kafka_clients, tp, 4)
        # Once the transaction is complete a repeat is plainly accepted, also from the fresh
        # client a recovering driver would use.
        control.end_transaction(tid, identity, commit=True)
        other = kafka_clients.txn_control()
        try:
            other.end_transaction(tid, identity, commit=True)
        finally:
            other.close()
    finally:
        control.close()
    assert [r.value for r in read_visible(kafka_clients, tp)] == [
        f"twice-{i}".encode() for i in range(3)
    ]


def test_abort_of_a_dead_processes_transaction_hides_every_record(
    kafka_bootstrap: str, kafka_clients: KafkaClients, unique_topic: Callable[[], str], txn_prefix: str
) -> None:
    tp = create_topic(kafka_clients, unique_topic())
    tid = txn_prefix + "0"
    identity = open_txn_in_child(kafka_bootstrap, tid, tp.topic, 5, "aborted")
    control = kafka_clients.txn_control()
    try:
        end_txn(control, tid, identity, commit=False)
    finally:
        control.close()
    # 5 records and the abort marker; the LSO moves past all of them.
    wait_for_end_offset(kafka_clients, tp, 6)
    assert read_visible(kafka_clients, tp) == []
    assert [r.offset for r in read_visible(kafka_clients, tp, read_committed=False)] == [0, 1, 2, 3, 4]


def test_close_leaves_the_transaction_open(
    kafka_clients: KafkaClients, unique_topic: Callable[[], str], txn_prefix: str
) -> None:
    tp = create_topic(kafka_clients, unique_topic())
    tid = txn_prefix + "0"
    producer = kafka_clients.producer(tid, PRODUCER_CONFIG)
    identity = producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(4):
        producer.produce(tp.topic, f"v{i}".encode(), partition=0)
    producer.flush(30)
    assert producer.identity() == identity
    producer.close()

    control = kafka_clients.txn_control()
    try:
        (txn,) = control.list_open_transactions(tid)
        assert txn.transactional_id == tid
        assert (txn.producer_id, txn.producer_epoch) == (identity.producer_id, identity.producer_epoch)
        assert txn.state == "Ongoing"
        assert txn.partitions == frozenset({tp})
        assert txn.timeout_ms == int(TXN_TIMEOUT_MS)
        assert txn.start_time_ms > 0
        assert end_offset(kafka_clients, tp, read_committed=True) == 0

        (listed,) = control.list_transactions(tid)
        assert (listed.transactional_id, listed.producer_id, listed.state) == (tid, identity.producer_id, "Ongoing")
        end_txn(control, tid, identity, commit=False)
        assert control.list_open_transactions(tid) == []
        # The id stays on the broker after its transaction ended (until transactional.id.expiration.ms).
        (listed,) = control.list_transactions(tid)
        assert listed.state in ("PrepareAbort", "CompleteAbort")
    finally:
        control.close()
    wait_for_end_offset(kafka_clients, tp, 5)
    assert read_visible(kafka_clients, tp) == []


def test_end_txn_with_a_fenced_identity_raises_producer_fenced(
    kafka_bootstrap: str, kafka_clients: KafkaClients, unique_topic: Callable[[], str], txn_prefix: str
) -> None:
    tp = create_topic(kafka_clients, unique_topic())
    tid = txn_prefix + "0"
    old = open_txn_in_child(kafka_bootstrap, tid, tp.topic, 5, "fenced")
    newer = kafka_clients.producer(tid, PRODUCER_CONFIG)
    try:
        new = newer.init_transactions(30)
    finally:
        newer.close()
    assert new.producer_id == old.producer_id
    assert new.producer_epoch > old.producer_epoch

    control = kafka_clients.txn_control()
    try:
        with pytest.raises(ProducerFencedError):
            end_txn(control, tid, old, commit=True)
        assert control.list_open_transactions(tid) == []
    finally:
        control.close()
    # init_transactions aborted the old transaction: its data is gone.
    wait_for_end_offset(kafka_clients, tp, 6)
    assert read_visible(kafka_clients, tp) == []


def test_a_fenced_producer_fails_with_producer_fenced(
    kafka_clients: KafkaClients, unique_topic: Callable[[], str], txn_prefix: str
) -> None:
    tp = create_topic(kafka_clients, unique_topic())
    tid = txn_prefix + "0"
    old = kafka_clients.producer(tid, PRODUCER_CONFIG)
    newer = kafka_clients.producer(tid, PRODUCER_CONFIG)
    try:
        with pytest.raises(InvalidTxnStateError):
            old.identity()  # no producer id before init_transactions
        old.init_transactions(30)
        old.begin_transaction()
        old.produce(tp.topic, b"before", partition=0)
        old.flush(30)
        newer.init_transactions(30)
        with pytest.raises(ProducerFencedError):
            # librdkafka learns of the fencing asynchronously: the next produce or the flush fails.
            old.produce(tp.topic, b"after", partition=0)
            old.flush(30)
        with pytest.raises(ProducerFencedError):
            old.produce(tp.topic, b"again", partition=0)
        with pytest.raises(ProducerFencedError):
            old.abort_transaction(10)
    finally:
        old.close()
        newer.close()
    wait_for_end_offset(kafka_clients, tp, 2)  # "before" and the abort marker of the fencing
    assert read_visible(kafka_clients, tp) == []


def test_lso_stops_at_the_open_transaction_and_reads_skip_markers(
    kafka_clients: KafkaClients, unique_topic: Callable[[], str], txn_prefix: str
) -> None:
    tp = create_topic(kafka_clients, unique_topic())
    control = kafka_clients.txn_control()
    # Offsets 0-4: an aborted transaction, 5 its marker.
    aborted = kafka_clients.producer(txn_prefix + "aborted", PRODUCER_CONFIG)
    aborted.init_transactions(30)
    aborted.begin_transaction()
    for i in range(5):
        aborted.produce(tp.topic, f"aborted-{i}".encode(), partition=0)
    aborted.flush(30)
    aborted.abort_transaction(30)
    aborted.close()
    # The markers follow EndTxn asynchronously; later records must not overtake them.
    wait_for_end_offset(kafka_clients, tp, 6)
    # Offsets 6-10: committed by EndTxn from the control plane (the two-phase path), 11 its marker.
    committed = kafka_clients.producer(txn_prefix + "committed", PRODUCER_CONFIG)
    committed_identity = committed.init_transactions(30)
    committed.begin_transaction()
    for i in range(5):
        committed.produce(tp.topic, f"committed-{i}".encode(), partition=0)
    committed.flush(30)
    committed.close()
    # Offsets 12-14: a transaction that stays open.
    open_producer = kafka_clients.producer(txn_prefix + "open", PRODUCER_CONFIG)
    try:
        end_txn(control, txn_prefix + "committed", committed_identity, commit=True)
        wait_for_end_offset(kafka_clients, tp, 12)
        open_producer.init_transactions(30)
        open_producer.begin_transaction()
        for i in range(3):
            open_producer.produce(tp.topic, f"open-{i}".encode(), partition=0)
        open_producer.flush(30)

        admin = kafka_clients.admin()
        try:
            assert admin.list_offsets([tp], "latest", read_committed=True) == {tp: 12}
            assert admin.list_offsets([tp], "latest", read_committed=False) == {tp: 15}
            assert admin.list_offsets([tp], "earliest") == {tp: 0}
        finally:
            admin.close()

        reader = kafka_clients.reader(read_committed=True)
        try:
            records = list(reader.read({tp: (0, 12)}))
            assert [r.offset for r in records] == [6, 7, 8, 9, 10]
            assert [r.value for r in records] == [f"committed-{i}".encode() for i in range(5)]
            # A range that ends in aborted records yields nothing and still completes.
            assert list(reader.read({tp: (0, 5)})) == []
            # Ranges ending on a marker or mid-way, on the same (reused) consumer.
            assert [r.offset for r in reader.read({tp: (3, 7)})] == [6]
            assert [r.offset for r in reader.read({tp: (8, 11)})] == [8, 9, 10]
        finally:
            reader.close()

        uncommitted = kafka_clients.reader(read_committed=False)
        try:
            offsets = [r.offset for r in uncommitted.read({tp: (0, 15)})]
        finally:
            uncommitted.close()
        assert offsets == [0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 12, 13, 14]
    finally:
        open_producer.abort_transaction(30)
        open_producer.close()
        control.close()
    wait_for_end_offset(kafka_clients, tp, 16)


def test_list_open_transactions_filters_by_prefix(
    kafka_clients: KafkaClients, unique_topic: Callable[[], str], txn_prefix: str
) -> None:
    tp = create_topic(kafka_clients, unique_topic(), partitions=2)
    identities: dict[str, ProducerIdentity] = {}
    for tid in (txn_prefix + "a-0", txn_prefix + "a-1", txn_prefix + "b-0"):
        producer = kafka_clients.producer(tid, PRODUCER_CONFIG)
        identities[tid] = producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce(tp.topic, b"x", partition=0)
        producer.produce(tp.topic, b"y", partition=1)
        producer.flush(30)
        producer.close()

    control = kafka_clients.txn_control()
    try:
        found = control.list_open_transactions(txn_prefix + "a-")
        assert sorted(t.transactional_id for t in found) == [txn_prefix + "a-0", txn_prefix + "a-1"]
        for txn in found:
            assert ProducerIdentity(txn.producer_id, txn.producer_epoch) == identities[
                txn.transactional_id
            ]
            assert txn.partitions == frozenset({tp, TopicPartition(tp.topic, 1)})
        assert len(control.list_open_transactions(txn_prefix)) == 3
        assert control.list_open_transactions(txn_prefix + "c-") == []
    finally:
        control.close()


# -- the rest of the seam ----------------------------------------------------------------------


def test_end_txn_for_an_unknown_transactional_id(
    kafka_clients: KafkaClients, txn_prefix: str
) -> None:
    control = kafka_clients.txn_control()
    try:
        with pytest.raises(TransactionalIdNotFoundError):
            control.end_transaction(txn_prefix + "never", ProducerIdentity(123456, 0), commit=True)
    finally:
        control.close()


def test_admin_topics_partitions_and_broker_config(
    kafka_clients: KafkaClients, unique_topic: Callable[[], str]
) -> None:
    name = unique_topic()
    admin = kafka_clients.admin()
    try:
        admin.create_topic(name, 3, {"retention.ms": "3600000"})
        admin.create_topic(name, 3)  # idempotent
        assert name in admin.list_topics()
        assert "__consumer_offsets" not in admin.list_topics()
        assert admin.partitions(name) == [0, 1, 2]
        with pytest.raises(UnknownTopicError):
            admin.partitions(name + "-missing")
        assert admin.broker_config("transaction.max.timeout.ms") == "900000"
        assert admin.broker_config("no.such.setting") is None
    finally:
        admin.close()


def test_list_offsets_by_timestamp_and_group_commit(
    kafka_clients: KafkaClients, unique_topic: Callable[[], str], unique_name: Callable[[str], str]
) -> None:
    tp = create_topic(kafka_clients, unique_topic())
    producer = kafka_clients.producer(None)
    base = int(time.time() * 1000) - 60_000
    for i in range(4):
        producer.produce(tp.topic, f"t{i}".encode(), partition=0, timestamp_ms=base + i * 1000)
    producer.flush(30)
    producer.close()

    admin = kafka_clients.admin()
    try:
        assert admin.list_offsets([tp], base + 1500) == {tp: 2}
        assert admin.list_offsets([tp], base) == {tp: 0}
        # No record at or after the timestamp: the end of the partition.
        assert admin.list_offsets([tp], base + 3_600_000) == {tp: 4}
        admin.commit_group_offsets(unique_name("group"), {tp: 3})
    finally:
        admin.close()

    reader = kafka_clients.reader(read_committed=True)
    try:
        records = list(reader.read({tp: (1, 3)}))
    finally:
        reader.close()
    assert [(r.offset, r.value, r.timestamp_ms) for r in records] == [
        (1, b"t1", base + 1000),
        (2, b"t2", base + 2000),
    ]


def test_reader_reports_offsets_out_of_range(
    kafka_clients: KafkaClients, unique_topic: Callable[[], str]
) -> None:
    tp = create_topic(kafka_clients, unique_topic())
    producer = kafka_clients.producer(None)
    producer.produce(tp.topic, b"only", partition=0, headers=[("h", b"1")])
    producer.flush(30)
    producer.close()
    reader = kafka_clients.reader(read_committed=True)
    try:
        (record,) = list(reader.read({tp: (0, 1)}))
        assert record.headers == (("h", b"1"),)
        with pytest.raises(OffsetOutOfRangeError):
            list(reader.read({tp: (5, 7)}))
        # The reader stays usable after the error.
        assert [r.value for r in reader.read({tp: (0, 1)})] == [b"only"]
    finally:
        reader.close()


def test_record_too_large_is_reported(
    kafka_clients: KafkaClients, unique_topic: Callable[[], str]
) -> None:
    tp = create_topic(kafka_clients, unique_topic())
    producer = kafka_clients.producer(None, {"message.max.bytes": "100000"})
    try:
        with pytest.raises(RecordTooLargeError):
            producer.produce(tp.topic, b"x" * 200_000, partition=0)
    finally:
        producer.close()
