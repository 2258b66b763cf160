"""Update and complete output mode on ``format("kafka-eos")``, on a real broker (issue 45).

A running count copied from ``format("kafka")`` (``output_modes_job.py``: ``groupBy("key").count()``)
runs unchanged on the kit's sink, which takes update mode through the kit's JVM provider that
``register()`` puts into the session (connectors/spark/jvm_provider.py). The queries are started
from Python threads other than the one that registered the format, as Spark looks the format up on
the starting thread. The output's invariants are ``running_counts.py``'s. On a standalone cluster
(``KAFKA_EOS_INTEGRATION=all``) the executors are JVMs without the provider's jar: they do not need
it. Spark Connect's case is in test_spark_connect.py, on that module's server.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from connectors.kafka.clients import KafkaClients
from connectors.spark.sink_driver import SINK_PARTICIPANT
from connectors.spark.spark_versions import has_stream_admission_control
from kafka_io import read_committed_values
from kafka_testkit.job_python import assert_quiet
from running_counts import (RECORDS, assert_complete_counts, assert_update_counts, counts_by_key, job_failure,
                            load_keyed, new_topic, run_count_job)
from twophase.checkpoint_store import FileCheckpointStore

pytestmark = pytest.mark.spark


def test_a_running_count_in_update_and_complete_mode_runs_unchanged(
        kafka_bootstrap: str, kafka_clients: KafkaClients, unique_name: Callable[[str], str], tmp_path: Path,
        spark_master: str | None) -> None:
    source, update, complete = (new_topic(kafka_clients, unique_name, label)
                                for label in ("counts-in", "update", "complete"))
    inputs = load_keyed(kafka_clients, source)
    job = run_count_job(["--master", spark_master or "local[2]"], kafka_bootstrap, source,
                        {"update": update, "complete": complete}, tmp_path / "checkpoints")
    assert job.returncode == 0, job_failure(job)
    assert "update mode enabled" in job.stderr  # register() put the provider into the driver
    assert_update_counts(counts_by_key(kafka_clients, update), inputs)
    assert_complete_counts(counts_by_key(kafka_clients, complete), inputs)


#: ``local[2]``: Spark's defaultParallelism, the write tasks the provider gives a stateful batch.
PARALLELISM = 2
#: The source's read tasks a batch (its minPartitions): more than PARALLELISM, so that a write
#: coalesced or shuffled to fewer tasks shows.
READ_TASKS = 3


def _transactions_per_batch(checkpoint: Path) -> list[int]:
    """The transactions of each batch the sink's store keeps (its newest three), by the committables
    each stored checkpoint holds: one per write task that wrote rows."""
    store = FileCheckpointStore(str(checkpoint / "kafka-eos"), check_writable=False)
    return [len(store.load(checkpoint_id).operator_states[SINK_PARTICIPANT]) for checkpoint_id in store.checkpoint_ids()]


def test_the_jvm_provider_behaves_as_documented_on_this_spark(
        kafka_bootstrap: str, kafka_clients: KafkaClients, unique_name: Callable[[str], str], tmp_path: Path) -> None:
    """What the JVM provider gives ``format("kafka-eos")``, judged by what the queries do, on the
    Spark this runs on (the version matrix runs it on every 4.x line), at Spark's 200 shuffle
    partitions on ``local[2]``:

    - update mode on the format, with a quiet console (no ERROR line, no traceback);
    - behind state, at most defaultParallelism transactions a batch, not one per shuffle partition
      with rows (about 35 of the 40 keys), and at most twice that many transactional ids left on
      the broker;
    - a map-only copy planned as read, with no shuffle added: one transaction per read task (3, by
      the source's minPartitions, where a shuffle to defaultParallelism would give 2, and one by key
      about 35)."""
    source, counts, copy = (new_topic(kafka_clients, unique_name, label) for label in ("in", "counts", "copy"))
    inputs = load_keyed(kafka_clients, source)
    checkpoints = tmp_path / "checkpoints"
    job = run_count_job(["--master", f"local[{PARALLELISM}]"], kafka_bootstrap, source, {"update": counts},
                        checkpoints, extra=("--copy", copy, "--shuffle-partitions", "200", "--ids-by-topic",
                               "--min-partitions", str(READ_TASKS)))
    assert job.returncode == 0, job_failure(job)
    assert "update mode enabled" in job.stderr  # register() put the provider into the driver
    assert_quiet(job.stdout + job.stderr, "a running count and a copy on format('kafka-eos')")
    # In batches of 400 where Spark lets the kit's source limit them (4.2 on), else in one batch.
    assert_update_counts(counts_by_key(kafka_clients, counts), inputs, several_batches=has_stream_admission_control())

    stateful = _transactions_per_batch(checkpoints / f"update-{counts}")
    assert stateful and max(stateful) <= PARALLELISM, f"transactions per stateful batch: {stateful}"
    left = kafka_clients.txn_control().list_transactions(f"{counts}-")
    assert 0 < len(left) <= 2 * PARALLELISM, [t.transactional_id for t in left]

    copied = _transactions_per_batch(checkpoints / f"copy-{copy}")
    assert copied and max(copied) == READ_TASKS, f"transactions per copied batch: {copied}"
    assert sorted(read_committed_values(kafka_clients, copy)) == sorted(f"v{i}".encode() for i in range(RECORDS))
