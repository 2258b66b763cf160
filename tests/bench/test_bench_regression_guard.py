"""bench/regression_guard.py: the ratios it judges come from run_bench.py's and stateful_bench.py's
results as they write them, a ratio more than 15 % below its recorded value fails, a run that lost
or duplicated records fails whatever its speed, and --record rewrites only the table between its
markers, which the guard reads back."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import regression_guard as guard  # noqa: E402
from stateful_bench import Run, ratio_rows  # noqa: E402

RECORDS = 1000


def map_only_results(steady: dict[str, float], records: dict[str, int] | None = None,
                     disturbed: dict[str, int] | None = None) -> dict:
    """run_bench.py's JSON: runs named by config (#2 for the second repetition), medians by config
    (over the repetitions the host did not disturb)."""
    runs = {}
    for config in steady:
        for name in (config, f"{config}#2"):
            got = (records or {}).get(config, RECORDS)
            runs[name] = {"exit_code": 0, "check": {"records": got, "distinct_keys": got}}
    return {"runs": runs, "summary": {config: {"steady_rec_s": rate, "repetitions": 2,
                                               "disturbed_repetitions": (disturbed or {}).get(config, 0)}
                                      for config, rate in steady.items()}}


def stateful_results(seconds: dict[str, float | None]) -> dict:
    """stateful_bench.py's JSON: its rows, made by its own ratio_rows."""
    runs = [Run("running_count", sink, 200, query_s=s, error=None if s else "the query failed")
            for sink, s in seconds.items()]
    return {"rows": ratio_rows(runs, list(seconds))}


def recorded_all(ratio: float) -> dict[str, float]:
    return {name: ratio for name in [*guard.MAP_ONLY, *guard.STATEFUL]}


def test_ratios_against_spark_own_and_the_tolerance():
    steady = {"spark_builtin": 100.0, "spark_eos": 86.0, "spark_builtin_source": 84.0,
              "spark_builtin_source_fb": 100.0, "spark_eos_fb": 120.0}
    checks = guard.map_only_checks(map_only_results(steady), recorded_all(1.0), RECORDS)
    by_name = {c.name: c for c in checks}
    assert by_name["map-only, the kit at both ends"].measured == 0.86
    assert by_name["map-only, the kit at both ends"].passed  # 0.86 >= 1.0 x 0.85
    assert not by_name["map-only, Spark's source into format('kafka-eos')"].passed  # 0.84 < 0.85
    assert by_name["map-only, the kit's source into the foreachBatch sink"].measured == 1.2


def test_a_check_whose_every_repetition_the_host_disturbed_is_inconclusive_not_passed():
    steady = {"spark_builtin": 100.0, "spark_eos": 50.0, "spark_builtin_source": 100.0,
              "spark_builtin_source_fb": 100.0, "spark_eos_fb": 100.0}
    # One disturbed repetition of two: the median is the other's, and judged as usual.
    checks = guard.map_only_checks(map_only_results(steady, disturbed={"spark_eos": 1}), recorded_all(1.0), RECORDS)
    assert next(c for c in checks if c.name == "map-only, the kit at both ends").problem is None
    checks = guard.map_only_checks(map_only_results(steady, disturbed={"spark_eos": 2}), recorded_all(1.0), RECORDS)
    both = next(c for c in checks if c.name == "map-only, the kit at both ends")
    assert not both.passed and both.problem.startswith("inconclusive")


def test_stateful_ratio_is_spark_time_over_the_kit_time():
    checks = guard.stateful_checks(stateful_results({"kafka": 40.0, "kafka-eos": 50.0, "foreach-batch": 32.0}),
                                   recorded_all(1.0))
    assert [c.measured for c in checks] == [0.8, 1.25]
    assert [c.passed for c in checks] == [False, True]


def test_a_wrong_output_or_a_failed_run_fails_whatever_its_speed():
    steady = {"spark_builtin": 100.0, "spark_eos": 150.0, "spark_builtin_source": 100.0,
              "spark_builtin_source_fb": 100.0, "spark_eos_fb": 100.0}
    checks = guard.map_only_checks(map_only_results(steady, {"spark_eos": RECORDS - 1}), recorded_all(1.0), RECORDS)
    lossy = next(c for c in checks if c.name == "map-only, the kit at both ends")
    assert not lossy.passed and "999 records" in lossy.problem
    failed = guard.stateful_checks(stateful_results({"kafka": 40.0, "kafka-eos": None, "foreach-batch": 30.0}),
                                   recorded_all(1.0))
    assert not failed[0].passed and failed[0].problem == "the query failed"


def test_record_rewrites_the_table_between_the_markers_and_the_guard_reads_it(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"# bench\n\nbefore\n{guard.BEGIN}\n| check | recorded ratio |\n|---|---|\n| old | 9.00x |\n"
                      f"{guard.END}\nafter\n")
    checks = [guard.Check(name, 0.95, None) for name in guard.MAP_ONLY]
    guard.record(checks, readme)
    text = readme.read_text()
    assert text.startswith("# bench\n\nbefore\n") and text.endswith(f"{guard.END}\nafter\n")
    assert guard.recorded_ratios(text) == {name: 0.95 for name in guard.MAP_ONLY}


def test_the_checked_in_readme_records_every_check():
    recorded = guard.recorded_ratios(guard.README.read_text())
    assert set(recorded) == {*guard.MAP_ONLY, *guard.STATEFUL}
