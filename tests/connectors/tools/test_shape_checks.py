"""kafka-eos verify --shape: each stateful shape's invariant passes on a right output and fails on
a crafted duplicate, loss and wrong count; on the fake cluster end to end through the CLI."""

import json
from collections import Counter

import pytest

from connectors.simulated_kafka import FakeKafkaClients
from connectors.tools import shape_checks
from connectors.tools.cli import main
from connectors.tools.shape_checks import InputRecord, OutputRecord
from connectors.tools.tool_errors import UsageError
from connectors.tools.verify import verify_shape
from kafka_testkit.topic_records import produce_committed

INPUTS = [InputRecord(f"g{i % 3}", time=float(i)) for i in range(30)]  # 10 per group, times 0..29


def out(key, value, partition=0, offset=[0]):  # noqa: B006 - a running offset across a test's records
    offset[0] += 1
    return OutputRecord(partition, offset[0], key, value)


def running(batches):
    """Update-mode output: per batch, each group's count so far (groups that changed)."""
    counts: Counter = Counter()
    records = []
    for batch in batches:
        counts.update(r.key for r in batch)
        for key in sorted({r.key for r in batch}):
            records.append(out(key, {"key": key, "count": counts[key]}))
    return records


def anomalies(result):
    return {name: a.records for name, a in result.anomalies.items() if a.records}


# -- running-count -------------------------------------------------------------------------------

def test_running_count_passes_on_update_output():
    output = running([INPUTS[:12], INPUTS[12:20], INPUTS[20:]])
    assert anomalies(shape_checks.running_counts(INPUTS, output)) == {}


def test_running_count_catches_a_batch_written_twice():
    output = running([INPUTS[:12], INPUTS[12:20], INPUTS[20:]])
    replayed = output[:3] + output[3:6] + output[3:6] + output[6:]  # batch 2 again, as a lost commit's retry
    result = shape_checks.running_counts(INPUTS, replayed)
    assert anomalies(result) == {"duplicates": 3}
    assert result.anomalies["duplicates"].samples[0]["counts"][:3] == [4, 7, 7]


def test_running_count_catches_state_restored_to_an_older_batch():
    # Batch 2's input applied twice to the state: counts still rise but end too high.
    output = running([INPUTS[:12], INPUTS[12:20], INPUTS[12:20], INPUTS[20:]])
    assert anomalies(shape_checks.running_counts(INPUTS, output)) == {"wrong_counts": 3}


def test_running_count_catches_a_lost_batch_and_a_lost_key():
    output = running([INPUTS[:12], INPUTS[20:]])  # batch 2 lost: the last counts are too low
    assert anomalies(shape_checks.running_counts(INPUTS, output)) == {"wrong_counts": 3}
    only_two = [r for r in running([INPUTS]) if r.key != "g2"]
    result = shape_checks.running_counts(INPUTS, only_two)
    assert anomalies(result) == {"lost_writes": 10}


def test_running_count_catches_a_key_no_input_has():
    output = running([INPUTS]) + [out("g9", {"key": "g9", "count": 1})]
    assert anomalies(shape_checks.running_counts(INPUTS, output)) == {"unexpected": 1}


def test_complete_count_allows_unchanged_counts_but_not_falling_ones():
    complete = [out(k, {"key": k, "count": n}) for k, n in [("g0", 4), ("g1", 4), ("g0", 4), ("g1", 10),
                                                              ("g0", 10)]]
    inputs = [r for r in INPUTS if r.key != "g2"]
    assert anomalies(shape_checks.running_counts(inputs, complete, strictly=False)) == {}
    assert anomalies(shape_checks.running_counts(inputs, complete, strictly=True)) == {"duplicates": 1}
    falling = complete + [out("g0", {"key": "g0", "count": 4}), out("g0", {"key": "g0", "count": 10})]
    assert anomalies(shape_checks.running_counts(inputs, falling, strictly=False)) == {"duplicates": 1}


def test_order_is_per_partition_offset_not_arrival():
    output = [OutputRecord(1, 7, "g0", {"count": 10}), OutputRecord(1, 3, "g0", {"count": 4})]
    inputs = [r for r in INPUTS if r.key == "g0"]
    assert anomalies(shape_checks.running_counts(inputs, output)) == {}


# -- windowed-count ------------------------------------------------------------------------------

def windows(inputs, length=10.0, closed_before=30.0):
    counts = Counter((r.key, (r.time // length) * length) for r in inputs)
    return [out(k, {"key": k, "window": {"start": s, "end": s + length}, "count": n})
            for (k, s), n in sorted(counts.items()) if s + length <= closed_before]


def test_windowed_count_passes_and_leaves_open_windows_unchecked():
    result = shape_checks.windowed_counts(INPUTS, windows(INPUTS, closed_before=20))
    assert anomalies(result) == {}
    assert "still open" in result.warnings[0]


def test_windowed_count_catches_a_window_twice_a_wrong_count_and_a_lost_window():
    written = windows(INPUTS)
    assert anomalies(shape_checks.windowed_counts(INPUTS, written + written[:1])) == {"duplicates": 1}
    wrong = [*written[:-1], out(written[-1].key, {**written[-1].value, "count": 99})]
    assert anomalies(shape_checks.windowed_counts(INPUTS, wrong)) == {"wrong_counts": 1}
    # A lost window before the last one written is a loss, not an open window.
    assert anomalies(shape_checks.windowed_counts(INPUTS, written[1:])) == {"lost_writes": 4}


def test_windowed_count_takes_iso_window_bounds():
    written = [out("g0", {"window": {"start": "1970-01-01T00:00:00+00:00", "end": "1970-01-01T00:00:10+00:00"},
                          "count": 4})]
    assert anomalies(shape_checks.windowed_counts([r for r in INPUTS if r.key == "g0" and r.time < 10],
                                                  written)) == {}


def test_windowed_running_count_rises_per_window():
    first = [r for r in INPUTS if r.time < 5]
    written = windows(first) + windows(INPUTS)
    assert anomalies(shape_checks.windowed_running_counts(INPUTS, written)) == {}
    assert anomalies(shape_checks.windowed_running_counts(INPUTS, written + windows(INPUTS)[:1]))["duplicates"] == 1


# -- dedup and join ------------------------------------------------------------------------------

def test_dedup_each_key_once():
    inputs = [InputRecord(str(i % 7)) for i in range(30)]
    once = [out(str(k), None) for k in range(7)]
    assert anomalies(shape_checks.deduplicated(inputs, once)) == {}
    assert anomalies(shape_checks.deduplicated(inputs, once + once[:2])) == {"duplicates": 2}
    assert anomalies(shape_checks.deduplicated(inputs, once[1:])) == {"lost_writes": 1}
    assert anomalies(shape_checks.deduplicated(inputs, once + [out("x", None)])) == {"unexpected": 1}


def test_join_each_pair_once():
    left = [InputRecord(f"o{i}") for i in range(10)]
    right = [InputRecord(f"o{i}") for i in range(0, 10, 2)] + [InputRecord("o2"), InputRecord("zz")]
    pairs = [out(k, None) for k in ["o0", "o2", "o2", "o4", "o6", "o8"]]  # o2 has two right records
    assert anomalies(shape_checks.joined(left, right, pairs)) == {}
    assert anomalies(shape_checks.joined(left, right, pairs + pairs[:1])) == {"duplicates": 1}
    assert anomalies(shape_checks.joined(left, right, pairs[:2] + pairs[3:])) == {"lost_writes": 1}


def test_a_shape_that_is_not_one_is_refused_in_one_line_naming_the_valid_ones():
    with pytest.raises(UsageError, match=r"'rolling' is not a shape: use one of running-count, complete-count, "
                                         r"windowed-count, windowed-running-count, dedup, join$"):
        shape_checks.check_shape_name("rolling")


# -- through the topics and the CLI --------------------------------------------------------------

@pytest.fixture
def fake(tmp_path):
    clients = FakeKafkaClients(tmp_path / "kafka.db")
    for topic in ("in", "out"):
        clients.admin().create_topic(topic, 3)
    inputs = [json.dumps({"id": i, "seq": i, "group": f"g{i % 3}"}).encode() for i in range(30)]
    produce_committed(clients, "in", inputs, key_of=lambda v: str(json.loads(v)["id"]).encode(), txn_id="in-1")
    return clients


def write_counts(clients, counts, txn_id):
    values = [json.dumps({"key": k, "count": n}).encode() for k, n in counts]
    produce_committed(clients, "out", values, key_of=lambda v: json.loads(v)["key"].encode(), txn_id=txn_id)


def test_verify_shape_reads_the_topics_in_offset_order(fake):
    write_counts(fake, [("g0", 4), ("g1", 4), ("g2", 4)], "b0")
    write_counts(fake, [("g0", 10), ("g1", 10), ("g2", 10)], "b1")
    report = verify_shape(fake, "in", "out", "running-count", id_spec="json:group")
    assert report.exactly_once, report.summary_lines()
    write_counts(fake, [("g0", 10)], "b1-again")
    report = verify_shape(fake, "in", "out", "running-count", id_spec="json:group")
    assert not report.exactly_once and report.count("duplicates") == 1


def test_verify_shape_windowed_takes_the_event_time_from_a_json_field(fake):
    counts = Counter((f"g{i % 3}", i // 10 * 10) for i in range(30))
    values = [json.dumps({"key": g, "window": {"start": s, "end": s + 10}, "count": counts[g, s]}).encode()
              for s in (0, 10) for g in ("g0", "g1", "g2")]
    produce_committed(fake, "out", values, key_of=lambda v: json.loads(v)["key"].encode(), txn_id="w")
    report = verify_shape(fake, "in", "out", "windowed-count", id_spec="json:group", event_time="json:seq")
    assert report.exactly_once, report.summary_lines()


def test_cli_verify_shape_exit_codes(fake, capsys):
    address = fake.bootstrap_servers
    write_counts(fake, [("g0", 10), ("g1", 10)], "b0")
    code = main(["verify", "--bootstrap", address, "--input", "in", "--output", "out", "--shape", "running-count",
                 "--id-field", "json:group"])
    printed = capsys.readouterr().out
    assert code == 1 and "NOT EXACTLY-ONCE" in printed and "lost writes [lost-write]: 1 keys, 10 records" in printed
    write_counts(fake, [("g2", 10)], "b1")
    assert main(["verify", "--bootstrap", address, "--input", "in", "--output", "out", "--shape", "running-count",
                 "--id-field", "json:group"]) == 0


@pytest.mark.parametrize("argv, message", [
    (["--shape", "join"], "--right-input TOPIC goes with --shape join, and only with it"),
    (["--right-input", "pay"], "--right-input TOPIC goes with --shape join, and only with it"),
    (["--shape", "dedup", "--check-order"], "--check-order is for copy jobs"),
])
def test_cli_verify_refuses_options_that_do_not_go_together_in_one_line(fake, capsys, argv, message):
    code = main(["verify", "--bootstrap", fake.bootstrap_servers, "--input", "in", "--output", "out", *argv])
    assert code == 2 and message in capsys.readouterr().err
