"""How many tasks Spark runs at once, as the foreachBatch helper finds it (connectors/spark/write_planning.py):
the SparkContext's on a classic session; on Spark Connect, where there is none, the server's
``spark.default.parallelism`` or the partitions of a ``range`` without a count, asked with SQL
strings only (the server's foreachBatch process builds no ``pyspark.sql.functions`` column)."""

from __future__ import annotations

from typing import Any

import pytest

from connectors.spark.write_planning import spark_parallelism


class _ConnectSession:
    """A Connect session as the server's foreachBatch process has it: no SparkContext."""

    def __init__(self, configured: str | None = None, partitions: int = 3, fails: bool = False) -> None:
        self.configured = configured
        self.partitions = partitions
        self.fails = fails
        self.probes: list[str] = []

    @property
    def sparkContext(self) -> Any:  # noqa: N802 (Spark's name)
        raise RuntimeError("[NOT_IMPLEMENTED] sparkContext() is not implemented.")

    @property
    def conf(self) -> Any:
        return type("Conf", (), {"get": lambda _self, key, default=None: self.configured
                                 if key == "spark.default.parallelism" else default})()

    def range(self, start: int, end: int) -> Any:
        session = self

        class Probe:
            def selectExpr(self, expression: str) -> Any:  # noqa: N802 (Spark's name)
                session.probes.append(expression)
                if session.fails:
                    raise RuntimeError("the server is gone")
                if expression.startswith("max("):
                    return type("Row", (), {"first": lambda _self: {"last": session.partitions - 1}})()
                return self

        assert start == 0 and end >= 1 << 16
        return Probe()


def test_a_classic_session_answers_with_its_default_parallelism():
    classic = type("Session", (), {"sparkContext": type("SC", (), {"defaultParallelism": 8})()})()
    assert spark_parallelism(classic) == 8


def test_spark_connect_takes_the_servers_setting_when_there_is_one():
    session = _ConnectSession(configured="6")
    assert spark_parallelism(session) == 6
    assert session.probes == []


def test_spark_connect_otherwise_counts_the_partitions_of_a_range_with_sql_only():
    session = _ConnectSession(partitions=3)
    assert spark_parallelism(session) == 3
    # A non-deterministic expression may not be an aggregate's argument: a column first.
    assert session.probes == ["spark_partition_id() AS p", "max(p) AS last"]


def test_when_it_cannot_be_found_each_batch_keeps_its_partitions(caplog: pytest.LogCaptureFixture):
    assert spark_parallelism(_ConnectSession(fails=True)) is None
