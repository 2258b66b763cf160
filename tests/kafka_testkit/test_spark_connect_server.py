"""The Spark Connect server launcher refuses what it cannot start, before starting anything."""

from __future__ import annotations

import pytest

from kafka_testkit.spark_connect_server import SparkConnectServer, SparkConnectServerError


def test_a_spark_home_without_spark_submit_is_named(tmp_path):
    server = SparkConnectServer(tmp_path / "work", spark_home=tmp_path / "no-spark")
    with pytest.raises(SparkConnectServerError, match="bin/spark-submit is missing"):
        server.start()
    assert server.pid is None


def test_a_spark_without_the_connect_server_takes_it_from_maven_central_or_says_why(tmp_path, monkeypatch):
    # Spark 3.5's pyspark ships no Connect server: its jar comes from Maven Central, at the version
    # of Spark's Kafka connector found for this pyspark; when Maven has none, the error says so.
    from kafka_testkit import spark_kafka_connector
    from kafka_testkit.spark_kafka_connector import SparkKafkaConnectorError

    def unserved():
        raise SparkKafkaConnectorError("tried 3.5.9, 3.5.8")

    monkeypatch.setattr(spark_kafka_connector, "resolve_connector", unserved)
    (tmp_path / "spark" / "bin").mkdir(parents=True)
    (tmp_path / "spark" / "bin" / "spark-submit").write_text("#!/bin/sh\n")
    (tmp_path / "spark" / "jars").mkdir()
    with pytest.raises(SparkConnectServerError, match="no Spark Connect server, and Maven Central gave none: "
                                                      "tried 3.5.9, 3.5.8"):
        SparkConnectServer(tmp_path / "work", spark_home=tmp_path / "spark").start()


def test_a_bad_failpoint_is_refused_before_the_server_starts(tmp_path):
    with pytest.raises(ValueError, match="unknown failpoint 'mid_comit'"):
        SparkConnectServer(tmp_path / "work", failpoints="mid_comit:exit@2").start()
