"""register()'s names for the kit's data source with and without its JVM provider
(connectors/spark/jvm_provider.py), on a local Spark session: the jar is the one the project's build
made (pip install builds it); the output modes themselves run on a real broker
(integration_tests/test_output_modes.py)."""

from __future__ import annotations

import logging
import re
import threading
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from connectors.spark import jvm_provider  # noqa: E402
from connectors.spark.datasource import FORMAT, PYTHON_SOURCE, KafkaEosDataSource, KafkaEosPythonSource  # noqa: E402

pytestmark = pytest.mark.spark

JVM = Path(jvm_provider.__file__).resolve().parent / "jvm"


@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[2]").appName("kafka-eos-jvm-provider")
               .config("spark.ui.enabled", "false")
               .config("spark.local.dir", str(tmp_path_factory.mktemp("spark-local"))).getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def _resolved_class(spark) -> str:  # type: ignore[no-untyped-def]
    """The class Spark resolves ``format("kafka-eos")`` to on the calling thread (a Python thread
    has a JVM thread of its own)."""
    jvm = spark.sparkContext._jvm
    conf = spark._jsparkSession.sessionState().conf()
    return jvm.org.apache.spark.sql.execution.datasources.DataSource.lookupDataSource(FORMAT, conf).getName()


def _python_sources(spark) -> set[str]:  # type: ignore[no-untyped-def]
    manager = spark._jsparkSession.sessionState().dataSourceManager()
    return {name for name in (FORMAT, PYTHON_SOURCE) if manager.dataSourceExists(name)}


def test_the_java_provider_holds_the_names_python_registers_under():
    source = (JVM / "src" / "kafkaeos" / "spark" / "KafkaEosTableProvider.java").read_text()
    constants = dict(re.findall(r'static final String (\w+) = "([^"]+)";', source))
    assert constants == {"FORMAT": FORMAT, "PYTHON_SOURCE": PYTHON_SOURCE}
    package = re.search(r"^package ([\w.]+);", source, re.M).group(1)
    assert f"{package}.KafkaEosTableProvider" == jvm_provider.PROVIDER_CLASS
    services = (JVM / "resources" / "META-INF" / "services" / "org.apache.spark.sql.sources.DataSourceRegister")
    assert services.read_text().split() == [jvm_provider.PROVIDER_CLASS]
    assert KafkaEosPythonSource.name() == PYTHON_SOURCE and KafkaEosDataSource.name() == FORMAT


def test_register_puts_the_provider_into_the_driver_for_every_thread(spark, caplog):
    from connectors.spark import register

    assert jvm_provider.JAR.is_file(), f"{jvm_provider.JAR}: run pip install -e . (its build makes the jar)"
    with caplog.at_level(logging.INFO, logger=jvm_provider.__name__):
        register(spark, warm_up=False)
    assert "update mode enabled" in caplog.text
    assert _python_sources(spark) == {PYTHON_SOURCE}  # "kafka-eos" is the JVM provider's
    resolved: dict[str, str] = {}

    def resolve() -> None:
        resolved["thread"] = _resolved_class(spark)

    other = threading.Thread(target=resolve)
    other.start()
    other.join()
    assert resolved == {"thread": jvm_provider.PROVIDER_CLASS}
    assert _resolved_class(spark) == jvm_provider.PROVIDER_CLASS
    frame = (spark.readStream.format(FORMAT).option("kafka.bootstrap.servers", "fake-kafka:///nowhere.db")
             .option("subscribe", "t").load())
    assert frame.columns[:2] == ["key", "value"]  # planned by the Python data source behind it
    # Again (a second query's set-up, a notebook's cell run twice): the provider is there already.
    register(spark, warm_up=False)
    assert _python_sources(spark) == {PYTHON_SOURCE}


def test_without_its_jar_the_format_is_the_python_source_after_one_line_naming_what_to_do(
        spark, monkeypatch, caplog, tmp_path):
    monkeypatch.setattr(jvm_provider, "JAR", tmp_path / "missing.jar")
    # A thread whose context class loader lacks the provider: a driver where nothing added it.
    jvm = spark.sparkContext._jvm
    outcome: dict[str, bool] = {}

    def install_from_a_plain_thread() -> None:
        from connectors.spark import data_source_to_register

        jvm.java.lang.Thread.currentThread().setContextClassLoader(jvm.java.lang.ClassLoader.getSystemClassLoader())
        outcome["installed"] = data_source_to_register(spark) is KafkaEosPythonSource

    with caplog.at_level(logging.INFO, logger=jvm_provider.__name__):
        plain = threading.Thread(target=install_from_a_plain_thread)
        plain.start()
        plain.join()
    assert outcome == {"installed": False}
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert "\n" not in warning
    assert "update output mode" in warning and "missing.jar is missing" in warning
    assert "exactly_once_foreach_batch" in warning


def test_a_driver_whose_class_loader_takes_no_jar_names_spark_jars(spark, caplog):
    jvm = spark.sparkContext._jvm
    outcome: dict[str, bool] = {}

    def install_from_a_plain_thread() -> None:
        jvm.java.lang.Thread.currentThread().setContextClassLoader(jvm.java.lang.ClassLoader.getSystemClassLoader())
        outcome["installed"] = jvm_provider.install(spark)

    with caplog.at_level(logging.WARNING, logger=jvm_provider.__name__):
        plain = threading.Thread(target=install_from_a_plain_thread)
        plain.start()
        plain.join()
    assert outcome == {"installed": False}
    (warning,) = [r.getMessage() for r in caplog.records]
    assert f"spark.jars={jvm_provider.JAR}" in warning and "exactly_once_foreach_batch" in warning


def test_a_provider_that_does_not_link_is_never_put_into_the_driver(spark, monkeypatch, caplog, tmp_path):
    """install() links the provider in a loader of its own before the job's loader takes the jar:
    a jar put there cannot be taken out, and Spark's lookup of every format would meet it."""
    import zipfile

    broken = tmp_path / "broken.jar"
    with zipfile.ZipFile(jvm_provider.JAR) as real, zipfile.ZipFile(broken, "w") as copy:
        for item in real.infolist():
            data = real.read(item)
            if item.filename.endswith("/KafkaEosTableProvider.class"):
                data = data[: len(data) // 2]  # what a Spark whose classes it was not built for meets
            copy.writestr(item, data)
    jvm = spark.sparkContext._jvm
    gateway = spark.sparkContext._gateway
    outcome: dict[str, object] = {}

    def install_with(jar: Path) -> None:
        monkeypatch.setattr(jvm_provider, "JAR", jar)
        # A job's loader of its own (as spark-submit makes), without the provider.
        job_loader = jvm.org.apache.spark.util.MutableURLClassLoader(
            gateway.new_array(jvm.java.net.URL, 0), jvm.java.lang.ClassLoader.getSystemClassLoader())
        jvm.java.lang.Thread.currentThread().setContextClassLoader(job_loader)
        outcome["installed"] = jvm_provider.install(spark)
        outcome["jars"] = [str(url.toString()) for url in job_loader.getURLs()]

    def in_a_plain_thread(jar: Path) -> dict[str, object]:
        outcome.clear()
        thread = threading.Thread(target=install_with, args=(jar,))
        thread.start()
        thread.join()
        return dict(outcome)

    with caplog.at_level(logging.WARNING, logger=jvm_provider.__name__):
        assert in_a_plain_thread(broken) == {"installed": False, "jars": []}
    (warning,) = [r.getMessage() for r in caplog.records]
    assert "\n" not in warning and "does not link on this Spark" in warning and "ClassFormatError" in warning
    assert "exactly_once_foreach_batch" in warning
    linked = in_a_plain_thread(JVM / "kafka-eos-spark-provider.jar")
    assert linked["installed"] is True and len(linked["jars"]) == 1  # type: ignore[arg-type]


class _ConnectSessionRefusingArtifacts:
    """What register() sees of a Spark Connect session whose server takes no artifacts."""

    @property
    def sparkContext(self):  # type: ignore[no-untyped-def]
        raise RuntimeError("[JVM_ATTRIBUTE_NOT_SUPPORTED] sparkContext is not supported in Spark Connect")

    def addArtifacts(self, *paths: str) -> None:
        raise RuntimeError("artifacts are disabled on this server")


def test_a_connect_server_refusing_the_jar_gets_one_line_naming_its_jars_option(caplog):
    with caplog.at_level(logging.WARNING, logger=jvm_provider.__name__):
        assert jvm_provider.install(_ConnectSessionRefusingArtifacts()) is False  # type: ignore[arg-type]
    (warning,) = [r.getMessage() for r in caplog.records]
    assert "\n" not in warning
    assert f"--jars {jvm_provider.JAR}" in warning and "artifacts are disabled" in warning
    assert "exactly_once_foreach_batch" in warning


def test_the_module_prints_the_jars_path(capsys):
    assert jvm_provider.main() == 0
    assert capsys.readouterr().out.strip() == str(jvm_provider.JAR)


def _keeps_state(spark, df) -> bool:  # type: ignore[no-untyped-def]
    """What the provider's write decides its task count by: whether the streaming plan keeps state
    (``WritePlanning.keepsState``, on the plan Spark analysed)."""
    assert jvm_provider.install(spark)
    plan = df._jdf.queryExecution().analyzed()
    return bool(spark.sparkContext._jvm.kafkaeos.spark.WritePlanning.keepsState(plan))


def test_the_provider_asks_for_fewer_write_tasks_only_behind_state(spark):
    """format("kafka-eos") clusters a batch's rows by key into fewer write tasks (so transactions)
    behind a stateful operator, where Spark hands it spark.sql.shuffle.partitions of them; a
    map-only query, and a join of a stream with a static table, keep no state (what they read
    decides, below)."""
    from pyspark.sql.functions import window

    stream = spark.readStream.format("rate").option("rowsPerSecond", "1").load().selectExpr(
        "CAST(value % 10 AS STRING) AS key", "timestamp")
    other = spark.readStream.format("rate").option("rowsPerSecond", "1").load().selectExpr(
        "CAST(value % 10 AS STRING) AS key2", "timestamp AS t2")
    static = spark.range(10).selectExpr("CAST(id AS STRING) AS key3")
    assert _keeps_state(spark, stream.groupBy("key").count())
    assert _keeps_state(spark, stream.withWatermark("timestamp", "5 seconds").dropDuplicates(["key"]))
    assert _keeps_state(spark, stream.withWatermark("timestamp", "5 seconds")
                        .groupBy("key", window("timestamp", "10 seconds")).count())
    assert _keeps_state(spark, stream.join(other, stream.key == other.key2))
    assert not _keeps_state(spark, stream.selectExpr("key", "upper(key) AS value"))
    assert not _keeps_state(spark, stream.join(static, stream.key == static.key3))


def _reads_only_the_kits_source(spark, df) -> bool:  # type: ignore[no-untyped-def]
    assert jvm_provider.install(spark)
    plan = df._jdf.queryExecution().analyzed()
    return bool(spark.sparkContext._jvm.kafkaeos.spark.WritePlanning.readsOnlyTheKitsSource(plan))


def test_the_provider_leaves_a_map_only_query_on_the_kits_source_as_read_and_bounds_any_other(spark):
    """At eos.writeTasks=auto a map-only query's write is clustered into the task slots unless
    every stream it reads is the kit's source, whose read tasks eos.taskSlots already bounds;
    a static side of a join does not count, a second stream of another source does."""
    from connectors.spark import register

    register(spark, warm_up=False)
    kit = (spark.readStream.format("kafka-eos").option("kafka.bootstrap.servers", "127.0.0.1:9")
           .option("subscribe", "in").load().selectExpr("CAST(key AS STRING) AS key", "value"))
    rate = spark.readStream.format("rate").option("rowsPerSecond", "1").load().selectExpr(
        "CAST(value % 10 AS STRING) AS key2", "timestamp")
    static = spark.range(10).selectExpr("CAST(id AS STRING) AS key3")
    assert _reads_only_the_kits_source(spark, kit.selectExpr("key", "upper(key) AS value"))
    assert _reads_only_the_kits_source(spark, kit.join(static, kit.key == static.key3))
    assert not _reads_only_the_kits_source(spark, rate)
    assert not _reads_only_the_kits_source(spark, kit.union(rate.selectExpr("key2 AS key", "CAST(NULL AS BINARY) AS value")))
