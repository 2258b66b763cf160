"""The names Spark knows the kit's data source by, in a module of their own: the foreachBatch sink,
the JVM provider and the tools name them on every Spark, also on Spark 3.5, which lacks the Python
data source API that ``datasource.py`` needs."""

#: What users write: ``format("kafka-eos")``.
FORMAT = "kafka-eos"
#: The Python data source's own name where the kit's JVM provider carries ``FORMAT`` (it lets Spark
#: run update output mode, connectors/spark/jvm_provider.py); never written by users. The provider
#: (jvm/src/kafkaeos/spark/KafkaEosTableProvider.java) holds both names too.
PYTHON_SOURCE = "kafka-eos-python"

__all__ = ["FORMAT", "PYTHON_SOURCE"]
