"""Exactly-once output for ``foreachBatch``: arbitrary per-batch DataFrame logic, one Kafka
two-phase commit per batch id.

    from connectors.spark.foreach_batch import exactly_once_foreach_batch

    def enrich(batch_df, batch_id):
        return batch_df.join(customers, "customer_id").selectExpr("key", "to_json(struct(*)) AS value")

    query = (stream.writeStream
             .foreachBatch(exactly_once_foreach_batch(enrich, **{
                 "kafka.bootstrap.servers": "broker:9092", "topic": "enriched",
                 "checkpointLocation": "/checkpoints/enrich"}))
             .option("checkpointLocation", "/checkpoints/enrich")
             .start())

Spark calls the function again with the same batch id after a crash between the function and its
commit-log entry; a batch id the sink has already committed is skipped, so the replay writes
nothing.

The state directory is bound to the streaming query the function runs in, like the streaming
sink's: a reset checkpoint (new query id) or a second query on the same ``eos.stateDir`` is
refused, and so is a batch id past every stored checkpoint when the state is empty (lost state;
``eos.adoptExistingQuery`` covers a query that switches to this helper mid-life).

Which query that is, the function learns from one of two places:

- ``checkpointLocation`` given to the helper (the query's own, as on ``writeStream``): the query id
  Spark keeps in ``<checkpointLocation>/metadata``. The state then defaults to
  ``<checkpointLocation>/kafka-eos``, as the streaming sink's does. This is what works on Spark
  Connect, where a foreachBatch function runs in a Python process of the server with a Connect
  session: it has no SparkContext and so no local properties, its ``spark.streams.active`` is
  empty, and nothing in the session's conf or the process environment names the query;
- on a classic session, Spark's local property ``sql.streaming.queryId`` of the calling thread.

Given both, they must name the same query (the checkpointLocation of another query is refused).
Given neither, the first batch fails naming the ``checkpointLocation`` option: a state bound to no
query could be taken over by another one.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable, Mapping

from pyspark.sql import DataFrame, SparkSession

from connectors.spark import use_session_python
from connectors.spark.aligned_write import AlignedWrite
from connectors.spark.foreach_batch_writer import write_dataframe
from connectors.spark.spark_errors import KafkaEosOptionError, QueryCheckpointError
from connectors.spark.options import SinkOptions, parse_sink_options, state_dir_under
from connectors.spark.query_checkpoint import read_query_checkpoint
from connectors.spark.sink_driver import BatchContext, check_guardrails
from connectors.spark.worker_warmup import start_task_workers
from connectors.spark.write_planning import foreach_batch_write_tasks

log = logging.getLogger(__name__)

QUERY_ID_PROPERTY = "sql.streaming.queryId"
CHECKPOINT_LOCATION_OPTION = "checkpointLocation"
STATE_DIR_OPTION = "eos.stateDir"

BatchTransform = Callable[[DataFrame, int], DataFrame]


def exactly_once_foreach_batch(transform: BatchTransform | None = None, *, warm_up: bool = True,
                               **options: str) -> Callable[[DataFrame, int], None]:
    """Wrap ``transform(batch_df, batch_id) -> DataFrame`` (Kafka sink columns: value, and
    optionally key, topic, partition, headers) into a foreachBatch function that writes its
    result to Kafka exactly once per batch id; without ``transform``, the batch is written as it
    is. With ``warm_up`` (on a classic session), what the first batch would otherwise wait for
    starts now, in the background, while the query starts: Spark's Python task workers, with the
    sink's task modules imported (``worker_warmup.py``), and the sink's broker checks
    (``sink_driver.check_guardrails``). ``options`` are kafka-eos sink options, plus
    ``checkpointLocation``: the query's own (required on Spark Connect; see the module doc).
    ``eos.stateDir`` defaults to ``<checkpointLocation>/kafka-eos``; without checkpointLocation it
    is required (a folder of its own, e.g. inside the query's checkpoint)."""
    write_options = dict(options)
    checkpoint_location = _pop_option(write_options, CHECKPOINT_LOCATION_OPTION)
    if checkpoint_location is not None:
        checkpoint_location = checkpoint_location.strip()
        if not checkpoint_location:
            raise KafkaEosOptionError(
                "exactly_once_foreach_batch: option checkpointLocation is empty; give the query's "
                "checkpointLocation (the one on writeStream), a path or URI every driver reaches")
        if _get_option(write_options, STATE_DIR_OPTION) is None:
            write_options[STATE_DIR_OPTION] = state_dir_under(checkpoint_location)
    elif _get_option(write_options, STATE_DIR_OPTION) is None:
        raise KafkaEosOptionError(
            "exactly_once_foreach_batch needs checkpointLocation (the query's, as on writeStream; the "
            "state then lives in <checkpointLocation>/kafka-eos) or eos.stateDir: the folder where the "
            "completed checkpoints of this output live (e.g. <checkpointLocation>/kafka-eos)")
    sink = parse_sink_options({k: str(v) for k, v in write_options.items()}, streaming=False, plans_write_tasks=True)
    active = SparkSession.getActiveSession()
    if active is not None:
        # Before the warm-up's mapInArrow: the Python of Spark's workers (connectors.spark.use_session_python).
        use_session_python(active)
    if warm_up:
        # A Spark Connect client runs neither the tasks nor the function: nothing to start here.
        if active is not None and start_task_workers(active) is not None:
            threading.Thread(target=_check_guardrails_early, args=(sink,), name="kafka-eos-guardrails",
                             daemon=True).start()

    # Until a write of this run succeeded, the next one sweeps what a crashed run left open.
    first_write = True
    # How a batch goes to its write tasks (aligned_write.py), at most as many as Spark runs at once
    # (write_planning.py); made at the first batch.
    write_tasks: AlignedWrite | None = None
    query_id: str | None = None

    def write_batch(batch_df: DataFrame, batch_id: int) -> None:
        nonlocal first_write, write_tasks, query_id
        query_id = bound_query_id(batch_df, checkpoint_location, known=query_id)
        output = batch_df if transform is None else transform(batch_df, batch_id)
        if write_tasks is None:
            write_tasks = foreach_batch_write_tasks(sink, batch_df.sparkSession, batch_id)
        # A replay of a stored batch writes nothing; the commit recognises and logs it.
        write_dataframe(output, sink, BatchContext(batch_id, query_id, replayable=True), first_write=first_write,
                        write_tasks=write_tasks)
        first_write = False

    return write_batch


def _check_guardrails_early(sink: SinkOptions) -> None:
    try:
        check_guardrails(sink)
    except Exception as exc:  # the first batch checks again, and fails there, naming the problem
        log.info("the sink's broker checks ahead of the first batch failed (%r); the first batch makes them again", exc)


def bound_query_id(batch_df: DataFrame, checkpoint_location: str | None, known: str | None = None) -> str:
    """The id of the streaming query this foreachBatch call belongs to (see the module doc).
    ``known``: the id an earlier batch of this function found; where Spark's local property names
    the same query, the checkpoint is not read again (on an object store, a request a batch)."""
    from_thread = _local_query_id(batch_df)
    if from_thread is not None and from_thread == known:
        return known
    if checkpoint_location is None:
        if from_thread:
            return from_thread
        raise KafkaEosOptionError(
            f"exactly_once_foreach_batch found no Spark local property {QUERY_ID_PROPERTY} and was given "
            "no checkpointLocation, so it cannot tell which streaming query runs it, and its state must be "
            "bound to one. Pass the query's checkpointLocation: exactly_once_foreach_batch(transform, "
            "checkpointLocation='<the checkpointLocation of writeStream>', ...); it is required on Spark "
            "Connect, whose foreachBatch functions see no local properties. Outside a streaming query, "
            "use df.write.format('kafka-eos')")
    try:
        from_checkpoint = read_query_checkpoint(checkpoint_location).query_id
    except QueryCheckpointError as exc:
        raise KafkaEosOptionError(
            f"exactly_once_foreach_batch: option checkpointLocation={checkpoint_location!r} holds no started "
            f"query. {exc} It must be the checkpointLocation of the writeStream that runs this function, "
            "spelled as the driver (on Spark Connect: the server) sees it") from None
    if from_thread and from_thread != from_checkpoint:
        raise KafkaEosOptionError(
            f"exactly_once_foreach_batch: option checkpointLocation={checkpoint_location!r} belongs to query "
            f"{from_checkpoint}, but the query running this function is {from_thread} (Spark's local "
            f"property {QUERY_ID_PROPERTY}). Give the checkpointLocation of this query's writeStream")
    return from_checkpoint


def _local_query_id(batch_df: DataFrame) -> str | None:
    """Spark's local property of the calling thread; classic sessions only."""
    try:
        return batch_df.sparkSession.sparkContext.getLocalProperty(QUERY_ID_PROPERTY)
    except Exception as exc:  # a Spark Connect session has no SparkContext
        log.debug("no Spark local property %s here (%r); the query is named by checkpointLocation",
                  QUERY_ID_PROPERTY, exc)
        return None


def _get_option(options: Mapping[str, str], name: str) -> str | None:
    for key, value in options.items():
        if key.lower() == name.lower():
            return str(value)
    return None


def _pop_option(options: dict[str, str], name: str) -> str | None:
    found = [key for key in options if key.lower() == name.lower()]
    if len(found) > 1:
        raise KafkaEosOptionError(f"exactly_once_foreach_batch: option {name} is given twice ({found})")
    return str(options.pop(found[0])) if found else None

