"""The driver's commit round at a cluster's scale, on a 3-node cluster at replication 3 (issue 54):
1,000 transactions, pre-committed as 1,000 write tasks of one batch hand them over
(``kafka_testkit/prepared_transactions.py``), ended by the sink driver's one commit of the batch.
Every record becomes visible once, nothing is left open, and the round's time (the commit step of
the batch's timings, from the first EndTxn sent to the last response) is reported as a property of
the test for the bench's table; no timing is asserted (bench/commit_round.py measures it).
"""

from __future__ import annotations

import logging
from typing import Callable

import pytest
from pyspark.sql.types import BinaryType, StructField, StructType

from connectors.kafka.clients._confluent.librdkafka import LIBRDKAFKA_LOG
from connectors.kafka.clients.factory import clients_for
from connectors.spark.batch_context import BatchContext
from connectors.spark.options import parse_sink_options
from connectors.spark.sink_driver import SparkSinkDriver
from kafka_io import read_committed_values, wait_until_stable
from kafka_testkit.prepared_transactions import prepare_transactions

TRANSACTIONS = 1_000
PARTITIONS = 64


def test_one_commit_round_ends_a_thousand_transactions(
        kafka_cluster, unique_name: Callable[[str], str], tmp_path, caplog: pytest.LogCaptureFixture,
        record_property: Callable[[str, object], None]) -> None:  # type: ignore[no-untyped-def]
    clients = clients_for(kafka_cluster.bootstrap_servers)
    topic = unique_name("out")
    clients.admin().create_topic(topic, PARTITIONS)
    options = parse_sink_options({"kafka.bootstrap.servers": kafka_cluster.bootstrap_servers, "topic": topic,
                                  "eos.stateDir": str(tmp_path / "state")}, streaming=False)
    context = BatchContext(0, unique_name("query"))
    with SparkSinkDriver(options) as driver:
        driver.before_tasks(StructType([StructField("value", BinaryType())]), context, run_starts=True)
        messages = prepare_transactions(clients, options, context.checkpoint_id, TRANSACTIONS, PARTITIONS)
        before = len(caplog.records)
        with caplog.at_level(logging.INFO):
            timings = driver.commit(context, messages)
    assert timings is not None
    record_property("end_txn_round_ms", round(timings.commit_ms, 1))
    # One round: no EndTxn was refused and retried, none failed.
    assert [r.getMessage() for r in caplog.records[before:]
            if r.levelno >= logging.WARNING and r.name.split(".")[0] in ("connectors", "twophase")
            and r.name != LIBRDKAFKA_LOG.name] == []
    wait_until_stable(clients, topic)
    assert sorted(read_committed_values(clients, topic)) == sorted(f"task-{i}".encode() for i in range(TRANSACTIONS))
    control = clients.txn_control()
    try:
        assert control.list_open_transactions(options.config.transactional_id_prefix) == []
    finally:
        control.close()
