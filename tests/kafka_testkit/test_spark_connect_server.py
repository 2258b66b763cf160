"""The Spark Connect server launcher refuses what it cannot start, before starting anything."""

from __future__ import annotations

import pytest

from kafka_testkit.spark_connect_server import SparkConnectServer, SparkConnectServerError


def test_a_spark_home_without_spark_submit_is_named(tmp_path):
    server = SparkConnectServer(tmp_path / "work", spark_home=tmp_path / "no-spark")
    with pytest.raises(SparkConnectServerError, match="bin/spark-submit is missing"):
        server.start()
    assert server.pid is None


def test_a_spark_without_the_connect_server_is_named(tmp_path):
    (tmp_path / "spark" / "bin").mkdir(parents=True)
    (tmp_path / "spark" / "bin" / "spark-submit").write_text("#!/bin/sh\n")
    (tmp_path / "spark" / "jars").mkdir()
    with pytest.raises(SparkConnectServerError, match="no spark-connect_.*jar"):
        SparkConnectServer(tmp_path / "work", spark_home=tmp_path / "spark").start()


def test_a_bad_failpoint_is_refused_before_the_server_starts(tmp_path):
    with pytest.raises(ValueError, match="unknown failpoint 'mid_comit'"):
        SparkConnectServer(tmp_path / "work", failpoints="mid_comit:exit@2").start()
