"""The ``kafka-eos`` Python data source: Spark's Kafka connector, exactly-once on the sink side."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource

if TYPE_CHECKING:
    from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, DataSourceStreamWriter, DataSourceWriter
    from pyspark.sql.types import StructType

FORMAT = "kafka-eos"


# Spark starts a Python process of its own for each planning step (creating the source, planning a
# read, running the streaming source and the sink's commits), and each one unpickles this class.
# The imports are therefore made where a step needs them: a process that only asks for the schema
# does not load the reader, the sink, Kafka clients or pyarrow (tests/test_import_footprint.py).
class KafkaEosDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        from connectors.spark.schema import source_schema

        include_headers = str(self.options.get("includeheaders", "false")).lower() == "true"
        return source_schema(include_headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        from connectors.spark.options import parse_source_options
        from connectors.spark.reader import KafkaEosBatchReader

        return KafkaEosBatchReader(parse_source_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from connectors.spark.options import parse_source_options
        from connectors.spark.reader import KafkaEosStreamReader

        return KafkaEosStreamReader(parse_source_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from connectors.spark.options import parse_sink_options
        from connectors.spark.datasource_writers import KafkaEosBatchWriter, prepare_sink

        options = parse_sink_options(self.options, streaming=False)
        return KafkaEosBatchWriter(options, schema, prepare_sink(options, schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from connectors.spark.options import parse_sink_options
        from connectors.spark.datasource_writers import KafkaEosStreamWriter, prepare_sink

        options = parse_sink_options(self.options, streaming=True)
        return KafkaEosStreamWriter(options, schema, prepare_sink(options, schema))
