"""Spark's Kafka record schema, and the checks Spark's Kafka sink makes on its input columns."""

from __future__ import annotations

from typing import Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from connectors.kafka.clients import ConsumedBatch

HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))


def source_schema(include_headers: bool) -> StructType:
    """The schema of Spark's Kafka source, column for column."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    return StructType(fields)


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
        columns.append(pa.array([[{"key": k, "value": v} for k, v in record_headers]
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


class SinkSchemaError(ValueError):
    """The DataFrame written to the sink lacks a column or has one of the wrong type
    (Spark's Kafka sink raises an AnalysisException for the same cases)."""


_TEXT = (StringType, BinaryType)
_SINK_COLUMNS: dict[str, tuple[tuple[type[DataType], ...], str]] = {
    "key": (_TEXT, "string or binary"),
    "value": (_TEXT, "string or binary"),
    "topic": ((StringType,), "string"),
    "partition": ((IntegerType,), "int"),
    "headers": ((ArrayType,), "array<struct<key: string, value: binary>>"),
}


def check_sink_schema(schema: StructType, default_topic: str | None) -> None:
    """Spark's Kafka sink rules: value required; key, topic, partition, headers optional; a
    string or binary key/value; a topic from the column or the 'topic' option."""
    by_name = {f.name: f.dataType for f in schema.fields}
    if "value" not in by_name:
        raise SinkSchemaError(
            f"[kafka-eos] Required attribute 'value' not found in the input columns {sorted(by_name)}")
    for name, (types, described) in _SINK_COLUMNS.items():
        if name in by_name and not isinstance(by_name[name], types):
            raise SinkSchemaError(
                f"[kafka-eos] {name} attribute type must be {described}, got {by_name[name].simpleString()}")
    if "headers" in by_name:
        element = by_name["headers"].elementType  # type: ignore[attr-defined]
        fields = {f.name: f.dataType for f in getattr(element, "fields", [])}
        if not isinstance(fields.get("key"), StringType) or not isinstance(fields.get("value"), BinaryType):
            raise SinkSchemaError(
                "[kafka-eos] headers attribute type must be array<struct<key: string, value: binary>>, "
                f"got {by_name['headers'].simpleString()}")
    if "topic" not in by_name and not default_topic:
        raise SinkSchemaError(
            "[kafka-eos] topic option required when no 'topic' attribute is present in the input "
            f"columns {sorted(by_name)}")
