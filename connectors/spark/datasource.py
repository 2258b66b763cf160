"""The ``kafka-eos`` Python data source: Spark's Kafka connector, exactly-once on the sink side."""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from connectors.spark.options import parse_sink_options, parse_source_options
from connectors.spark.reader import KafkaEosBatchReader, KafkaEosStreamReader
from connectors.spark.schema import source_schema
from connectors.spark.writer import KafkaEosBatchWriter, KafkaEosStreamWriter, prepare_sink

FORMAT = "kafka-eos"


class KafkaEosDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        include_headers = str(self.options.get("includeheaders", "false")).lower() == "true"
        return source_schema(include_headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        return KafkaEosBatchReader(parse_source_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaEosStreamReader(parse_source_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        options = parse_sink_options(self.options, streaming=False)
        return KafkaEosBatchWriter(options, schema, prepare_sink(options, schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        options = parse_sink_options(self.options, streaming=True)
        return KafkaEosStreamWriter(options, schema, prepare_sink(options, schema))
