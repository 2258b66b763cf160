"""The soak's figures (bench/soak.py): which samples each window takes, the ratio of the last to
the first, the roles of a query's processes, and the plot written from samples and events."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent / "integration_tests"))

import soak  # noqa: E402


def sample(t: float, pss: float, commit_ms: float | None, ids: int | None = 6) -> "soak.Sample":
    return soak.Sample(soak.SAMPLES_VERSION, t, {"broker 1": pss, "driver JVM": 2 * pss}, {"broker 1": 300},
                       ids, 0, 40, 210, 1 if commit_ms else 0, commit_ms, commit_ms, int(t * 10), int(t * 10))


def test_the_summary_compares_the_first_window_after_the_warm_up_with_the_last():
    samples = [sample(t, 100.0 if t < 600 else 500.0 if t < 1200 else 550.0, 40.0) for t in range(0, 3600, 30)]
    rows = {row["series"]: row for row in soak.summarize(samples, warmup_s=600, window_s=600)}
    pss = rows["PSS MiB, broker 1"]
    # The warm-up (100 MiB) is left out: 500 over the first window, 550 over the last.
    assert (pss["first"], pss["last"], pss["max"]) == (500.0, 550.0, 550.0)
    assert pss["ratio"] == pytest.approx(1.1)
    assert rows["PSS MiB, driver JVM"]["last"] == 1100.0
    assert rows["transactional ids on the brokers"]["ratio"] == 1.0


def test_a_sample_without_a_figure_leaves_a_gap_not_a_zero():
    samples = [sample(0, 10, None, ids=None), sample(30, 10, 50.0, ids=6), sample(60, 10, 70.0, ids=None)]
    series = soak._series(samples)
    assert series["commit ms (median of the interval)"] == [(30, 50.0), (60, 70.0)]
    assert series["transactional ids on the brokers"] == [(30, 6)]


@pytest.mark.parametrize("command, role", [
    ("java org.apache.spark.deploy.SparkSubmit", "driver JVM"),
    ("python3.11 -m pyspark.daemon", "Python daemon"),
    ("python3.11 /x/examples/spark_pipeline.py", "driver Python"),
])
def test_the_processes_of_a_query_are_told_apart(command, role):
    assert soak._role(command) == role


def test_the_plot_and_the_table_are_written(tmp_path):
    samples = [sample(t, 100.0, 40.0) for t in range(0, 600, 30)]
    events = [{"event": "bounce", "time_s": 100}, {"event": "driver kill", "time_s": 300}]
    soak.plot(samples, events, tmp_path / "soak.png")
    assert (tmp_path / "soak.png").read_bytes()[:4] == b"\x89PNG"
    meta = {"minutes": 10, "kafka": "Apache Kafka 4.4.0 from Maven Central", "connector": "4.2.0", "rate": 200,
            "trigger_interval": "5 seconds", "bounces": 3, "driver_kills": 1, "query_failures": [],
            "verdict": "exactly-once", "window_min": 2, "warmup_min": 1}
    text = soak.markdown(meta, soak.summarize(samples, 60, 120))
    assert "3 node bounces, 1 driver kills, 0 query failures; exactly-once" in text
    assert "| PSS MiB, broker 1 | 100 | 100 | 1.00 | 100 |" in text


def test_bad_options_get_one_line_naming_the_option(capsys):
    with pytest.raises(SystemExit):
        soak.parse_args(["--rate", "0"])
    assert "--rate must be above 0, got 0" in capsys.readouterr().err
