"""Which query the foreachBatch helper binds its state to, without a Spark session: Spark's local
property on classic sessions, the query's checkpointLocation (its ``metadata``) on Spark Connect."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from connectors.spark import foreach_batch
from connectors.spark.aligned_write import AlignedWrite
from connectors.spark.foreach_batch import bound_query_id, exactly_once_foreach_batch
from connectors.spark.sink_driver import BatchContext
from connectors.spark.options import KafkaEosOptionError, SinkOptions

SINK = {"kafka.bootstrap.servers": "localhost:9092", "topic": "out"}


class _Session:
    def __init__(self, local_query_id: str | None, connect: bool) -> None:
        self._local = local_query_id
        self._connect = connect

    @property
    def sparkContext(self) -> Any:  # noqa: N802 (Spark's name)
        if self._connect:
            raise RuntimeError("[NOT_IMPLEMENTED] sparkContext() is not implemented.")  # as Spark Connect does
        return type("SC", (), {"getLocalProperty": lambda _self, key: self._local, "defaultParallelism": 2})()

    @property
    def conf(self) -> Any:
        # A Connect server whose spark.default.parallelism is set (write_planning.spark_parallelism).
        return type("Conf", (), {"get": lambda _self, key, default=None: "3" if key == "spark.default.parallelism"
                                 else default})()


class _BatchDF:
    def __init__(self, local_query_id: str | None = None, connect: bool = False) -> None:
        self.sparkSession = _Session(local_query_id, connect)
        #: The writes the helper made of this batch: (sink options, checkpoint id).
        self.saved: list[tuple[SinkOptions, BatchContext]] = []
        self.first_writes: list[bool] = []
        self.write_tasks: list[int | None] = []


@pytest.fixture(autouse=True)
def recorded_writes(monkeypatch):
    """Records the write the helper makes instead of running it (no Spark session here)."""
    def record(df: _BatchDF, options: SinkOptions, context: BatchContext, *, first_write: bool,
               write_tasks: AlignedWrite | None) -> None:
        df.saved.append((options, context))
        df.first_writes.append(first_write)
        df.write_tasks.append(write_tasks.tasks if write_tasks is not None else None)

    monkeypatch.setattr(foreach_batch, "write_dataframe", record)


def started_query(checkpoint: Path, query_id: str) -> str:
    """A checkpoint folder as Spark leaves it once a query started there."""
    checkpoint.mkdir(parents=True, exist_ok=True)
    (checkpoint / "metadata").write_text(json.dumps({"id": query_id}) + "\n")
    return str(checkpoint)


def test_classic_session_binds_to_the_local_property_as_before(tmp_path):
    handler = exactly_once_foreach_batch(**SINK, **{"eos.stateDir": str(tmp_path / "s")})
    batch = _BatchDF(local_query_id="q-classic")
    handler(batch, 0)
    [(write, context)] = batch.saved
    assert context == BatchContext(0, "q-classic", replayable=True)
    assert write.state_dir == str(tmp_path / "s") and not write.streaming
    handler(batch, 1)
    # Only the run's first write sweeps what a crashed run left open; later commits sweep after themselves.
    assert batch.first_writes == [True, False]


def test_connect_session_binds_to_the_query_of_the_checkpoint_location(tmp_path):
    checkpoint = started_query(tmp_path / "chk", "q-connect")
    handler = exactly_once_foreach_batch(lambda df, batch_id: df, **SINK, checkpointLocation=checkpoint)
    batch = _BatchDF(connect=True)
    handler(batch, 3)
    [(write, context)] = batch.saved
    assert context == BatchContext(3, "q-connect", replayable=True)
    assert write.state_dir == str(tmp_path / "chk" / "kafka-eos"), "the streaming sink's default"
    assert write.checkpoint_location is None, "the batch write has no checkpoint"


def test_an_explicit_state_dir_is_kept_with_a_checkpoint_location(tmp_path):
    checkpoint = started_query(tmp_path / "chk", "q-1")
    handler = exactly_once_foreach_batch(lambda df, batch_id: df, **SINK, checkpointLocation=checkpoint,
                                         **{"eos.stateDir": str(tmp_path / "elsewhere")})
    batch = _BatchDF(connect=True)
    handler(batch, 0)
    assert batch.saved[0][0].state_dir == str(tmp_path / "elsewhere")


def test_connect_without_checkpoint_location_is_refused_naming_the_option(tmp_path):
    handler = exactly_once_foreach_batch(lambda df, batch_id: df, **SINK, **{"eos.stateDir": str(tmp_path / "s")})
    batch = _BatchDF(connect=True)
    with pytest.raises(KafkaEosOptionError, match="no Spark local property sql.streaming.queryId .*checkpointLocation="):
        handler(batch, 0)
    assert batch.saved == [], "an unbound batch must write nothing"


def test_both_given_and_the_same_query_is_accepted(tmp_path):
    checkpoint = started_query(tmp_path / "chk", "q-same")
    assert bound_query_id(_BatchDF(local_query_id="q-same"), checkpoint) == "q-same"


def test_both_given_for_different_queries_is_refused(tmp_path):
    checkpoint = started_query(tmp_path / "chk", "q-other")
    handler = exactly_once_foreach_batch(lambda df, batch_id: df, **SINK, checkpointLocation=checkpoint)
    batch = _BatchDF(local_query_id="q-running")
    with pytest.raises(KafkaEosOptionError, match="checkpointLocation=.* belongs to query q-other, but the query "
                                                  "running this function is q-running"):
        handler(batch, 0)
    assert batch.saved == []


def test_a_checkpoint_location_without_a_started_query_is_named(tmp_path):
    handler = exactly_once_foreach_batch(lambda df, batch_id: df, **SINK,
                                         checkpointLocation=str(tmp_path / "nowhere"))
    with pytest.raises(KafkaEosOptionError, match=r"option checkpointLocation=.*nowhere.* holds no started query.*"
                                                  r"metadata does not exist"):
        handler(_BatchDF(connect=True), 0)


def test_neither_state_dir_nor_checkpoint_location_is_refused_at_once():
    with pytest.raises(KafkaEosOptionError, match="needs checkpointLocation .* or eos.stateDir"):
        exactly_once_foreach_batch(lambda df, batch_id: df, **SINK)


@pytest.mark.parametrize("bad", [{"checkpointLocation": " "},
                                 {"checkpointLocation": "/a", "checkpointlocation": "/b"}])
def test_a_malformed_checkpoint_location_is_refused(bad):
    with pytest.raises(KafkaEosOptionError, match="checkpointLocation"):
        exactly_once_foreach_batch(lambda df, batch_id: df, **SINK, **bad)


def test_state_dir_next_to_a_uri_checkpoint_location():
    handler = exactly_once_foreach_batch(lambda df, batch_id: df, **SINK, checkpointLocation="s3a://bucket/chk/q")
    assert handler is not None  # the state URI is built with '/', not the local separator


@pytest.mark.parametrize("internal", ["eos.checkpointId", "eos.queryId"])
def test_the_batch_context_is_no_option(tmp_path, internal):
    """The batch id and the query reach the sink driver as a BatchContext, never as options."""
    with pytest.raises(KafkaEosOptionError, match=f"(?i)unknown kafka-eos sink option '{internal}'"):
        exactly_once_foreach_batch(lambda df, batch_id: df, **SINK, checkpointLocation=str(tmp_path),
                                   **{internal: "1"})


@pytest.mark.parametrize("connect, options, expected", [
    (False, {}, 2),  # the SparkContext's defaultParallelism
    (True, {}, 3),  # no SparkContext: spark.default.parallelism of the server
    (False, {"eos.writeTasks": "auto"}, 2),
    (False, {"eos.writeTasks": "5"}, 5),
])
def test_each_batch_is_written_by_at_most_as_many_tasks_as_spark_runs_at_once(tmp_path, connect, options, expected):
    checkpoint = started_query(tmp_path / "chk", "q-1")
    handler = exactly_once_foreach_batch(**SINK, checkpointLocation=checkpoint, **options)
    batch = _BatchDF(local_query_id=None if connect else "q-1", connect=connect)
    handler(batch, 0)
    handler(batch, 1)
    assert batch.write_tasks == [expected, expected]


@pytest.mark.parametrize("value", ["0", "-1", "two", ""])
def test_a_write_task_count_below_one_or_not_a_number_is_refused_naming_the_option(tmp_path, value):
    with pytest.raises(KafkaEosOptionError, match=r"option eos\.writeTasks must be auto .* or an integer >= 1"):
        exactly_once_foreach_batch(**SINK, **{"eos.stateDir": str(tmp_path / "s"), "eos.writeTasks": value})


def test_the_checkpoint_is_read_once_while_the_same_query_runs_and_again_for_another(tmp_path, monkeypatch):
    checkpoint = started_query(tmp_path / "chk", "q-1")
    reads: list[str] = []
    real = foreach_batch.read_query_checkpoint

    def read(location):
        reads.append(location)
        return real(location)

    monkeypatch.setattr(foreach_batch, "read_query_checkpoint", read)
    handler = exactly_once_foreach_batch(lambda df, batch_id: df, **SINK, checkpointLocation=checkpoint)
    for batch_id in range(3):
        handler(_BatchDF(local_query_id="q-1"), batch_id)
    assert reads == [checkpoint]
    # The checkpoint was started again by another query: its id is read again, and checked.
    started_query(tmp_path / "chk", "q-2")
    batch = _BatchDF(local_query_id="q-2")
    handler(batch, 0)
    assert len(reads) == 2 and batch.saved[0][1].query_id == "q-2"
