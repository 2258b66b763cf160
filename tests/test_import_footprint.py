"""What a Python process Spark starts for the data source has to import (issue 11).

Spark starts a Python process of its own for each planning step of a query (create the source,
plan the read, run the streaming source, run the sink's commits) and each unpickles
``KafkaEosDataSource``: whatever its module imports, every one of them pays for. These run in a
fresh interpreter, so that modules other tests imported do not hide an import."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("pyspark")

HEAVY = ("pyarrow", "confluent_kafka", "kafka", "tenacity", "twophase.coordinator", "twophase.storage.state_storage",
         "connectors.spark.datasource_readers", "connectors.spark.datasource_writers")


def loaded_after(statement: str) -> set[str]:
    probe = (f"import sys, json\n{statement}\n"
             f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))")
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True).stdout
    return set(json.loads(out.splitlines()[-1]))


def test_unpickling_the_data_source_and_asking_its_schema_loads_no_client_and_no_arrow():
    statement = ("from connectors.spark.datasource import KafkaEosDataSource\n"
                 "KafkaEosDataSource({'includeheaders': 'true'}).schema()")
    assert loaded_after(statement) == set()


def test_the_protocol_core_errors_and_failpoints_do_not_import_the_core():
    assert loaded_after("import twophase.errors, twophase.failpoints") == set()


def test_the_package_still_exports_the_core_on_first_use():
    assert "twophase.coordinator" in loaded_after("from twophase import CheckpointCoordinator")


def test_a_stream_reader_loads_the_reader_not_the_sink():
    statement = ("from connectors.spark.datasource import KafkaEosDataSource\n"
                 "KafkaEosDataSource({'kafka.bootstrap.servers': 'fake-kafka:///tmp/x.db', 'subscribe': 't'})"
                 ".streamReader(None)")
    loaded = loaded_after(statement)
    assert "connectors.spark.datasource_readers" in loaded
    assert "connectors.spark.datasource_writers" not in loaded and "kafka" not in loaded


def test_the_librdkafka_clients_import_no_kafka_python_until_an_error_is_classified():
    # Every Python process of a query (each task worker, the source runner, the read planning)
    # imports the librdkafka clients; kafka-python's package costs ~0.1 s to import in each.
    statement = ("import connectors.kafka.clients._confluent.backend, connectors.spark.datasource_readers, "
                 "connectors.spark.task_writer")
    assert "kafka" not in loaded_after(statement)
    classified = statement + ("\nfrom connectors.kafka.clients.error_table import error_type\n"
                              "from connectors.kafka.kafka_errors import RetriableKafkaError\n"
                              "assert error_type(15) is RetriableKafkaError  # Kafka's own class of COORDINATOR_NOT_AVAILABLE")
    assert "kafka" in loaded_after(classified)


def test_the_sinks_commit_loads_no_arrow_with_its_state_on_a_local_path(tmp_path):
    # The commit runner unpickles the tasks' messages and opens the state; pyarrow (~0.1 s) is for
    # the tasks, and for state on the stores pyarrow.fs serves.
    statement = ("import pickle\n"
                 "from connectors.spark.datasource_writers import KafkaCommitMessage\n"
                 "from twophase.checkpoint_store import FileCheckpointStore\n"
                 "pickle.loads(pickle.dumps(KafkaCommitMessage(0, 0, 0, None, 0)))\n"
                 f"FileCheckpointStore({str(tmp_path)!r}, 2).latest()")
    assert "pyarrow" not in loaded_after(statement)


# What the `tools` extra brings (the command-line tools, plots, metrics, the Docker broker): none
# of it is installed on a lean install's executors (issue 27), so the sink and the source must not
# import any of it. And pandas: a base dependency since issue 53, for pyspark's own check in
# mapInArrow, but imports (tenths of a second) that no task of the kit needs.
TOOLS_ONLY = ("rich", "matplotlib", "testcontainers", "prometheus_client", "pandas", "docker")


def tools_loaded_after(statement: str) -> set[str]:
    probe = (f"import sys, json\n{statement}\n"
             f"print(json.dumps(sorted(m for m in {TOOLS_ONLY!r} if m in sys.modules)))")
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True).stdout
    return set(json.loads(out.splitlines()[-1]))


@pytest.mark.parametrize("statement", [
    "import connectors.spark",
    "import connectors.spark.datasource_readers, connectors.spark.datasource_writers, connectors.spark.task_writer",
    "import connectors.spark.foreach_batch, connectors.spark.foreach_batch_writer, connectors.spark.sink_driver",
    "import connectors.spark.failures, connectors.monitoring.metrics_listener",
    "import connectors.kafka.sink.kafka_sink, connectors.kafka.source, connectors.kafka.sink.committer",
    "import twophase.coordinator, twophase.lifecycle, twophase.pipeline",
    "import connectors.worker_python, connectors.tools.command",
])
def test_the_sink_and_the_source_import_nothing_of_the_tools_extra(statement):
    assert tools_loaded_after(statement) == set()
