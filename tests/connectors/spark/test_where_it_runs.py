"""Where the kit runs: the Python of Spark's workers on a local master (the session's, unless the
user chose one), the one line for workers whose Python lacks the kit, and the one line for a
missing output topic (the sink's driver-side check, on the fake cluster)."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from connectors.kafka.sink.config import KafkaSinkConfig
from connectors.kafka.kafka_errors import UnknownTopicError
from connectors.kafka.sink import guardrails
from connectors.kafka.sink.guardrails import check_output_topic, missing_topic_message
from connectors.spark.failures import kit_error_lines, missing_kit_module, worker_python_message
from connectors import worker_python
from connectors.simulated_kafka import FakeKafkaClients


# -- the Python of Spark's workers ------------------------------------------------------------------

class _Conf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, name: str, default: str | None = None) -> str | None:
        return self.values.get(name, default)


class _Context:
    """What use_session_python reads of a SparkContext."""

    def __init__(self, master: str, python_exec: str = "python3", conf: dict[str, str] | None = None) -> None:
        self.master = master
        self.pythonExec = python_exec
        self._conf = _Conf(conf or {})

    def getConf(self) -> _Conf:  # noqa: N802 (SparkContext's name)
        return self._conf


@pytest.fixture
def no_python_chosen(monkeypatch):
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.delenv(worker_python.DISABLE_ENV, raising=False)


@pytest.mark.parametrize("master", ["local", "local[2]", "local[*]", "local[2,4]", "local-cluster[2,1,1024]"])
def test_a_local_master_gets_the_session_python(no_python_chosen, master):
    context = _Context(master)
    assert worker_python.use_session_python(context) == worker_python.path()
    assert context.pythonExec == worker_python.path()
    # The launcher lies next to this interpreter (or is it), so workers see the same packages.
    assert Path(context.pythonExec).parent == Path(sys.executable).parent


def test_without_the_launcher_the_plain_interpreter(no_python_chosen, monkeypatch):
    monkeypatch.setenv(worker_python.DISABLE_ENV, "0")
    context = _Context("local[2]")
    assert worker_python.use_session_python(context) == sys.executable


@pytest.mark.parametrize("master", ["yarn", "spark://host:7077", "k8s://https://api:6443", "mesos://m:5050"])
def test_a_cluster_master_keeps_its_python(no_python_chosen, master):
    context = _Context(master)
    assert worker_python.use_session_python(context) is None
    assert context.pythonExec == "python3"


def test_a_python_the_user_chose_is_kept(no_python_chosen, monkeypatch):
    configured = _Context("local[2]", conf={"spark.pyspark.python": "/opt/py/bin/python"})
    assert worker_python.use_session_python(configured) is None and configured.pythonExec == "python3"
    changed = _Context("local[2]", python_exec="/opt/py/bin/python")
    assert worker_python.use_session_python(changed) is None and changed.pythonExec == "/opt/py/bin/python"
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/py/bin/python")
    from_env = _Context("local[2]")
    assert worker_python.use_session_python(from_env) is None and from_env.pythonExec == "python3"


def test_a_spark_connect_session_is_left_alone(no_python_chosen):
    class _Connect:
        @property
        def master(self):
            raise RuntimeError("[JVM_ATTRIBUTE_NOT_SUPPORTED] sparkContext is not supported in Spark Connect")

    assert worker_python.use_session_python(_Connect()) is None


# -- workers whose Python lacks the kit ---------------------------------------------------------------

# What a query's failure holds when a worker could not unpickle the kit's writer (abridged).
_WORKER_TRACE = """[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: Job aborted due to stage failure:
Task 0 in stage 0.0 failed 4 times, most recent failure: Lost task 0.3 in stage 0.0 (TID 3) (127.0.0.1 executor 0):
org.apache.spark.api.python.PythonException: Traceback (most recent call last):
  File "/spark/python/lib/pyspark.zip/pyspark/worker.py", line 3295, in main
    func, profiler, deserializer, serializer = read_command(pickleSer, infile)
  File "/spark/python/lib/pyspark.zip/pyspark/serializers.py", line 473, in loads
    return cloudpickle.loads(obj, encoding=encoding)
ModuleNotFoundError: No module named '{module}'

\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(PythonRunner.scala:624)
"""


@pytest.mark.parametrize("module", ["connectors", "connectors.spark.datasource_writers", "twophase", "tenacity", "pyarrow"])
def test_a_worker_without_the_kit_gives_one_line_naming_the_fix(module):
    lines = kit_error_lines(_WORKER_TRACE.format(module=module))
    assert lines == [worker_python_message(module)]
    assert "PYSPARK_PYTHON" in lines[0] and "spark.archives" in lines[0] and "\n" not in lines[0]
    assert kit_error_lines(RuntimeError(_WORKER_TRACE.format(module=module))) == lines


def test_a_missing_module_of_the_users_own_is_not_the_kits():
    assert kit_error_lines(_WORKER_TRACE.format(module="numpy")) == []
    assert missing_kit_module(_WORKER_TRACE.format(module="connectors_of_mine")) is None


def test_the_kits_own_error_line_is_not_repeated():
    text = _WORKER_TRACE.format(module="connectors") + (
        "connectors.spark.spark_errors.WorkerPythonError: " + worker_python_message("connectors", "/usr/bin/python3") + "\n")
    assert kit_error_lines(text) == [worker_python_message("connectors", "/usr/bin/python3")]


# -- a missing output topic ---------------------------------------------------------------------------

@pytest.fixture
def fake(tmp_path, monkeypatch):
    monkeypatch.setattr(guardrails, "TOPIC_RECHECK_S", 0.0)
    clients = FakeKafkaClients(tmp_path / "kafka.db")
    clients.admin().create_topic("out", 3)
    return clients


def _config(fake, **overrides) -> KafkaSinkConfig:
    return KafkaSinkConfig(**{"bootstrap_servers": fake.bootstrap_servers, "topic": "out",
                              "transactional_id_prefix": "job", **overrides})


@pytest.mark.parametrize("guarantee", ["exactly_once", "at_least_once", "none"])
def test_a_missing_output_topic_is_one_line_naming_it_and_how_to_create_it(fake, guarantee):
    with pytest.raises(UnknownTopicError) as missing:
        check_output_topic(_config(fake, topic="orders-out", delivery_guarantee=guarantee), fake)
    message = str(missing.value)
    assert message == missing_topic_message("orders-out", fake.bootstrap_servers)
    assert message.startswith("output topic 'orders-out' does not exist on ")
    assert f"kafka-topics.sh --bootstrap-server {fake.bootstrap_servers} --create --topic orders-out" in message
    assert "\n" not in message
    assert missing.value.__cause__ is None and missing.value.__suppress_context__
    assert kit_error_lines(missing.value) == [message]
    assert fake.admin().list_topics() == ["out"]  # the check creates nothing


def test_an_existing_topic_passes(fake):
    check_output_topic(_config(fake), fake)
    check_output_topic(_config(fake, delivery_guarantee="none"), fake)


def test_brokers_that_create_topics_on_first_use_are_trusted_with_a_warning(fake, caplog):
    fake.configure(**{"auto.create.topics.enable": "true"})
    check_output_topic(_config(fake, topic="created-on-first-write", delivery_guarantee="at_least_once"), fake)
    assert "created-on-first-write" in caplog.text and "auto.create.topics.enable=true" in caplog.text


def test_rows_naming_their_topics_are_not_checked(fake):
    check_output_topic(_config(fake, topic=None, delivery_guarantee="at_least_once"), fake)


# -- on Spark local -----------------------------------------------------------------------------------

def _python_without_the_kit(where: Path) -> str:
    """A venv seeing this environment's packages (pyarrow, ...) but not the kit: its path includes
    this one's site-packages without running its .pth files (the editable install of the kit), and
    a finder refuses the kit's packages, which Spark's local workers would otherwise find in their
    working folder (this checkout)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    python = where / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    Path(site, "no_kit.py").write_text(
        "class NoKit:\n"
        "    @staticmethod\n"
        "    def find_spec(name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('connectors', 'twophase'):\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "        return None\n")
    Path(site, "no_kit.pth").write_text("import sys, no_kit; sys.meta_path.insert(0, no_kit.NoKit)\n")
    return str(python)


@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    pytest.importorskip("pyspark")
    from pyspark.sql import SparkSession

    # As a job run without choosing a Python, for the whole module: other modules of this process
    # set PYSPARK_PYTHON, and register() leaves a Python the user chose alone (its workers would
    # run python3 from PATH, whichever test ran first).
    chosen = os.environ.pop("PYSPARK_PYTHON", None)
    try:
        session = (SparkSession.builder.master("local[2]").appName("kafka-eos-where-it-runs")
                   .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
                   .config("spark.local.dir", str(tmp_path_factory.mktemp("spark-local"))).getOrCreate())
        session.sparkContext.setLogLevel("ERROR")
        yield session
        session.stop()
    finally:
        if chosen is not None:
            os.environ["PYSPARK_PYTHON"] = chosen


@pytest.mark.spark
def test_register_gives_a_local_session_its_own_python(spark, monkeypatch):
    from connectors.spark import register

    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.delenv(worker_python.DISABLE_ENV, raising=False)
    spark.sparkContext.pythonExec = "python3"  # PySpark's default: python3 from PATH
    register(spark)
    assert spark.sparkContext.pythonExec == worker_python.path()


@pytest.mark.spark
def test_a_batch_write_to_a_missing_topic_fails_with_the_one_line(spark, fake, tmp_path):
    from connectors.spark import register

    register(spark)
    with pytest.raises(Exception) as failed:
        (spark.range(3).selectExpr("cast(id AS string) AS value").write.format("kafka-eos")
         .option("kafka.bootstrap.servers", fake.bootstrap_servers).option("topic", "no-such-topic")
         .option("eos.stateDir", str(tmp_path / "state")).mode("append").save())
    assert kit_error_lines(failed.value) == [missing_topic_message("no-such-topic", fake.bootstrap_servers)]


@pytest.mark.spark
def test_foreach_batch_writes_from_workers_without_the_kit_fail_with_the_one_line(spark, fake, tmp_path):
    from connectors.spark.foreach_batch_writer import write_dataframe
    from connectors.spark.sink_driver import BatchContext
    from connectors.spark.spark_errors import WorkerPythonError
    from connectors.spark.options import parse_sink_options

    python = _python_without_the_kit(tmp_path / "node-python")
    options = parse_sink_options({"kafka.bootstrap.servers": fake.bootstrap_servers, "topic": "out",
                                  "eos.statedir": str(tmp_path / "state")}, streaming=False)
    context = spark.sparkContext
    kept = context.pythonExec
    context.pythonExec = python  # as PYSPARK_PYTHON naming a node's Python without the kit
    try:
        with pytest.raises(WorkerPythonError) as failed:
            write_dataframe(spark.range(3).selectExpr("cast(id AS string) AS value"),
                            options, BatchContext(0, "q"), first_write=True)
    finally:
        context.pythonExec = kept
    assert str(failed.value) == worker_python_message("connectors", python)
    assert kit_error_lines(failed.value) == [str(failed.value)]


@pytest.mark.spark
def test_the_range_probe_of_spark_connect_counts_the_default_parallelism_on_a_real_session(spark):
    # What the foreachBatch helper asks where there is no SparkContext (write_planning.spark_parallelism).
    from connectors.spark.write_planning import range_partitions

    assert range_partitions(spark) == spark.sparkContext.defaultParallelism == 2
