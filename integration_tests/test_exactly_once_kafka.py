"""The Kafka source and sink against a real broker: the in-process job killed with os._exit at
every failpoint and restarted; a lost transaction surfacing; lingering transactions aborted."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from connectors.kafka.sink.config import KafkaSinkConfig
from connectors.kafka.kafka_errors import TransactionLostError
from connectors.kafka.sink.kafka_sink import KafkaSink
from connectors.kafka.sink.writer import ProducerRecord
from connectors.tools import jobs
from kafka_io import (
    assert_exactly_once,
    copied_id,
    partitions_of,
    read_committed_values,
    topics_with_orders,
    wait_until_stable,
)
from twophase import failpoints
from twophase.checkpoint import CompletedCheckpoint
from twophase.checkpoint_store import FileCheckpointStore
from twophase.coordinator import CheckpointCoordinator
from twophase.lifecycle import CommitLifecycle
from twophase.participants import RestoredState
from kafka_testkit.job_python import job_python

JOB = Path(jobs.__file__).resolve().parent / "copy_pipeline.py"
RECORDS = 3000

SCENARIOS = {
    "before_pre_commit": [["before_pre_commit:exit@7"]],
    "after_pre_commit": [["after_pre_commit:exit@7"]],
    "after_checkpoint_stored": [["after_checkpoint_stored:exit@4"]],
    "before_commit": [["before_commit:exit@7"]],
    "mid_commit": [["mid_commit:exit@4"]],
    "after_commit": [["after_commit:exit@4"]],
    "during_restore": [["after_pre_commit:exit@7"], ["during_restore:exit"]],
}


def run_copy_job(bootstrap: str, source: str, sink: str, checkpoint: Path, prefix: str, *failpoint_specs: str):
    command = [job_python(), str(JOB), "--bootstrap", bootstrap, "--input", source, "--output", sink,
               "--checkpoint-dir", str(checkpoint), "--bounded", "--transactional-id-prefix", prefix,
               "--checkpoint-interval", "3600",
               "--checkpoint-every-records", "200", "--log-level", "WARNING"]
    for spec in failpoint_specs:
        command += ["--failpoint", spec]
    return subprocess.run(command, capture_output=True, text=True, timeout=600)


def test_every_failpoint_has_a_scenario():
    assert set(SCENARIOS) == set(failpoints.ALL)


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_job_killed_at_failpoint_and_restarted_is_exactly_once(kafka_bootstrap, kafka_clients, unique_name,
                                                             tmp_path, scenario):
    source, sink, ids = topics_with_orders(kafka_clients, unique_name, RECORDS)
    prefix = unique_name("eos")
    for specs in SCENARIOS[scenario]:
        crashed = run_copy_job(kafka_bootstrap, source, sink, tmp_path / "chk", prefix, *specs)
        assert crashed.returncode == failpoints.EXIT_CODE, crashed.stderr[-3000:]
        assert len(read_committed_values(kafka_clients, sink)) < RECORDS, f"{specs}: crashed after finishing"
    finished = run_copy_job(kafka_bootstrap, source, sink, tmp_path / "chk", prefix)
    assert finished.returncode == 0, finished.stderr[-3000:]

    wait_until_stable(kafka_clients, sink)
    assert_exactly_once(read_committed_values(kafka_clients, sink), ids, copied_id)
    assert kafka_clients.txn_control().list_open_transactions(f"{prefix}-") == []


def make_sink(bootstrap: str, prefix: str, topic: str) -> KafkaSink:
    config = KafkaSinkConfig(bootstrap_servers=bootstrap, topic=topic, transactional_id_prefix=prefix,
                             commit_retry_timeout_s=20)
    return KafkaSink(config, name="sink")


def test_reinitialised_transactional_id_surfaces_transaction_lost_error(kafka_bootstrap, kafka_clients, unique_name,
                                                                       tmp_path):
    topic, prefix = unique_name("out"), unique_name("eos")
    kafka_clients.admin().create_topic(topic, 1)
    sink = make_sink(kafka_bootstrap, prefix, topic)
    sink.restore(RestoredState(None, None, False))
    for i in range(5):
        sink.invoke(ProducerRecord(value=f"v{i}"))
    state = sink.snapshot_state(1)
    transactional_id = state[0]["committables"][0]["transactional_id"]
    usurper = kafka_clients.producer(transactional_id, {})
    usurper.init_transactions(30)
    usurper.close()
    lifecycle = CommitLifecycle(FileCheckpointStore(tmp_path / "chk"), [sink])  # the coordinator's commit
    with pytest.raises(TransactionLostError) as error:
        lifecycle.complete(CompletedCheckpoint(1, 0, 0, {sink.name: state}))
    assert error.value.transactional_id == transactional_id
    assert error.value.record_count == 5 and error.value.checkpoint_id == 1
    wait_until_stable(kafka_clients, topic)
    assert read_committed_values(kafka_clients, topic) == []


def test_lingering_transactions_are_aborted_at_restart(kafka_bootstrap, kafka_clients, unique_name, tmp_path):
    topic, prefix = unique_name("out"), unique_name("eos")
    kafka_clients.admin().create_topic(topic, 1)
    crashed = make_sink(kafka_bootstrap, prefix, topic)
    crashed.restore(RestoredState(None, None, False))
    crashed.invoke(ProducerRecord(value=b"never-visible"))
    crashed.snapshot_state(1)  # flushed; the job dies before checkpoint 1 completes
    other = kafka_clients.producer(None, {})
    other.produce(topic, b"plain-after")
    other.flush(30)
    tps = partitions_of(kafka_clients, topic)
    admin = kafka_clients.admin()
    assert admin.list_offsets(tps, "latest", True) != admin.list_offsets(tps, "latest", False), \
        "the open transaction should hold the LSO back"
    assert kafka_clients.txn_control().list_open_transactions(f"{prefix}-")

    # The restart is the coordinator's one recovery (nothing stored yet): it aborts what the
    # sink's id pool left open.
    restarted = make_sink(kafka_bootstrap, prefix, topic)
    coordinator = CheckpointCoordinator(FileCheckpointStore(str(tmp_path / "chk")))
    coordinator.register(restarted)
    coordinator.restore()

    assert kafka_clients.txn_control().list_open_transactions(f"{prefix}-") == []
    wait_until_stable(kafka_clients, topic)
    assert read_committed_values(kafka_clients, topic) == [b"plain-after"]
