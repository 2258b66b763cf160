"""The bench's warm rate: the second half of a Spark run's batches after the first, when the
JVM's JIT has warmed up (bench/run_bench.py)."""

from __future__ import annotations

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

from run_bench import warm_rate  # noqa: E402


def _batch(rows: int, ms: int) -> dict[str, int]:
    return {"rows": rows, "trigger_ms": ms}


def test_the_warm_rate_is_the_second_half_of_the_steady_batches():
    # Batches that speed up as the JIT warms: the first half does not count.
    steady = [_batch(250_000, 1000), _batch(250_000, 900), _batch(250_000, 500), _batch(250_000, 500)]
    rate, batches = warm_rate(steady)
    assert batches == 2
    assert rate == 500_000


def test_an_odd_count_keeps_the_middle_batch_in_the_warm_half():
    steady = [_batch(100, 1000), _batch(100, 100), _batch(300, 200)]
    rate, batches = warm_rate(steady)
    assert batches == 2
    assert rate == 400 / 0.3
