"""The stateful bench's table: each kit sink's median query time as a ratio to Spark's own sink of
the same shuffle-partition count and shape (bench/stateful_bench.py)."""

from __future__ import annotations

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

from stateful_bench import Run, commit_table, markdown, ratio_rows, rotated, short_error  # noqa: E402

SINKS = ["kafka", "kafka-eos", "foreach-batch"]


def test_ratios_are_to_spark_own_sink_of_the_same_partitions_and_shape_on_medians():
    runs = [Run("dedup", "kafka", 200, query_s=50.0), Run("dedup", "kafka", 200, query_s=70.0),
            Run("dedup", "kafka", 200, query_s=60.0),
            Run("dedup", "kafka-eos", 200, query_s=66.0, transactional_ids=12),
            Run("dedup", "foreach-batch", 200, query_s=30.0, transactional_ids=4),
            Run("dedup", "kafka", 8, query_s=10.0), Run("dedup", "foreach-batch", 8, query_s=12.0)]
    rows = ratio_rows(runs, SINKS)
    assert [(r["shuffle_partitions"], r["shape"]) for r in rows] == [(200, "dedup"), (8, "dedup")]
    assert rows[0]["seconds"] == {"kafka": 60.0, "kafka-eos": 66.0, "foreach-batch": 30.0}
    assert rows[0]["ratio"] == {"kafka-eos": 1.1, "foreach-batch": 0.5}
    assert rows[0]["ids"] == {"kafka": 0, "kafka-eos": 12, "foreach-batch": 4}
    assert rows[1]["ratio"] == {"foreach-batch": 1.2}


def test_a_failed_run_has_no_ratio_and_the_table_names_why():
    runs = [Run("running_count", "kafka", 200, query_s=60.0),
            Run("running_count", "kafka-eos", 200, error="kafka-eos does not support Update mode"),
            Run("running_count", "foreach-batch", 200, query_s=54.0, transactional_ids=4)]
    [row] = ratio_rows(runs, SINKS)
    assert row["ratio"] == {"foreach-batch": 0.9} and row["mode"] == "update"
    table = markdown([row], SINKS).splitlines()
    assert table[0] == ("| shuffle partitions | query | Spark's sink (s) | kafka-eos (s, ratio, ids) "
                        "| foreach-batch (s, ratio, ids) |")
    assert table[2] == ("| 200 | running_count (update) | 60.0 | failed: kafka-eos does not support Update mode "
                        "| 54.0 (0.9x, 4) |")


def test_each_repetition_starts_with_the_next_sink():
    assert [rotated(SINKS, n) for n in range(4)] == [
        SINKS, ["kafka-eos", "foreach-batch", "kafka"], ["foreach-batch", "kafka", "kafka-eos"], SINKS]
    assert rotated([], 3) == []


def test_the_commit_table_has_a_line_per_kit_run_that_committed():
    runs = [Run("dedup", "kafka-eos", 200, query_s=60.0, transactions=[200, 0, 3], commit_ms=[900, 40, 50],
                endtxn_ms=[700, 0, 20], retry_warnings=0, own_cpu_s=80.5, other_load_cores=1.2),
            Run("dedup", "kafka", 200, query_s=50.0), Run("dedup", "foreach-batch", 200, error="boom")]
    lines = commit_table(runs).splitlines()
    assert lines[2] == "| 200 | dedup | kafka-eos | 0-200 | 50 (20) | 0 | 80.5 | 1.2 |"
    assert lines[3] == "| 200 | dedup | kafka | - | - | 0 | 0.0 | 0.0 |"
    assert len(lines) == 4


def test_a_failed_run_is_named_by_its_cause_without_sparks_wrapping():
    error = ("pyspark.errors.exceptions.captured.StreamingQueryException: [STREAM_FAILED] Query [id = 1, runId = 2] "
             "terminated with exception: requirement failed: kafka-eos does not support Update mode. SQLSTATE: XXKST")
    assert short_error(error) == "kafka-eos does not support Update mode."
    assert short_error("exit 1") == "exit 1"
