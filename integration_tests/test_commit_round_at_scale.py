"""The driver's commit round at a cluster's scale, on a 3-node cluster at replication 3 (issue 54):
1,000 transactions, pre-committed as 1,000 write tasks of one batch hand them over
(``kafka_testkit/prepared_transactions.py``), ended by the sink driver's one commit of the batch.
Every record becomes visible once, nothing is left open, and the round's time (the commit step of
the batch's timings, from the first EndTxn sent to the last response) is reported as a property of
the test for the bench's table; no timing is asserted (bench/commit_round.py measures it).

Then a driver killed in the commit round of a batch of 250 (failpoint ``mid_commit``: the first
transaction committed, the others not yet), and the next driver's recovery: every record once.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path
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
from twophase import failpoints
from twophase.checkpoint_store import FileCheckpointStore

#: The checkout, where ``python -m kafka_testkit...`` finds the test kit.
REPO = str(Path(__file__).resolve().parent.parent)
TRANSACTIONS = 1_000
PARTITIONS = 64


def _open_transactions(clients, prefix: str) -> list:  # type: ignore[no-untyped-def]
    control = clients.txn_control()
    try:
        return control.list_open_transactions(prefix)
    finally:
        control.close()


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
    assert _open_transactions(clients, options.config.transactional_id_prefix) == []


def test_a_driver_killed_in_the_commit_round_of_250_transactions_is_exactly_once_after_its_restart(
        kafka_cluster, unique_name: Callable[[str], str], tmp_path) -> None:  # type: ignore[no-untyped-def]
    count = 250
    clients = clients_for(kafka_cluster.bootstrap_servers)
    topic = unique_name("out")
    clients.admin().create_topic(topic, PARTITIONS)
    state_dir, query_id = str(tmp_path / "state"), unique_name("query")
    killed = subprocess.run(
        [sys.executable, "-m", "kafka_testkit.prepared_transactions", "--bootstrap", kafka_cluster.bootstrap_servers,
         "--topic", topic, "--state-dir", state_dir, "--query-id", query_id, "--transactions", str(count),
         "--partitions", str(PARTITIONS)],
        env={**os.environ, failpoints.ENV_VAR: f"{failpoints.MID_COMMIT}:exit"}, cwd=REPO, capture_output=True,
        text=True, timeout=600)
    assert killed.returncode == 137, killed.stderr[-2000:]
    # Killed after the decision was stored: the checkpoint is there, not yet marked committed.
    assert FileCheckpointStore(state_dir).checkpoint_ids() == [0]

    options = parse_sink_options({"kafka.bootstrap.servers": kafka_cluster.bootstrap_servers, "topic": topic,
                                  "eos.stateDir": state_dir}, streaming=False)
    with SparkSinkDriver(options) as driver:  # the restarted driver, before its first batch's tasks
        driver.before_tasks(StructType([StructField("value", BinaryType())]), BatchContext(1, query_id),
                            run_starts=True)
    wait_until_stable(clients, topic)
    assert sorted(read_committed_values(clients, topic)) == sorted(f"task-{i}".encode() for i in range(count))
    assert _open_transactions(clients, options.config.transactional_id_prefix) == []
