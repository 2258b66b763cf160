"""Kafka facts the exactly-once protocol relies on, asserted through the client seam only.

Each check takes a ``KafkaClients`` and a name factory and asserts one fact of
design/exactly-once-protocol.md (or of the seam's contract in connectors/kafka/clients/) using
nothing but the seam: no fake-specific control, no client library. The same list runs against the
kit's fake cluster (tests/kafka_testkit/test_kafka_conformance.py) and against a real Apache Kafka broker
(integration_tests/test_kafka_conformance.py), so the fake cannot drift from Kafka unnoticed: a
fake that hands aborted records to read_committed readers (librdkafka's mock cluster, Tansu) would
make every exactly-once test above it meaningless.

The checks are written for a real, shared broker: every check works on topics and transactional
ids of its own (from the name factory), retries what Kafka documents as transient
(CONCURRENT_TRANSACTIONS while the previous EndTxn's markers are still being written), waits for
markers, which a real broker writes after EndTxn returns, by polling the end offset until it
holds (the deadline only bounds a failure; the clock never decides success), and aborts whatever
transaction it leaves open, so no later read_committed reader stalls on it.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Callable, Iterator, Sequence, TypeVar

import pytest
from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_exponential

from connectors.kafka.clients import (
    ConsumedRecord,
    KafkaClients,
    OffsetSpec,
    ProducerClient,
    ProducerIdentity,
    TopicPartition,
    TransactionControl,
)
from connectors.kafka.kafka_errors import (
    InvalidTxnStateError,
    OffsetOutOfRangeError,
    ProducerFencedError,
    RecordTooLargeError,
    RetriableKafkaError,
    TransactionalIdNotFoundError,
    UnknownTopicError,
)

#: ``names("label")`` gives a name (topic, transactional id, group) no other check or run uses.
NameFactory = Callable[[str], str]
ConformanceCheck = Callable[[KafkaClients, NameFactory], None]

T = TypeVar("T")

TXN_TIMEOUT_MS = 60_000
PRODUCER_CONFIG = {"transaction.timeout.ms": str(TXN_TIMEOUT_MS)}
TIMEOUT_S = 30.0
# Only bounds how long a broken broker is waited for; a passing run never gets near it.
_FAILURE_BOUND_S = 60.0


# -- helpers ------------------------------------------------------------------------------------


def create_topic(clients: KafkaClients, name: str, partitions: int = 1) -> TopicPartition:
    admin = clients.admin()
    try:
        admin.create_topic(name, partitions)
    finally:
        admin.close()
    return TopicPartition(name, 0)


def retrying(call: Callable[[], T]) -> T:
    """``call()``, again while it raises a RetriableKafkaError: the seam hands transient conditions
    (a partition leader not yet known to every broker just after CreateTopics, CONCURRENT_TRANSACTIONS
    while markers are written) to its callers, which retry them, as the source and the sink do."""
    return Retrying(retry=retry_if_exception_type(RetriableKafkaError), stop=stop_after_delay(_FAILURE_BOUND_S),
                    wait=wait_exponential(multiplier=0.02, max=0.5), reraise=True)(call)


def list_offsets(clients: KafkaClients, partitions: Sequence[TopicPartition], spec: OffsetSpec,
                 read_committed: bool = True) -> dict[TopicPartition, int]:
    admin = clients.admin()
    try:
        return retrying(lambda: admin.list_offsets(partitions, spec, read_committed=read_committed))
    finally:
        admin.close()


def end_offset(clients: KafkaClients, tp: TopicPartition, read_committed: bool = True) -> int:
    """The LSO under read_committed, else the high watermark."""
    return list_offsets(clients, [tp], "latest", read_committed)[tp]


def wait_for_end_offset(clients: KafkaClients, tp: TopicPartition, expected: int,
                        read_committed: bool = True) -> None:
    """EndTxn returns once the coordinator logged the decision; a real broker writes the markers,
    and so moves the LSO, a moment later. Polls until the end offset is ``expected``."""
    deadline = time.monotonic() + _FAILURE_BOUND_S
    while (current := end_offset(clients, tp, read_committed)) != expected:
        assert current < expected, f"{tp} end offset {current} went past the expected {expected}"
        assert time.monotonic() < deadline, f"{tp} end offset stuck at {current}, not {expected}"
        time.sleep(0.05)


def end_txn(control: TransactionControl, transactional_id: str, identity: ProducerIdentity,
            commit: bool) -> None:
    """EndTxn as the sink sends it: a retriable error (CONCURRENT_TRANSACTIONS while the markers of
    the previous EndTxn are being written, a coordinator moving) is retried; any other error is
    the answer."""
    retrying(lambda: control.end_txn(transactional_id, identity, commit))


def read_visible(clients: KafkaClients, tp: TopicPartition, read_committed: bool = True) -> list[ConsumedRecord]:
    """Every record the isolation level sees, from offset 0 to its end (the LSO or the HW)."""
    end = end_offset(clients, tp, read_committed)
    reader = clients.reader(read_committed=read_committed)
    try:
        return list(reader.read({tp: (0, end)}))
    finally:
        reader.close()


def read_range(clients: KafkaClients, tp: TopicPartition, start: int, end: int,
               read_committed: bool = True) -> list[ConsumedRecord]:
    reader = clients.reader(read_committed=read_committed)
    try:
        return list(reader.read({tp: (start, end)}))
    finally:
        reader.close()


def values_of(records: Sequence[ConsumedRecord]) -> list[bytes | None]:
    return [r.value for r in records]


def offsets_of(records: Sequence[ConsumedRecord]) -> list[int]:
    return [r.offset for r in records]


def open_transaction(clients: KafkaClients, transactional_id: str, topic: str, values: Sequence[bytes],
                     partition: int = 0) -> tuple[ProducerClient, ProducerIdentity]:
    """A producer with an open transaction holding ``values``, flushed (so on the broker)."""
    producer = clients.producer(transactional_id, PRODUCER_CONFIG)
    identity = producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value, partition=partition)
    producer.flush(TIMEOUT_S)
    return producer, identity


def leave_open(clients: KafkaClients, transactional_id: str, topic: str, values: Sequence[bytes],
               partition: int = 0) -> ProducerIdentity:
    """Open a transaction and close its producer: what a crashed task leaves for the driver."""
    producer, identity = open_transaction(clients, transactional_id, topic, values, partition)
    producer.close()
    return identity


def produce_plain(clients: KafkaClients, topic: str, values: Sequence[bytes], partition: int = 0) -> None:
    producer = clients.producer(None)
    try:
        for value in values:
            producer.produce(topic, value, partition=partition)
        producer.flush(TIMEOUT_S)
    finally:
        producer.close()


@contextmanager
def transactional_ids(clients: KafkaClients, names: NameFactory) -> Iterator[str]:
    """A transactional-id prefix for one check; whatever it leaves open is aborted afterwards, so
    that a shared broker's later read_committed readers do not stall on it."""
    prefix = names("txn") + "-"
    try:
        yield prefix
    finally:
        control = clients.txn_control()
        try:
            for txn in control.list_open_transactions(prefix):
                end_txn(control, txn.transactional_id, ProducerIdentity(txn.producer_id, txn.producer_epoch),
                        commit=False)
        finally:
            control.close()


def _raises_on_produce_or_flush(producer: ProducerClient, error: type[Exception], topic: str,
                                value: bytes, partition: int = 0) -> None:
    """The seam lets a producer report a refusal at ``produce`` or at the ``flush`` that waits for
    the broker's answer (librdkafka learns of some only then); either way it must surface."""
    with pytest.raises(error):
        producer.produce(topic, value, partition=partition)
        producer.flush(TIMEOUT_S)


# -- the facts ----------------------------------------------------------------------------------


def commit_by_another_client_makes_every_record_visible(clients: KafkaClients, names: NameFactory) -> None:
    """The two-phase commit: a task flushes and closes its producer (closing leaves the transaction
    open), the driver commits it with EndTxn knowing only (transactional id, producer id, epoch)."""
    tp = create_topic(clients, names("topic"))
    with transactional_ids(clients, names) as prefix:
        producer = clients.producer(prefix + "0", PRODUCER_CONFIG)
        identity = producer.init_transactions(TIMEOUT_S)
        producer.begin_transaction()
        for i in range(5):
            producer.produce(tp.topic, f"committed-{i}".encode(), key=str(i).encode(), partition=0,
                             headers=[("h", str(i).encode())])
        producer.flush(TIMEOUT_S)
        assert producer.identity() == identity
        producer.close()
        assert identity.producer_id >= 0 and identity.producer_epoch >= 0
        assert end_offset(clients, tp, read_committed=True) == 0  # the open transaction holds the LSO
        assert end_offset(clients, tp, read_committed=False) == 5
        assert read_visible(clients, tp) == []

        control = clients.txn_control()
        try:
            end_txn(control, prefix + "0", identity, commit=True)
        finally:
            control.close()
        wait_for_end_offset(clients, tp, 6)  # 5 records and the commit marker
        records = read_visible(clients, tp)
        assert values_of(records) == [f"committed-{i}".encode() for i in range(5)]
        assert [r.key for r in records] == [str(i).encode() for i in range(5)]
        assert [r.headers for r in records] == [(("h", str(i).encode()),) for i in range(5)]
        assert offsets_of(records) == [0, 1, 2, 3, 4]
        assert all(r.topic == tp.topic and r.partition == 0 and r.timestamp_ms > 0 for r in records)


def aborted_records_are_never_read_committed(clients: KafkaClients, names: NameFactory) -> None:
    """The faithfulness point: read_committed never returns an aborted record, whether the abort came
    from EndTxn of another client or from the producer itself; read_uncommitted still sees them."""
    tp = create_topic(clients, names("topic"))
    with transactional_ids(clients, names) as prefix:
        identity = leave_open(clients, prefix + "ended", tp.topic, [b"a0", b"a1", b"a2"])
        control = clients.txn_control()
        try:
            end_txn(control, prefix + "ended", identity, commit=False)
        finally:
            control.close()
        wait_for_end_offset(clients, tp, 4)  # 3 records and the abort marker
        producer, _ = open_transaction(clients, prefix + "own", tp.topic, [b"b0", b"b1"])
        producer.abort_transaction(TIMEOUT_S)
        producer.close()
        wait_for_end_offset(clients, tp, 7)
        produce_plain(clients, tp.topic, [b"kept"])

        assert end_offset(clients, tp, read_committed=True) == 8
        assert [(r.offset, r.value) for r in read_visible(clients, tp)] == [(7, b"kept")]
        assert [(r.offset, r.value) for r in read_visible(clients, tp, read_committed=False)] == [
            (0, b"a0"), (1, b"a1"), (2, b"a2"), (4, b"b0"), (5, b"b1"), (7, b"kept")]


def repeated_end_txn_succeeds_and_the_opposite_result_is_refused(clients: KafkaClients, names: NameFactory) -> None:
    """A driver that crashed after EndTxn resends it on recovery: the same result again is no error
    (also from a fresh client), the opposite result is INVALID_TXN_STATE, and only one marker is
    written."""
    with transactional_ids(clients, names) as prefix:
        for commit in (True, False):
            tp = create_topic(clients, names("topic"))
            tid = prefix + ("commit" if commit else "abort")
            identity = leave_open(clients, tid, tp.topic, [b"v0", b"v1", b"v2"])
            control = clients.txn_control()
            try:
                end_txn(control, tid, identity, commit=commit)
                # At once, the repeat may meet CONCURRENT_TRANSACTIONS (markers still being
                # written), which end_txn retries; the repeat itself succeeds.
                end_txn(control, tid, identity, commit=commit)
                wait_for_end_offset(clients, tp, 4)
                control.end_txn(tid, identity, commit=commit)
                with pytest.raises(InvalidTxnStateError):
                    end_txn(control, tid, identity, commit=not commit)
            finally:
                control.close()
            fresh = clients.txn_control()
            try:
                fresh.end_txn(tid, identity, commit=commit)
            finally:
                fresh.close()
            assert end_offset(clients, tp, read_committed=False) == 4  # one marker, however often resent
            assert values_of(read_visible(clients, tp)) == ([b"v0", b"v1", b"v2"] if commit else [])


def init_fences_the_old_producer_and_aborts_its_transaction(clients: KafkaClients, names: NameFactory) -> None:
    """InitProducerId on a transactional id aborts the id's open transaction and bumps the epoch of
    the same producer id; EndTxn with the old epoch is then PRODUCER_FENCED (never a silent success:
    the data is gone), while the new producer works normally."""
    tp = create_topic(clients, names("topic"))
    with transactional_ids(clients, names) as prefix:
        tid = prefix + "0"
        old = leave_open(clients, tid, tp.topic, [b"old0", b"old1", b"old2"])
        newer = clients.producer(tid, PRODUCER_CONFIG)
        try:
            new = newer.init_transactions(TIMEOUT_S)
            assert new.producer_id == old.producer_id
            assert new.producer_epoch > old.producer_epoch
            wait_for_end_offset(clients, tp, 4)  # the old records and the abort marker
            assert read_visible(clients, tp) == []

            control = clients.txn_control()
            try:
                assert control.list_open_transactions(tid) == []
                for commit in (True, False):
                    with pytest.raises(ProducerFencedError):
                        end_txn(control, tid, old, commit=commit)

                newer.begin_transaction()
                newer.produce(tp.topic, b"new", partition=0)
                newer.flush(TIMEOUT_S)
                end_txn(control, tid, newer.identity(), commit=True)
            finally:
                control.close()
        finally:
            newer.close()
        wait_for_end_offset(clients, tp, 6)
        assert [(r.offset, r.value) for r in read_visible(clients, tp)] == [(4, b"new")]


def end_txn_of_an_epoch_superseded_after_commit_is_fenced(clients: KafkaClients, names: NameFactory) -> None:
    """A resent EndTxn is recognised only until the id is initialised again: after that, even the
    commit that succeeded before is answered PRODUCER_FENCED, not success."""
    tp = create_topic(clients, names("topic"))
    with transactional_ids(clients, names) as prefix:
        tid = prefix + "0"
        identity = leave_open(clients, tid, tp.topic, [b"v"])
        control = clients.txn_control()
        try:
            end_txn(control, tid, identity, commit=True)
            wait_for_end_offset(clients, tp, 2)
            newer = clients.producer(tid, PRODUCER_CONFIG)
            try:
                newer.init_transactions(TIMEOUT_S)
            finally:
                newer.close()
            with pytest.raises(ProducerFencedError):
                end_txn(control, tid, identity, commit=True)
        finally:
            control.close()
        assert values_of(read_visible(clients, tp)) == [b"v"]


def a_fenced_producer_fails_with_producer_fenced(clients: KafkaClients, names: NameFactory) -> None:
    """A zombie task's producer, fenced by a newer one, can write nothing more: its produce (or the
    flush after it) and its abort fail with PRODUCER_FENCED, and its transaction is aborted."""
    tp = create_topic(clients, names("topic"))
    with transactional_ids(clients, names) as prefix:
        tid = prefix + "0"
        old = clients.producer(tid, PRODUCER_CONFIG)
        newer = clients.producer(tid, PRODUCER_CONFIG)
        try:
            with pytest.raises(InvalidTxnStateError):
                old.identity()  # no producer id before init_transactions
            old.init_transactions(TIMEOUT_S)
            old.begin_transaction()
            old.produce(tp.topic, b"before", partition=0)
            old.flush(TIMEOUT_S)
            newer.init_transactions(TIMEOUT_S)
            _raises_on_produce_or_flush(old, ProducerFencedError, tp.topic, b"after")
            with pytest.raises(ProducerFencedError):
                old.produce(tp.topic, b"again", partition=0)
            with pytest.raises(ProducerFencedError):
                old.abort_transaction(TIMEOUT_S)
        finally:
            old.close()
            newer.close()
        wait_for_end_offset(clients, tp, 2)  # "before" and the abort marker of the fencing
        assert read_visible(clients, tp) == []
        assert offsets_of(read_visible(clients, tp, read_committed=False)) == [0]


def lso_stops_at_the_open_transaction_and_markers_take_offsets(clients: KafkaClients, names: NameFactory) -> None:
    """The protocol's offset example: 5 aborted, 5 committed, 3 open records sit at offsets 0-4,
    6-10 and 12-14 (markers at 5 and 11); read_committed ends at the LSO 12, read_uncommitted at
    the HW 15, and ranges over markers and aborted records yield only what is visible."""
    tp = create_topic(clients, names("topic"))
    with transactional_ids(clients, names) as prefix:
        aborted, _ = open_transaction(clients, prefix + "aborted", tp.topic,
                                      [f"aborted-{i}".encode() for i in range(5)])
        aborted.abort_transaction(TIMEOUT_S)
        aborted.close()
        wait_for_end_offset(clients, tp, 6)  # later records must not overtake the marker
        committed = leave_open(clients, prefix + "committed", tp.topic, [f"committed-{i}".encode() for i in range(5)])
        control = clients.txn_control()
        try:
            end_txn(control, prefix + "committed", committed, commit=True)
        finally:
            control.close()
        wait_for_end_offset(clients, tp, 12)
        still_open, _ = open_transaction(clients, prefix + "open", tp.topic, [f"open-{i}".encode() for i in range(3)])
        try:
            assert list_offsets(clients, [tp], "latest", read_committed=True) == {tp: 12}
            assert list_offsets(clients, [tp], "latest", read_committed=False) == {tp: 15}
            assert list_offsets(clients, [tp], "earliest") == {tp: 0}

            reader = clients.reader(read_committed=True)
            try:
                records = list(reader.read({tp: (0, 12)}))
                assert offsets_of(records) == [6, 7, 8, 9, 10]
                assert values_of(records) == [f"committed-{i}".encode() for i in range(5)]
                # A range of aborted records only yields nothing and still completes.
                assert list(reader.read({tp: (0, 5)})) == []
                # Ranges ending on a marker or mid-way, on the same (reused) reader.
                assert offsets_of(list(reader.read({tp: (3, 7)}))) == [6]
                assert offsets_of(list(reader.read({tp: (8, 11)}))) == [8, 9, 10]
            finally:
                reader.close()
            assert offsets_of(read_range(clients, tp, 0, 15, read_committed=False)) == [
                0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 12, 13, 14]
        finally:
            still_open.abort_transaction(TIMEOUT_S)
            still_open.close()
        wait_for_end_offset(clients, tp, 16)
        assert offsets_of(read_visible(clients, tp)) == [6, 7, 8, 9, 10]


def open_transaction_holds_back_later_records_of_its_partition_only(clients: KafkaClients,
                                                                     names: NameFactory) -> None:
    """An open transaction stalls read_committed readers of its partitions, non-transactional
    records written after it included, until it ends; other partitions read on. When it ends the
    held-back records appear (with its own records if committed)."""
    topic = names("topic")
    create_topic(clients, topic, partitions=3)
    committed_tp, aborted_tp, other_tp = (TopicPartition(topic, p) for p in range(3))
    with transactional_ids(clients, names) as prefix:
        identities = {}
        for tp in (committed_tp, aborted_tp):
            produce_plain(clients, topic, [b"before"], partition=tp.partition)
            identities[tp] = leave_open(clients, f"{prefix}{tp.partition}", topic, [b"t0", b"t1"], tp.partition)
            produce_plain(clients, topic, [b"after"], partition=tp.partition)
        produce_plain(clients, topic, [b"free"], partition=other_tp.partition)

        for tp in (committed_tp, aborted_tp):
            assert end_offset(clients, tp, read_committed=True) == 1
            assert end_offset(clients, tp, read_committed=False) == 4
            assert values_of(read_visible(clients, tp)) == [b"before"]
        assert values_of(read_visible(clients, other_tp)) == [b"free"]

        control = clients.txn_control()
        try:
            end_txn(control, f"{prefix}{committed_tp.partition}", identities[committed_tp], commit=True)
            end_txn(control, f"{prefix}{aborted_tp.partition}", identities[aborted_tp], commit=False)
        finally:
            control.close()
        for tp in (committed_tp, aborted_tp):
            wait_for_end_offset(clients, tp, 5)  # the marker took offset 4
        assert [(r.offset, r.value) for r in read_visible(clients, committed_tp)] == [
            (0, b"before"), (1, b"t0"), (2, b"t1"), (3, b"after")]
        assert [(r.offset, r.value) for r in read_visible(clients, aborted_tp)] == [(0, b"before"), (3, b"after")]
        assert offsets_of(read_visible(clients, aborted_tp, read_committed=False)) == [0, 1, 2, 3]


def a_closed_producers_transaction_stays_open_and_is_listed(clients: KafkaClients, names: NameFactory) -> None:
    """Closing a producer does not abort its transaction; ListTransactions/DescribeTransactions
    report it (identity, partitions, timeout) until EndTxn, and the id stays known afterwards."""
    tp = create_topic(clients, names("topic"))
    with transactional_ids(clients, names) as prefix:
        tid = prefix + "0"
        before_ms = int(time.time() * 1000) - 60_000  # a bound, not a race: clocks of one host
        identity = leave_open(clients, tid, tp.topic, [f"v{i}".encode() for i in range(4)])
        control = clients.txn_control()
        try:
            (txn,) = control.list_open_transactions(tid)
            assert txn.transactional_id == tid
            assert (txn.producer_id, txn.producer_epoch) == (identity.producer_id, identity.producer_epoch)
            assert txn.state == "Ongoing"
            assert txn.partitions == frozenset({tp})
            assert txn.timeout_ms == TXN_TIMEOUT_MS
            assert txn.start_time_ms > before_ms
            assert end_offset(clients, tp, read_committed=True) == 0

            (listed,) = control.list_transactions(tid)
            assert (listed.transactional_id, listed.producer_id, listed.state) == (tid, identity.producer_id, "Ongoing")
            described = control.describe_transaction(tid)
            assert described is not None
            assert (described.producer_id, described.state) == (identity.producer_id, "Ongoing")
            assert control.describe_transaction(prefix + "never-used") is None

            end_txn(control, tid, identity, commit=False)
            assert control.list_open_transactions(tid) == []
            (listed,) = control.list_transactions(tid)
            assert listed.state in ("PrepareAbort", "CompleteAbort")
        finally:
            control.close()
        wait_for_end_offset(clients, tp, 5)
        assert read_visible(clients, tp) == []


def list_open_transactions_filters_by_prefix(clients: KafkaClients, names: NameFactory) -> None:
    """Recovery finds a sink's lingering transactions by its transactional-id prefix: ended ones and
    other prefixes are left out, each one found names its identity and partitions."""
    topic = names("topic")
    create_topic(clients, topic, partitions=2)
    both = frozenset({TopicPartition(topic, 0), TopicPartition(topic, 1)})
    with transactional_ids(clients, names) as prefix:
        identities: dict[str, ProducerIdentity] = {}
        for tid in (prefix + "a-0", prefix + "a-1", prefix + "a-2", prefix + "b-0"):
            producer, identities[tid] = open_transaction(clients, tid, topic, [b"x"], partition=0)
            producer.produce(topic, b"y", partition=1)
            producer.flush(TIMEOUT_S)
            producer.close()
        control = clients.txn_control()
        try:
            end_txn(control, prefix + "a-1", identities[prefix + "a-1"], commit=True)
            found = control.list_open_transactions(prefix + "a-")
            assert sorted(t.transactional_id for t in found) == [prefix + "a-0", prefix + "a-2"]
            for txn in found:
                assert ProducerIdentity(txn.producer_id, txn.producer_epoch) == identities[txn.transactional_id]
                assert txn.partitions == both
            assert {t.transactional_id for t in control.list_open_transactions(prefix)} == {
                prefix + "a-0", prefix + "a-2", prefix + "b-0"}
            assert control.list_open_transactions(prefix + "c-") == []
        finally:
            control.close()


def end_txn_for_an_unknown_id_or_producer_id_raises_transactional_id_not_found(
        clients: KafkaClients, names: NameFactory) -> None:
    """EndTxn for an id the broker has no state for, or with another producer id than the id's
    (INVALID_PRODUCER_ID_MAPPING), is the seam's TransactionalIdNotFoundError, and changes nothing."""
    tp = create_topic(clients, names("topic"))
    with transactional_ids(clients, names) as prefix:
        identity = leave_open(clients, prefix + "mine", tp.topic, [b"v"])
        control = clients.txn_control()
        try:
            with pytest.raises(TransactionalIdNotFoundError):
                control.end_txn(prefix + "never", ProducerIdentity(123456, 0), commit=True)
            with pytest.raises(TransactionalIdNotFoundError):
                control.end_txn(prefix + "mine", ProducerIdentity(identity.producer_id + 1,
                                                                          identity.producer_epoch), commit=True)
            assert len(control.list_open_transactions(prefix + "mine")) == 1
        finally:
            control.close()
        assert end_offset(clients, tp, read_committed=True) == 0


def end_txn_of_a_transaction_nothing_was_produced_in(clients: KafkaClients, names: NameFactory) -> None:
    """Beginning a transaction is local to the client: a producer that produced nothing never
    registered a partition, so the broker's state of the id is Empty. EndTxn(commit) of it is
    INVALID_TXN_STATE (the committer reads that as "nothing to commit"). EndTxn(abort) depends on the
    cluster's transaction version: with v2 (Kafka 4.4's default) it is accepted (the id goes to
    CompleteAbort, no marker is written, a resent abort succeeds and a commit after it is refused);
    with v1 (Kafka 3.9) it is INVALID_TXN_STATE too and the id stays Empty. The committer takes
    either as "nothing to abort", so the protocol does not depend on the difference; the fake
    follows v2, and the check holds each broker to one of the two whole behaviours."""
    tp = create_topic(clients, names("topic"))
    with transactional_ids(clients, names) as prefix:
        tid = prefix + "empty"
        producer = clients.producer(tid, PRODUCER_CONFIG)
        try:
            identity = producer.init_transactions(TIMEOUT_S)
            producer.begin_transaction()
            control = clients.txn_control()
            try:
                with pytest.raises(InvalidTxnStateError):
                    end_txn(control, tid, identity, commit=True)
                try:
                    end_txn(control, tid, identity, commit=False)
                except InvalidTxnStateError:
                    # Transactions v1 (Kafka 3.9; 4.x clusters without transaction.version=2):
                    # an Empty id refuses the abort too, and stays Empty.
                    (listed,) = control.list_transactions(tid)
                    assert listed.state == "Empty"
                else:
                    # Transactions v2: the abort is accepted, is accepted again, and rules out a commit.
                    end_txn(control, tid, identity, commit=False)
                    with pytest.raises(InvalidTxnStateError):
                        end_txn(control, tid, identity, commit=True)
                    (listed,) = control.list_transactions(tid)
                    assert listed.state in ("PrepareAbort", "CompleteAbort")
                assert control.list_open_transactions(tid) == []
            finally:
                control.close()
        finally:
            producer.close()
        assert end_offset(clients, tp, read_committed=False) == 0  # no marker without a partition


def unknown_topics_and_partitions_are_reported(clients: KafkaClients, names: NameFactory) -> None:
    """A missing topic or partition is UnknownTopicError for admin requests and for a produce to a
    partition the topic does not have (the source turns it into a clear error, not an empty read).
    Producing to a missing topic is left out: whether it is auto-created is broker configuration."""
    tp = create_topic(clients, names("topic"), partitions=2)
    missing = names("missing")
    admin = clients.admin()
    try:
        with pytest.raises(UnknownTopicError):
            admin.partitions(missing)
        with pytest.raises(UnknownTopicError):
            list_offsets(clients, [TopicPartition(missing, 0)], "latest")
        assert missing not in admin.list_topics()
    finally:
        admin.close()
    producer = clients.producer(None)
    try:
        _raises_on_produce_or_flush(producer, UnknownTopicError, tp.topic, b"v", partition=2)
    finally:
        producer.close()


def a_record_above_message_max_bytes_is_refused(clients: KafkaClients, names: NameFactory) -> None:
    """A record larger than the broker's message.max.bytes (1048588 by default) is refused with
    RecordTooLargeError, at produce or flush, and not written; smaller records are unaffected."""
    tp = create_topic(clients, names("topic"))
    producer = clients.producer(None)
    try:
        _raises_on_produce_or_flush(producer, RecordTooLargeError, tp.topic, b"x" * 2_000_000)
        producer.produce(tp.topic, b"y" * 100_000, partition=0)
        producer.flush(TIMEOUT_S)
    finally:
        producer.close()
    assert [len(r.value or b"") for r in read_visible(clients, tp, read_committed=False)] == [100_000]


def reading_past_the_end_of_the_log_is_offset_out_of_range(clients: KafkaClients, names: NameFactory) -> None:
    """A fetch from an offset beyond the log end is OFFSET_OUT_OF_RANGE (OffsetOutOfRangeError), not
    an empty read; the reader stays usable afterwards."""
    tp = create_topic(clients, names("topic"))
    produce_plain(clients, tp.topic, [b"only"])
    reader = clients.reader(read_committed=True)
    try:
        with pytest.raises(OffsetOutOfRangeError):
            list(reader.read({tp: (5, 7)}))
        assert values_of(list(reader.read({tp: (0, 1)}))) == [b"only"]
    finally:
        reader.close()


def offsets_for_timestamps(clients: KafkaClients, names: NameFactory) -> None:
    """ListOffsets by timestamp gives the first offset whose timestamp is >= it, and the end of the
    partition when no record is that late; records keep the producer's timestamps."""
    tp = create_topic(clients, names("topic"))
    base = int(time.time() * 1000) - 60_000  # inside the broker's accepted timestamp window
    producer = clients.producer(None)
    try:
        for i in range(4):
            producer.produce(tp.topic, f"t{i}".encode(), partition=0, timestamp_ms=base + i * 1000)
        producer.flush(TIMEOUT_S)
    finally:
        producer.close()
    assert list_offsets(clients, [tp], base - 1) == {tp: 0}
    assert list_offsets(clients, [tp], base) == {tp: 0}
    assert list_offsets(clients, [tp], base + 1500) == {tp: 2}
    assert list_offsets(clients, [tp], base + 3000) == {tp: 3}
    assert list_offsets(clients, [tp], base + 3_600_000) == {tp: 4}
    records = read_range(clients, tp, 1, 3)
    assert [(r.offset, r.value, r.timestamp_ms) for r in records] == [(1, b"t1", base + 1000), (2, b"t2", base + 2000)]


def group_offsets_commit(clients: KafkaClients, names: NameFactory) -> None:
    """Committing a consumer group's offsets (for lag monitoring) is accepted for existing
    partitions, repeatedly, and refused with UnknownTopicError for a missing topic."""
    topic = names("topic")
    create_topic(clients, topic, partitions=3)
    produce_plain(clients, topic, [b"a", b"b", b"c"])
    group = names("group")
    admin = clients.admin()
    try:
        admin.commit_group_offsets(group, {TopicPartition(topic, 0): 2, TopicPartition(topic, 2): 0})
        admin.commit_group_offsets(group, {TopicPartition(topic, 0): 3})
        with pytest.raises(UnknownTopicError):
            admin.commit_group_offsets(group, {TopicPartition(names("missing"), 0): 1})
    finally:
        admin.close()


def admin_topics_and_broker_config(clients: KafkaClients, names: NameFactory) -> None:
    """A created topic is listed with its partitions and empty logs; creating it again is no error
    (setup code reruns after a crash); the broker reports Kafka's defaults of the limits the sink
    checks, and None for a setting it does not know."""
    topic = names("topic")
    admin = clients.admin()
    try:
        admin.create_topic(topic, 3, {"retention.ms": "3600000"})
        admin.create_topic(topic, 3)
        assert topic in admin.list_topics()
        assert "__consumer_offsets" not in admin.list_topics()  # internal topics are left out
        assert admin.partitions(topic) == [0, 1, 2]
        partitions = [TopicPartition(topic, p) for p in range(3)]
        assert list_offsets(clients, partitions, "earliest") == dict.fromkeys(partitions, 0)
        assert list_offsets(clients, partitions, "latest") == dict.fromkeys(partitions, 0)
        assert admin.broker_config("transaction.max.timeout.ms") == "900000"
        assert admin.broker_config("message.max.bytes") == "1048588"
        assert admin.broker_config("no.such.setting") is None
    finally:
        admin.close()


#: Every fact, in the order of design/exactly-once-protocol.md, then the rest of the seam.
CHECKS: list[ConformanceCheck] = [
    commit_by_another_client_makes_every_record_visible,
    aborted_records_are_never_read_committed,
    repeated_end_txn_succeeds_and_the_opposite_result_is_refused,
    init_fences_the_old_producer_and_aborts_its_transaction,
    end_txn_of_an_epoch_superseded_after_commit_is_fenced,
    a_fenced_producer_fails_with_producer_fenced,
    lso_stops_at_the_open_transaction_and_markers_take_offsets,
    open_transaction_holds_back_later_records_of_its_partition_only,
    a_closed_producers_transaction_stays_open_and_is_listed,
    list_open_transactions_filters_by_prefix,
    end_txn_for_an_unknown_id_or_producer_id_raises_transactional_id_not_found,
    end_txn_of_a_transaction_nothing_was_produced_in,
    unknown_topics_and_partitions_are_reported,
    a_record_above_message_max_bytes_is_refused,
    reading_past_the_end_of_the_log_is_offset_out_of_range,
    offsets_for_timestamps,
    group_offsets_commit,
    admin_topics_and_broker_config,
]


def check_id(check: ConformanceCheck) -> str:
    """The pytest id of a check: its name, so a failure names the fact."""
    return check.__name__
