"""kafka-eos verify over the fake cluster: a faithful copy passes, and each kind of bad output
(crafted on purpose) is caught and counted."""

import json
import tracemalloc

import pytest

from connectors.simulated_kafka import FakeKafkaClients
from connectors.tools import verify as verify_module
from connectors.tools.loader import load_input
from connectors.tools.verify import IdSpec, verify
from connectors.tools.tool_errors import IdFieldError, IdSpecError, TopicNotFoundError
from kafka_testkit.topic_records import produce_committed

N = 300


def key_of(value: bytes) -> bytes:
    """Values here are JSON with an id, optionally followed by the copy job's suffix."""
    return str(json.JSONDecoder().raw_decode(value.decode())[0]["id"]).encode()


def value(i) -> bytes:
    return json.dumps({"id": i, "seq": i}).encode()


def copied(i) -> bytes:
    return value(i) + b"|copied"


@pytest.fixture
def fake(tmp_path):
    clients = FakeKafkaClients(tmp_path / "kafka.db")
    clients.admin().create_topic("in", 3)
    clients.admin().create_topic("out", 3)
    produce_committed(clients, "in", [value(i) for i in range(N // 2)], key_of=key_of, txn_id="in-1")
    produce_aborted(clients, "in", [value(f"aborted-{n}") for n in range(5)])
    produce_committed(clients, "in", [value(i) for i in range(N // 2, N)], key_of=key_of, txn_id="in-2")
    return clients


def produce_aborted(clients, topic, values, txn_id="aborter"):
    """An aborted transaction whose records are keyed by their id, like every other record here."""
    producer = clients.producer(txn_id, {})
    producer.init_transactions(10)
    producer.begin_transaction()
    for v in values:
        producer.produce(topic, v, key=key_of(v))
    producer.flush(10)
    producer.abort_transaction(10)
    producer.close()


def write_output(fake, ids, *, txn_id="out-1", value_of=copied):
    produce_committed(fake, "out", [value_of(i) for i in ids], key_of=key_of, txn_id=txn_id)


def write_plain(fake, ids, topic="out"):
    """Non-transactional writes: visible to read_committed at once, like a record of an aborted
    transaction that a broken broker would let through."""
    producer = fake.producer(None, {})
    for i in ids:
        producer.produce(topic, copied(i), key=str(i).encode())
    producer.flush(10)


def test_a_faithful_copy_is_exactly_once(fake):
    write_output(fake, range(N))
    produce_aborted(fake, "out", [copied(i) for i in range(10)])  # aborted attempts are invisible

    report = verify(fake, "in", "out")

    assert report.exactly_once, report.summary_lines()
    assert report.counts["input_records"] == N
    assert report.counts["input_uncommitted_only"] == 5
    assert report.counts["output_records"] == N
    assert report.counts["output_uncommitted_only"] == 10
    assert all(a.records == 0 for a in report.anomalies.values())
    assert report.summary_lines()[0].startswith("EXACTLY-ONCE")


def test_matches_by_json_field_even_with_a_suffix_after_the_json(fake):
    write_output(fake, range(N))
    report = verify(fake, "in", "out", id_spec="json:id")
    assert report.exactly_once, report.summary_lines()


def test_duplicates_are_counted_per_extra_copy(fake):
    write_output(fake, range(N))
    write_output(fake, [7, 7, 42], txn_id="out-2")

    report = verify(fake, "in", "out")

    assert not report.exactly_once
    dup = report.anomalies["duplicates"]
    assert (dup.ids, dup.records) == (2, 3)
    assert {s["id"]: s["output_copies"] for s in dup.samples} == {"7": 3, "42": 2}
    assert report.count("lost_writes") == 0


def test_lost_writes_say_whether_they_were_written_but_never_committed(fake):
    write_output(fake, [i for i in range(N) if i not in (3, 150, 299)])
    produce_aborted(fake, "out", [copied(150)])  # written, then aborted: still lost

    report = verify(fake, "in", "out")

    lost = report.anomalies["lost_writes"]
    assert (lost.ids, lost.records) == (3, 3)
    by_id = {s["id"]: s for s in lost.samples}
    assert set(by_id) == {"3", "150", "299"}
    assert by_id["150"]["written_but_not_committed"] == 1
    assert by_id["3"]["written_but_not_committed"] == 0
    assert report.count("duplicates") == 0
    assert any("never committed" in w for w in report.warnings)


def test_aborted_input_records_in_the_output_are_aborted_reads(fake):
    write_output(fake, range(N))
    # Stand-in for a pipeline that read its input with read_uncommitted: it passed on records of
    # the input's aborted transaction.
    producer = fake.producer(None, {})
    for n in (0, 3):
        producer.produce("out", copied(f"aborted-{n}"), key=f"aborted-{n}".encode())
    producer.flush(10)

    report = verify(fake, "in", "out")

    aborted = report.anomalies["aborted_reads"]
    assert (aborted.ids, aborted.records) == (2, 2)
    assert aborted.jepsen_name == "aborted-read"
    assert {s["id"] for s in aborted.samples} == {"aborted-0", "aborted-3"}
    assert report.count("unexpected") == 0
    assert not report.exactly_once


def test_a_leaked_record_of_an_aborted_output_transaction_shows_as_a_duplicate(fake):
    write_output(fake, range(N))
    write_plain(fake, [11])  # the replayed copy that should have stayed aborted

    report = verify(fake, "in", "out")

    assert report.anomalies["duplicates"].ids == 1
    assert not report.exactly_once


def test_ids_that_are_nowhere_in_the_input_are_unexpected(fake):
    write_output(fake, range(N))
    write_output(fake, ["ghost"], txn_id="out-2")

    report = verify(fake, "in", "out")

    unexpected = report.anomalies["unexpected"]
    assert (unexpected.ids, unexpected.records) == (1, 1)
    assert unexpected.samples == [{"id": "ghost", "output_copies": 1}]
    assert report.count("aborted_reads") == 0
    assert not report.exactly_once


def test_order_violations_only_when_asked(tmp_path):
    fake = FakeKafkaClients(tmp_path / "kafka.db")
    fake.admin().create_topic("in", 1)
    fake.admin().create_topic("out", 1)
    produce_committed(fake, "in", [value(i) for i in range(20)], key_of=key_of, txn_id="in")
    swapped = list(range(20))
    swapped[5], swapped[6] = swapped[6], swapped[5]
    produce_committed(fake, "out", [copied(i) for i in swapped], key_of=key_of, txn_id="out")

    unchecked = verify(fake, "in", "out")
    checked = verify(fake, "in", "out", check_order=True)

    assert unchecked.exactly_once and not unchecked.anomalies["order_violations"].checked
    order = checked.anomalies["order_violations"]
    assert order.records == 1
    assert order.samples[0]["id"] == "5" and order.samples[0]["previous_input_offset"] > order.samples[0]["input_offset"]
    assert not checked.exactly_once


def test_in_order_output_has_no_order_violations(tmp_path):
    fake = FakeKafkaClients(tmp_path / "kafka.db")
    fake.admin().create_topic("in", 2)
    fake.admin().create_topic("out", 2)
    produce_committed(fake, "in", [value(i) for i in range(50)], key_of=key_of, txn_id="in")
    produce_committed(fake, "out", [copied(i) for i in range(50)], key_of=key_of, txn_id="out")
    assert verify(fake, "in", "out", check_order=True).exactly_once


def test_an_open_output_transaction_is_a_warning_and_its_records_are_not_counted(fake):
    write_output(fake, range(N))
    producer = fake.producer("stuck", {})
    producer.init_transactions(10)
    producer.begin_transaction()
    for i in range(3):
        producer.produce("out", copied(i), key=str(i).encode(), partition=0)
    producer.flush(10)  # left open

    report = verify(fake, "in", "out")

    assert report.exactly_once
    assert report.counts["output_uncommitted_only"] == 3
    assert any("open transaction" in w and "out-0" in w for w in report.warnings)


def test_output_records_without_an_id_fail_the_check(fake):
    write_output(fake, range(N))
    producer = fake.producer(None, {})
    producer.produce("out", b"no key")
    producer.flush(10)

    report = verify(fake, "in", "out")

    assert report.counts["output_unidentified"] == 1
    assert not report.exactly_once


def test_an_id_field_no_input_record_has_is_a_clear_error(fake):
    write_output(fake, range(N))
    with pytest.raises(IdFieldError, match="json:nope.*first: in-"):
        verify(fake, "in", "out", id_spec="json:nope")


def test_missing_topics_are_a_clear_error(fake):
    with pytest.raises(TopicNotFoundError, match="'missing' does not exist"):
        verify(fake, "in", "missing")
    with pytest.raises(TopicNotFoundError, match="'nope' does not exist"):
        verify(fake, "nope", "out")


def test_ids_from_headers(tmp_path):
    fake = FakeKafkaClients(tmp_path / "kafka.db")
    for topic in ("in", "out"):
        fake.admin().create_topic(topic, 1)
    for topic, ids in (("in", range(10)), ("out", [*range(9), 4])):
        producer = fake.producer(None, {})
        for i in ids:
            producer.produce(topic, b"opaque", headers=[("trace", b"x"), ("rid", str(i).encode())])
        producer.flush(10)
    report = verify(fake, "in", "out", id_spec="header:rid")
    assert report.anomalies["duplicates"].samples[0]["id"] == "4"
    assert report.anomalies["lost_writes"].samples[0]["id"] == "9"


@pytest.mark.parametrize("spec, kind, name", [
    ("key", "key", ""), ("json:id", "json", "id"), ("json:meta.id", "json", "meta.id"),
    ("header:rid", "header", "rid"),
])
def test_id_spec_parses(spec, kind, name):
    parsed = IdSpec.parse(spec)
    assert (parsed.kind, parsed.name, str(parsed)) == (kind, name, spec)


@pytest.mark.parametrize("spec", ["", "keys", "json", "json:", "header:", "field:x", "JSON:id"])
def test_malformed_id_specs_are_refused_with_the_valid_forms(spec):
    with pytest.raises(IdSpecError, match="key.*json:<field>.*header:<name>"):
        IdSpec.parse(spec)


def test_an_empty_json_path_part_is_refused():
    with pytest.raises(IdSpecError, match="empty part"):
        IdSpec.parse("json:a..b")


def test_json_ids_are_normalised_like_keys():
    from connectors.kafka.clients import ConsumedRecord

    def record(value):
        return ConsumedRecord("t", 0, 0, None, value, 0)

    spec = IdSpec.parse("json:meta.id")
    assert spec.extract(record(b'{"meta": {"id": 42}}')) == b"42"
    assert spec.extract(record(b'{"meta": {"id": "abc"}} trailing')) == b"abc"
    for bad in (b"not json", b'{"meta": {"id": null}}', b'{"meta": 1}', None):
        with pytest.raises(Exception, match="JSON|value"):
            spec.extract(record(bad))


def test_200k_records_are_verified_in_one_streaming_pass_per_topic(tmp_path):
    """Scale: 200k input and output records with a few anomalies among them, all found. The
    checks are indexed SQL joins, so this is not quadratic (it takes seconds, not hours)."""
    fake = FakeKafkaClients(tmp_path / "kafka.db")
    load_input(fake, "in", 200_000, partitions=4, aborted=0, transaction_size=50_000)
    fake.admin().create_topic("out", 4)
    producer = fake.producer(None, {})
    for i in range(200_000):
        if i in (17, 123_456):
            continue  # lost
        copies = 2 if i in (5, 199_999) else 1
        for _ in range(copies):
            producer.produce("out", b"x", key=str(i).encode())
        if i % 50_000 == 0:
            producer.flush(60)
    producer.flush(60)

    report = verify(fake, "in", "out", work_dir=tmp_path)

    assert report.counts["input_records"] == 200_000
    assert report.counts["output_records"] == 200_000
    assert report.anomalies["lost_writes"].records == 2
    assert report.anomalies["duplicates"].records == 2
    assert {s["id"] for s in report.anomalies["duplicates"].samples} == {"5", "199999"}
    assert list(tmp_path.glob("kafka-eos-verify-*")) == []  # the scratch database is gone


def test_memory_does_not_grow_with_the_number_of_records(tmp_path, monkeypatch):
    """Ids live in SQLite, not in Python: with rows handed to SQLite 1000 at a time, the Python
    heap's peak during verify is about the same for 4k and for 40k records (a set of 40k ids
    alone would add megabytes)."""
    monkeypatch.setattr(verify_module, "_BATCH", 1000)
    peaks = []
    for n in (4_000, 40_000):
        fake = FakeKafkaClients(tmp_path / f"kafka-{n}.db")
        load_input(fake, "in", n, partitions=2, aborted=0, transaction_size=n)
        tracemalloc.start()
        try:
            assert verify(fake, "in", "in").exactly_once
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
    assert peaks[1] < peaks[0] * 1.3, peaks


def test_transient_broker_errors_are_retried(fake):
    write_output(fake, range(N))
    fake.inject_errors("list_offsets", "NOT_LEADER_OR_FOLLOWER", count=2)  # a topic just created
    assert verify(fake, "in", "out").exactly_once


def test_transient_errors_are_what_kafka_classifies_retriable():
    """Whatever client met it, an error code Kafka deems transient (a leader moved, a leader epoch
    not known yet in a rolling restart) is retried; a missing topic is not."""
    from connectors.kafka.clients.error_table import kafka_error
    from connectors.kafka.kafka_errors import UnknownTopicError
    from connectors.servers.broker_discovery import is_transient, retry_transient

    assert is_transient(kafka_error(6, "NOT_LEADER_OR_FOLLOWER", "admin: list offsets of t-0"))
    assert is_transient(kafka_error(75, "UNKNOWN_LEADER_EPOCH", "admin: list offsets of t-0"))
    assert not is_transient(UnknownTopicError("UNKNOWN_TOPIC_OR_PARTITION: topic 't' does not exist"))
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise kafka_error(75, "UNKNOWN_LEADER_EPOCH", "admin: list offsets of t-0")
        return "ok"

    assert retry_transient(flaky, "test") == "ok" and len(calls) == 3


def test_a_read_that_fails_transiently_is_read_again_from_scratch(fake):
    write_output(fake, range(N))
    fake.inject_errors("read", "NETWORK_EXCEPTION", count=2)
    report = verify(fake, "in", "out")
    assert report.exactly_once
    assert report.counts["input_records"] == N and report.counts["output_records"] == N
