"""Spark's Kafka record schema, and the checks Spark's Kafka sink makes on its input columns.

No pyarrow here: the planner processes that ask only for the schema do not load it
(``arrow_batches.py`` has the Arrow side)."""

from __future__ import annotations

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

from connectors.spark.spark_errors import SinkSchemaError

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
