"""The sink's state is bound to its query and never replayed when lost (without Spark: the query's
checkpoint folder is written here as Spark writes it: ``metadata`` and ``commits/<batch>``)."""

from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from connectors.spark import state_guard  # noqa: E402
from connectors.spark.options import parse_sink_options  # noqa: E402
from connectors.spark.sink_driver import BatchContext  # noqa: E402
from connectors.spark.spark_errors import ForeignStateError, LostStateError, QueryCheckpointError
from connectors.spark.state_guard import guard_sink_state
from twophase.checkpoint import CompletedCheckpoint  # noqa: E402
from twophase.checkpoint_store import FileCheckpointStore  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_worker():
    """Each test is a new Python worker: nothing verified yet."""
    state_guard._verified.clear()
    yield
    state_guard._verified.clear()


def spark_checkpoint(folder: Path, committed: range = range(0), query_id: str | None = None) -> str:
    """A query's checkpoint folder as Spark leaves it."""
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "metadata").exists():
        (folder / "metadata").write_text(json.dumps({"id": query_id or str(uuid.uuid4())}) + "\n")
    (folder / "commits").mkdir(exist_ok=True)
    for batch in committed:
        (folder / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
        (folder / "commits" / f".{batch}.crc").write_bytes(b"crc")
    return json.loads((folder / "metadata").read_text())["id"]


def streaming(checkpoint: Path, state: Path | None = None, **extra: str):
    options = {"kafka.bootstrap.servers": "localhost:9092", "topic": "out", "checkpointlocation": str(checkpoint),
               **({"eos.statedir": str(state)} if state else {}), **{k.lower(): v for k, v in extra.items()}}
    return parse_sink_options(options, streaming=True)


def foreach_batch(state: Path, query_id: str, batch_id: int):
    """What the foreachBatch helper hands the state guard: its sink options and the batch."""
    options = parse_sink_options({"kafka.bootstrap.servers": "localhost:9092", "topic": "out",
                                  "eos.statedir": str(state)}, streaming=False)
    return options, BatchContext(batch_id, query_id)


def store_checkpoints(state: Path, *ids: int) -> None:
    store = FileCheckpointStore(state)
    for checkpoint_id in ids:
        store.add(CompletedCheckpoint(checkpoint_id, 1, 2, {"kafka-sink": []}))
        store.mark_committed(checkpoint_id)


def test_first_use_binds_the_state_to_the_query(tmp_path):
    query_id = spark_checkpoint(tmp_path / "chk")
    guard_sink_state(streaming(tmp_path / "chk"))
    owner = FileCheckpointStore(tmp_path / "chk" / "kafka-eos").owner()
    assert (owner.kind, owner.owner_id, owner.adopted_through) == ("spark-streaming-query", query_id, None)
    assert owner.description == f"checkpointLocation {tmp_path / 'chk'}"
    state_guard._verified.clear()
    guard_sink_state(streaming(tmp_path / "chk"))  # a restart of the same query


def test_a_reset_checkpoint_with_the_state_kept_is_refused(tmp_path):
    old_id = spark_checkpoint(tmp_path / "chk")
    guard_sink_state(streaming(tmp_path / "chk", tmp_path / "state"))
    store_checkpoints(tmp_path / "state", 0, 1, 2)
    for entry in sorted((tmp_path / "chk").rglob("*"), reverse=True):  # the user deletes the checkpoint
        entry.rmdir() if entry.is_dir() else entry.unlink()
    new_id = spark_checkpoint(tmp_path / "chk")  # Spark starts the query afresh: a new id
    state_guard._verified.clear()
    with pytest.raises(ForeignStateError) as refused:
        guard_sink_state(streaming(tmp_path / "chk", tmp_path / "state"))
    message = str(refused.value)
    assert old_id in message and new_id in message and str(tmp_path / "state") in message
    assert "checkpoint was reset" in message and "eos.stateDir" in message


def test_two_queries_on_one_state_directory_are_refused(tmp_path):
    spark_checkpoint(tmp_path / "q1")
    spark_checkpoint(tmp_path / "q2")
    guard_sink_state(streaming(tmp_path / "q1", tmp_path / "shared"))
    with pytest.raises(ForeignStateError, match="give each its own eos.stateDir"):
        guard_sink_state(streaming(tmp_path / "q2", tmp_path / "shared"))


def test_a_query_with_committed_batches_and_an_empty_state_is_lost_state(tmp_path):
    # The run 2: the same checkpointLocation, another (empty) eos.stateDir.
    spark_checkpoint(tmp_path / "chk", committed=range(3))
    with pytest.raises(LostStateError) as lost:
        guard_sink_state(streaming(tmp_path / "chk", tmp_path / "state-b"))
    message = str(lost.value)
    assert "committed batches up to 2" in message and f"{tmp_path / 'chk'}/commits" in message
    assert f"state at {tmp_path / 'state-b'} is empty" in message and "eos.adoptExistingQuery=true" in message
    assert FileCheckpointStore(tmp_path / "state-b", check_writable=False).owner() is None  # nothing claimed


def test_a_state_behind_the_commit_log_is_lost_state(tmp_path):
    spark_checkpoint(tmp_path / "chk")
    guard_sink_state(streaming(tmp_path / "chk"))
    store_checkpoints(tmp_path / "chk" / "kafka-eos", 0, 1)
    spark_checkpoint(tmp_path / "chk", committed=range(5))  # e.g. the state was restored from an old copy
    state_guard._verified.clear()
    with pytest.raises(LostStateError, match="holds checkpoints only up to 1"):
        guard_sink_state(streaming(tmp_path / "chk"))


@pytest.mark.parametrize("commit_log, stored", [
    (range(3), (0, 1, 2)),     # steady state
    (range(3), (1, 2, 3)),     # died after the sink committed 3, before Spark logged it
    (range(0), (0,)),          # died before Spark logged the first batch
])
def test_a_state_at_or_ahead_of_the_commit_log_is_accepted(tmp_path, commit_log, stored):
    spark_checkpoint(tmp_path / "chk")
    guard_sink_state(streaming(tmp_path / "chk"))
    store_checkpoints(tmp_path / "chk" / "kafka-eos", *stored)
    spark_checkpoint(tmp_path / "chk", committed=commit_log)
    state_guard._verified.clear()
    guard_sink_state(streaming(tmp_path / "chk"))


def test_a_query_switching_to_this_sink_adopts_an_empty_state_once(tmp_path, caplog):
    spark_checkpoint(tmp_path / "chk", committed=range(6))
    guard_sink_state(streaming(tmp_path / "chk", **{"eos.adoptExistingQuery": "true"}))
    assert FileCheckpointStore(tmp_path / "chk" / "kafka-eos").owner().adopted_through == 5
    state_guard._verified.clear()
    guard_sink_state(streaming(tmp_path / "chk"))  # crashed before its first batch: still fine
    state_guard._verified.clear()
    with caplog.at_level(logging.WARNING):
        guard_sink_state(streaming(tmp_path / "chk", **{"eos.adoptExistingQuery": "true"}))
    assert "remove the option" in caplog.text


def test_adopting_never_covers_a_state_that_was_in_use(tmp_path):
    spark_checkpoint(tmp_path / "chk")
    guard_sink_state(streaming(tmp_path / "chk"))
    store_checkpoints(tmp_path / "chk" / "kafka-eos", 0)
    spark_checkpoint(tmp_path / "chk", committed=range(4))
    state_guard._verified.clear()
    with pytest.raises(LostStateError):
        guard_sink_state(streaming(tmp_path / "chk", **{"eos.adoptExistingQuery": "true"}))


def test_foreach_batch_state_is_bound_to_its_query_and_checked_by_batch_id(tmp_path):
    guard_sink_state(*foreach_batch(tmp_path / "state", "q-1", 0))
    with pytest.raises(ForeignStateError, match="q-1"):
        guard_sink_state(*foreach_batch(tmp_path / "state", "q-2", 0))
    with pytest.raises(LostStateError, match="runs batch 4 only after committing batch 3"):
        guard_sink_state(*foreach_batch(tmp_path / "other-state", "q-1", 4))


def test_batch_writes_and_a_streaming_query_never_share_state(tmp_path):
    # Batch writes number checkpoints by wall-clock ms: a query would take its batches for done.
    batch = parse_sink_options({"kafka.bootstrap.servers": "localhost:9092", "topic": "out",
                                "eos.statedir": str(tmp_path / "state")}, streaming=False)
    guard_sink_state(batch)
    guard_sink_state(batch)
    spark_checkpoint(tmp_path / "chk")
    with pytest.raises(ForeignStateError, match="belongs to spark-batch-writes"):
        guard_sink_state(streaming(tmp_path / "chk", tmp_path / "state"))


def test_a_checkpoint_location_without_spark_metadata_is_named(tmp_path):
    with pytest.raises(QueryCheckpointError, match=f"{tmp_path / 'nowhere'}/metadata does not exist"):
        guard_sink_state(streaming(tmp_path / "nowhere"))


def test_foreach_batch_outside_a_streaming_query_is_refused(tmp_path):
    from types import SimpleNamespace

    from connectors.spark.foreach_batch import exactly_once_foreach_batch
    from connectors.spark.spark_errors import KafkaEosOptionError

    handler = exactly_once_foreach_batch(lambda df, batch_id: df, **{
        "kafka.bootstrap.servers": "localhost:9092", "topic": "out", "eos.stateDir": str(tmp_path / "state")})
    no_query = SimpleNamespace(sparkSession=SimpleNamespace(
        sparkContext=SimpleNamespace(getLocalProperty=lambda key: None)))
    with pytest.raises(KafkaEosOptionError, match="no Spark local property sql.streaming.queryId"):
        handler(no_query, 0)
