"""PySpark adapters: the ``kafka-eos`` format and the exactly-once foreachBatch helper.

    from connectors.spark import register
    register(spark)
    spark.readStream.format("kafka-eos").option("kafka.bootstrap.servers", ...).option("subscribe", "in").load()

The registration lives in ``registration.py``; this package exports it.
"""

from __future__ import annotations

from connectors.spark.format_names import FORMAT
from connectors.spark.spark_errors import SpeculationNotSupportedError, UnsupportedSparkError
from connectors.spark.spark_versions import check_installed_packages

# Every Spark entry (driver, tasks, the data source's processes) imports this package first.
check_installed_packages()

from connectors.spark.registration import data_source_to_register, register, use_session_python  # noqa: E402

__all__ = ["FORMAT", "SpeculationNotSupportedError", "UnsupportedSparkError", "data_source_to_register", "register",
           "use_session_python"]
