"""Consumed Kafka records as Arrow record batches of Spark's Kafka schema (``schema.py``)."""

from __future__ import annotations

from typing import Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from connectors.kafka.clients import ConsumedBatch


def _arrow_schema(include_headers: bool) -> pa.Schema:
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))))
    return pa.schema(fields)


def batch_to_arrow(batch: ConsumedBatch, include_headers: bool) -> pa.RecordBatch:
    """One partition's consumed records as an Arrow record batch of Spark's Kafka schema."""
    schema = _arrow_schema(include_headers)
    count = len(batch)
    timestamps = pa.array(batch.timestamps_ms, pa.int64())
    columns = [
        pa.array(batch.keys, pa.binary()),
        pa.array(batch.values, pa.binary()),
        pa.repeat(pa.scalar(batch.topic, pa.string()), count),
        pa.repeat(pa.scalar(batch.partition, pa.int32()), count),
        pa.array(batch.offsets, pa.int64()),
        # Kafka timestamps are milliseconds; Spark's are microseconds.
        pc.multiply(timestamps, 1000).cast(pa.timestamp("us", tz="UTC")),
        pa.array(batch.timestamp_types, pa.int32()),
    ]
    if include_headers:
        headers = batch.headers if batch.headers is not None else [()] * count
        # As Spark's own source (KafkaRecordToRowConverter): a record without headers has null, not [].
        columns.append(pa.array([[{"key": k, "value": v} for k, v in record_headers] if record_headers else None
                                 for record_headers in headers], schema.field("headers").type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def batches_to_arrow(batches: Iterable[ConsumedBatch], include_headers: bool,
                     min_rows: int = 65536, max_bytes: int = 32 << 20) -> Iterator[pa.RecordBatch]:
    """Consumed batches as Arrow record batches of ``min_rows`` rows or ``max_bytes`` bytes,
    whichever comes first (the last may be smaller): a fetch's worth of rows is too small a unit
    for Spark's Arrow conversion, and a bound on bytes keeps large records within memory."""
    pending: list[pa.RecordBatch] = []
    rows = size = 0
    for batch in batches:
        if not len(batch):
            continue
        arrow = batch_to_arrow(batch, include_headers)
        pending.append(arrow)
        rows += arrow.num_rows
        size += arrow.nbytes
        if rows >= min_rows or size >= max_bytes:
            yield _combined(pending)
            pending, rows, size = [], 0, 0
    if pending:
        yield _combined(pending)


def _combined(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    if len(batches) == 1:
        return batches[0]
    return pa.Table.from_batches(batches).combine_chunks().to_batches()[0]
