"""kafka-eos verify has one streaming core: the copy and every --shape read their topics through the
same pass into the same kind of SQLite store, are checked by SQL there, and report in one report
class. Each shape's anomalies are found through the topics (fake cluster), and the shape path holds
no record, and no key, in Python."""

import json
import tracemalloc
from collections import Counter

import pytest

from connectors.simulated_kafka import FakeKafkaClients
from connectors.tools import shape_checks
from connectors.tools import verify as verify_module
from connectors.tools.anomaly import AnomalyReport
from connectors.tools.loader import load_input
from connectors.tools.shape_checks import InputRecord, OutputRecord, ShapeReport
from connectors.tools.tool_errors import IdFieldError
from connectors.tools.verify import VerifyReport, verify, verify_shape
from kafka_testkit.topic_records import produce_committed
from twophase.errors import InvalidValueError

N = 40
GROUPS = ("g0", "g1", "g2", "g3")
LENGTH = 10.0  # the tumbling window of the windowed outputs, in seconds of event time


def group(i: int) -> str:
    return GROUPS[i % len(GROUPS)]


def window(i: int) -> tuple[float, float]:
    start = i // LENGTH * LENGTH
    return start, start + LENGTH


@pytest.fixture
def fake(tmp_path):
    clients = FakeKafkaClients(tmp_path / "kafka.db")
    for topic in ("in", "out", "right"):
        clients.admin().create_topic(topic, 2)
    values = [json.dumps({"id": i, "g": group(i), "ts": i}).encode() for i in range(N)]
    produce_committed(clients, "in", values, key_of=lambda v: str(json.loads(v)["id"]).encode(), txn_id="in")
    right = [json.dumps({"g": g}).encode() for g in ("g0", "g1", "g1", "zz")]
    produce_committed(clients, "right", right, key_of=lambda v: json.loads(v)["g"].encode(), txn_id="right")
    return clients


def write(clients, records):
    """(key, value) records, each key's in one partition, in this order."""
    producer = clients.producer(None, {})
    for key, value in records:
        producer.produce("out", json.dumps(value).encode() if value is not None else b"not json", key=key.encode(),
                         partition=GROUPS.index(key) % 2 if key in GROUPS else 0)
    producer.flush(10)


def running():
    counts: Counter = Counter()
    for i in range(N):
        counts[group(i)] += 1
        yield group(i), {"key": group(i), "count": counts[group(i)]}


def complete():
    counts: Counter = Counter()
    for batch in range(0, N, 10):
        counts.update(group(i) for i in range(batch, batch + 10))
        yield from ((g, {"key": g, "count": counts[g]}) for g in GROUPS)
    yield from ((g, {"key": g, "count": counts[g]}) for g in GROUPS)  # a batch with no new input: unchanged


def windowed():
    counts = Counter((group(i), window(i)) for i in range(N))
    for (g, (start, end)), n in sorted(counts.items()):
        yield g, {"key": g, "window": {"start": start, "end": end}, "count": n}


def windowed_running():
    counts: Counter = Counter()
    for i in range(N):
        counts[group(i), window(i)] += 1
        start, end = window(i)
        yield group(i), {"key": group(i), "window": {"start": start, "end": end}, "count": counts[group(i), window(i)]}


def dedup():
    return [(g, {"id": GROUPS.index(g), "g": g}) for g in GROUPS]


def joined():
    # g0 has 1 right record, g1 has 2 (zz has no left one): 10 and 20 pairs.
    return [(g, {"g": g}) for g, rights in (("g0", 1), ("g1", 2)) for _ in range(10 * rights)]


RIGHT_OUTPUT = {"running-count": running, "complete-count": complete, "windowed-count": windowed,
                "windowed-running-count": windowed_running, "dedup": dedup, "join": joined}


def check(clients, shape, **options):
    return verify_shape(clients, "in", "out", shape, id_spec="json:g", event_time="json:ts",
                        right_input_topic="right" if shape == "join" else None, **options)


def found(report):
    return {name: a.records for name, a in report.anomalies.items() if a.records}


@pytest.mark.parametrize("shape", shape_checks.SHAPES)
def test_every_shape_passes_on_its_right_output_read_from_the_topics(fake, tmp_path, shape):
    write(fake, RIGHT_OUTPUT[shape]())
    report = check(fake, shape, work_dir=tmp_path)
    assert report.exactly_once, report.summary_lines()
    assert report.counts["input_records"] == N + (4 if shape == "join" else 0)
    assert report.counts["input_keys"] == 4 + (1 if shape == "join" else 0)
    assert list(tmp_path.glob("kafka-eos-verify-*")) == []  # the scratch store is gone


def twice_last_of(key, records):
    records = list(records)
    last = max(i for i, (k, _) in enumerate(records) if k == key)
    return records + [records[last]]


@pytest.mark.parametrize("shape, output, expected", [
    ("running-count", lambda: twice_last_of("g0", running()), {"duplicates": 1}),  # a count repeated
    ("running-count", lambda: [r for r in running() if r[0] != "g3"], {"lost_writes": 10}),  # a key lost
    ("running-count", lambda: [*running(), ("g9", {"key": "g9", "count": 1})], {"unexpected": 1}),
    ("running-count", lambda: [r for r in running() if r[1]["count"] != 10 or r[0] != "g2"], {"wrong_counts": 1}),
    # A batch replayed: the count falls back, then rises to the right last count.
    ("complete-count", lambda: [*complete(), ("g0", {"key": "g0", "count": 5}), ("g0", {"key": "g0", "count": 10})],
     {"duplicates": 1}),
    ("windowed-count", lambda: twice_last_of("g1", windowed()), {"duplicates": 1}),  # a window written twice
    ("windowed-count", lambda: [r for r in windowed() if (r[0], r[1]["window"]["start"]) != ("g2", 10)],
     {"lost_writes": 3}),
    ("windowed-running-count", lambda: twice_last_of("g3", windowed_running()), {"duplicates": 1}),
    ("dedup", lambda: [*dedup()[:3], dedup()[0]], {"duplicates": 1, "lost_writes": 1}),
    ("join", lambda: [*joined(), joined()[0]], {"duplicates": 1}),
])
def test_each_shapes_anomalies_are_found_through_the_topics(fake, shape, output, expected):
    write(fake, output())
    report = check(fake, shape)
    assert found(report) == expected, report.summary_lines()
    assert not report.exactly_once


def test_a_repeated_count_is_shown_with_where_it_was_written(fake):
    write(fake, twice_last_of("g0", running()))
    sample = check(fake, "running-count").anomalies["duplicates"].samples[0]
    # g0 is in partition 0 with g2: 20 records, the repeated one last, at offset 20.
    assert sample == {"key": "g0", "counts": list(range(1, 11)) + [10], "partition": 0, "offset": 20}


def test_copy_and_every_shape_read_through_the_one_streaming_pass(fake, monkeypatch):
    passes = []
    scan = verify_module._scan

    def spy(clients, snapshot, read_committed, row_of, store, table, progress):
        passes.append((snapshot.topic, read_committed, table))
        return scan(clients, snapshot, read_committed, row_of, store, table, progress)

    monkeypatch.setattr(verify_module, "_scan", spy)
    write(fake, joined())
    check(fake, "join")
    assert passes == [("in", True, shape_checks.INPUT), ("right", True, shape_checks.RIGHT),
                      ("out", True, shape_checks.OUTPUT)]
    passes.clear()
    verify(fake, "in", "in")
    assert passes == [("in", True, "in_c"), ("in", False, "in_u"), ("in", True, "out_c"), ("in", False, "out_u")]


def test_the_shape_path_holds_no_record_and_no_key_in_python(tmp_path, monkeypatch):
    """As for a copy (test_verify.py): with rows handed to the store 1000 at a time, the Python
    heap's peak while checking a running count of n distinct keys is about the same for 4k and for
    40k (a list of the records, or a Counter of the keys, would grow tenfold)."""
    monkeypatch.setattr(verify_module, "_BATCH", 1000)
    peaks = []
    for n in (4_000, 40_000):
        fake = FakeKafkaClients(tmp_path / f"kafka-{n}.db")
        load_input(fake, "in", n, partitions=2, aborted=0, transaction_size=n)
        fake.admin().create_topic("out", 2)
        keys = (str(i).encode() for i in range(n))
        produce_committed(fake, "out", (b'{"count":1}' for _ in range(n)), txn_id="out", key_of=lambda _: next(keys))
        tracemalloc.start()
        try:
            report = verify_shape(fake, "in", "out", "running-count", id_spec="json:id")
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
        assert report.exactly_once and report.counts["output_keys"] == n, report.summary_lines()
    assert peaks[1] < peaks[0] * 1.3, peaks


def test_one_report_class_for_a_copy_and_a_shape(fake):
    assert VerifyReport is ShapeReport is AnomalyReport
    copy = verify(fake, "in", "in")
    assert copy.shape is None and "shape" not in copy.to_json()
    assert copy.summary_lines()[1].startswith(f"input: {N} committed records ({N} distinct ids)")
    empty = check(fake, "dedup")
    data = empty.to_json()
    assert data["shape"] == "dedup" and data["exactly_once"] is False
    lines = empty.summary_lines()
    assert lines[0].startswith("NOT EXACTLY-ONCE: in -> out") and "shape dedup" in lines[0]
    assert "the output holds no committed record: nothing shows the query ran" in lines
    assert "lost writes [lost-write]: 4 keys, 4 records" in lines


def test_an_output_value_the_shape_cannot_read_is_counted_not_fatal(fake):
    write(fake, [*running(), ("g0", None)])
    report = check(fake, "running-count")
    assert report.counts["output_unidentified"] == 1 and report.counts["output_records"] == N + 1
    assert not report.exactly_once
    assert any("cannot be read as the shape running-count" in w for w in report.warnings)


def test_a_key_no_input_record_has_is_a_clear_error(fake):
    write(fake, dedup())
    with pytest.raises(IdFieldError, match="no record of 'in' has a key at json:nope"):
        verify_shape(fake, "in", "out", "dedup", id_spec="json:nope")


def test_a_keys_counts_are_in_partition_then_offset_order():
    inputs = [InputRecord("k")] * 10
    in_order = [OutputRecord(1, 3, "k", {"count": 10}), OutputRecord(0, 9, "k", {"count": 4})]
    assert found(shape_checks.running_counts(inputs, in_order)) == {}
    # The last count is the one of the highest partition, whatever the offsets: here 4, after 10.
    reversed_ = [OutputRecord(0, 3, "k", {"count": 10}), OutputRecord(1, 1, "k", {"count": 4})]
    assert found(shape_checks.running_counts(inputs, reversed_)) == {"duplicates": 1, "wrong_counts": 1}


def test_windowed_inputs_need_an_event_time_and_windows_one_length():
    written = [OutputRecord(0, 1, "k", {"window": {"start": 0, "end": 10}, "count": 1})]
    with pytest.raises(InvalidValueError, match="input record of key 'k' has no event time"):
        shape_checks.windowed_counts([InputRecord("k")], written)
    two_lengths = [*written, OutputRecord(0, 2, "k", {"window": {"start": 10, "end": 30}, "count": 1})]
    with pytest.raises(InvalidValueError, match=r"windows of several lengths \[10.0, 20.0\]"):
        shape_checks.windowed_counts([InputRecord("k", 1.0)], two_lengths)
