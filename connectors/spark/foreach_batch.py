"""Exactly-once output for ``foreachBatch``: arbitrary per-batch DataFrame logic, one Kafka
two-phase commit per batch id.

    from connectors.spark.foreach_batch import exactly_once_foreach_batch

    def enrich(batch_df, batch_id):
        return batch_df.join(customers, "customer_id").selectExpr("key", "to_json(struct(*)) AS value")

    query = (stream.writeStream
             .foreachBatch(exactly_once_foreach_batch(enrich, **{
                 "kafka.bootstrap.servers": "broker:9092", "topic": "enriched",
                 "eos.stateDir": "/checkpoints/enrich/kafka-eos"}))
             .option("checkpointLocation", "/checkpoints/enrich")
             .start())

Spark calls the function again with the same batch id after a crash between the function and its
commit-log entry; a batch id the sink has already committed is skipped, so the replay writes
nothing.

The state directory is bound to the streaming query the function runs in (Spark's local property
``sql.streaming.queryId``), like the streaming sink's: a reset checkpoint (new query id) or a
second query on the same ``eos.stateDir`` is refused, and so is a batch id past every stored
checkpoint when the state is empty (lost state; ``eos.adoptExistingQuery`` covers a query that
switches to this helper mid-life).
"""

from __future__ import annotations

import logging
from typing import Callable

from pyspark.sql import DataFrame

from connectors.spark.datasource import FORMAT
from connectors.spark.options import parse_sink_options
from connectors.spark.errors import KafkaEosOptionError
from twophase.checkpoint_store import FileCheckpointStore

log = logging.getLogger(__name__)

QUERY_ID_PROPERTY = "sql.streaming.queryId"

BatchTransform = Callable[[DataFrame, int], DataFrame]


def exactly_once_foreach_batch(transform: BatchTransform, **options: str) -> Callable[[DataFrame, int], None]:
    """Wrap ``transform(batch_df, batch_id) -> DataFrame`` (Kafka sink columns: value, and
    optionally key, topic, partition, headers) into a foreachBatch function that writes its
    result to Kafka exactly once per batch id. ``options`` are kafka-eos sink options;
    ``eos.stateDir`` is required (a folder of its own, e.g. inside the query's checkpoint)."""
    if not any(k.lower() == "eos.statedir" for k in options):
        raise KafkaEosOptionError(
            "exactly_once_foreach_batch needs eos.stateDir: the folder where the completed "
            "checkpoints of this output live (e.g. <checkpointLocation>/kafka-eos)")
    for internal in ("eos.checkpointId", "eos.queryId"):
        if any(k.lower() == internal.lower() for k in options):
            raise KafkaEosOptionError(f"{internal} is set by exactly_once_foreach_batch itself")
    sink = parse_sink_options({k.lower(): str(v) for k, v in options.items()}, streaming=False)

    def write_batch(batch_df: DataFrame, batch_id: int) -> None:
        query_id = _streaming_query_id(batch_df)
        if not query_id:
            raise KafkaEosOptionError(
                f"exactly_once_foreach_batch found no Spark local property {QUERY_ID_PROPERTY}: use it "
                "as the foreachBatch function of a streaming query on a classic (not Spark Connect) "
                "session; its state is bound to that query")
        latest = FileCheckpointStore(sink.state_dir, sink.retained_checkpoints, check_writable=False).latest()
        if latest is not None and batch_id <= latest.checkpoint_id:
            # The writer still re-commits a stored but unconfirmed batch before anything else.
            log.info("batch %d is already stored as checkpoint %d; its replay writes nothing",
                     batch_id, latest.checkpoint_id)
        output = transform(batch_df, batch_id)
        (output.write.format(FORMAT).options(**options).option("eos.checkpointId", str(batch_id))
         .option("eos.queryId", query_id).mode("append").save())

    return write_batch


def _streaming_query_id(batch_df: DataFrame) -> str | None:
    """The id of the query running this foreachBatch call (Spark sets it on the calling thread)."""
    try:
        return batch_df.sparkSession.sparkContext.getLocalProperty(QUERY_ID_PROPERTY)
    except Exception as exc:  # Spark Connect sessions have no SparkContext
        log.warning("cannot read Spark local property %s: %r", QUERY_ID_PROPERTY, exc)
        return None
