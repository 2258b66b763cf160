"""Differential (issue 45, item 4): the same stateful query, failure-free, on Spark's own Kafka sink
(``format("kafka")``, official jars from Maven Central) and on the kit's sinks (``format("kafka-eos")``
and the foreachBatch sink) ends with the same records: each key's last count, the same set of
(key, window, count), the same deduplicated records and join pairs. Both read through the kit's
source with the same batch size, so the batches, and so Spark's results, are the same.

Update mode on ``format("kafka-eos")`` needs the JVM provider of issue 45 (branch issue45-jvm)."""

from __future__ import annotations

import pytest

from stateful_runs import QUERIES, check_shape, final_records, run_query, stateful_topics

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("sink_format", ["kafka-eos", "kafka-eos-foreach-batch"])
@pytest.mark.parametrize("query_name", list(QUERIES))
def test_stateful_query_ends_with_the_same_records_as_on_sparks_own_sink(kafka_bootstrap, kafka_clients,
                                                                          unique_name, tmp_path, spark_kafka_jars,
                                                                          query_name, sink_format):
    query = QUERIES[query_name]
    topics = stateful_topics(kafka_clients, unique_name, query)
    spark_sink = unique_name("spark-out")
    kafka_clients.admin().create_topic(spark_sink, 3)
    own = run_query(kafka_bootstrap, query, topics.__class__(topics.source, spark_sink, topics.right),
                    tmp_path / "chk-spark", "kafka", extra=("--jars", spark_kafka_jars))
    assert own.returncode == 0, own.stderr[-4000:]
    kit = run_query(kafka_bootstrap, query, topics, tmp_path / "chk-kit", sink_format)
    assert kit.returncode == 0, kit.stderr[-4000:]
    check_shape(kafka_clients, query, topics)
    expected = final_records(kafka_clients, query, spark_sink)
    assert expected, "Spark's own sink wrote nothing"
    found = final_records(kafka_clients, query, topics.sink)
    assert found == expected, (f"{len(found - expected)} records only on {sink_format}, e.g. "
                               f"{sorted(found - expected)[:3]}; {len(expected - found)} only on Spark's own sink, "
                               f"e.g. {sorted(expected - found)[:3]}")
