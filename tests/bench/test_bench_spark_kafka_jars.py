"""The bench's runs on Spark's own Kafka connector: where its jars come from, and the skip reason
when they are absent (bench/spark_kafka_jars.py, bench/run_bench.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import run_bench  # noqa: E402
import spark_kafka_jars  # noqa: E402
from spark_kafka_jars import ENV_VAR, resolve  # noqa: E402

from connectors.servers.maven_artifacts import MavenUnavailableError  # noqa: E402
from kafka_testkit.spark_kafka_connector import SparkKafkaConnector  # noqa: E402

MAVEN_FAILURE = "Spark's Kafka connector for pyspark 4.3.0 from Maven Central: tried 4.3.0, 4.2.0; no mvn"

NAMES = ("spark-sql-kafka-0-10_2.13-4.3.0.jar", "spark-token-provider-kafka-0-10_2.13-4.3.0.jar",
         "kafka-clients-4.1.1.jar", "commons-pool2-2.12.1.jar")


def _no_maven() -> SparkKafkaConnector:
    raise MavenUnavailableError(MAVEN_FAILURE)


@pytest.fixture(autouse=True)
def _never_mvn(monkeypatch: pytest.MonkeyPatch) -> None:
    """No unit test runs mvn: the Maven fallback fails unless a test gives a resolver."""
    monkeypatch.setattr(spark_kafka_jars, "resolve_connector", _no_maven)


def _jars(folder: Path, names: tuple[str, ...] = NAMES) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in names:
        (folder / name).write_bytes(b"PK")
        paths.append(folder / name)
    return paths


def test_a_directory_gives_every_jar_in_it(tmp_path: Path) -> None:
    paths = _jars(tmp_path / "jars")
    (tmp_path / "jars" / "NOTES.md").write_text("not a jar")
    found = resolve(str(tmp_path / "jars"), environ={})
    assert found.skip_reason is None
    assert set(found.jars) == set(paths)
    assert found.source == "--spark-kafka-jars"


def test_comma_separated_paths_in_order(tmp_path: Path) -> None:
    paths = _jars(tmp_path)
    found = resolve(",".join(map(str, reversed(paths))), environ={})
    assert found.skip_reason is None
    assert found.spark_jars == ",".join(map(str, reversed(paths)))


def test_the_environment_variable_when_no_option(tmp_path: Path) -> None:
    _jars(tmp_path / "jars")
    found = resolve(None, environ={ENV_VAR: str(tmp_path / "jars")})
    assert found.skip_reason is None and found.source == ENV_VAR
    assert len(found.jars) == 4


def test_the_option_wins_over_the_environment(tmp_path: Path) -> None:
    _jars(tmp_path / "a")
    found = resolve(str(tmp_path / "a"), environ={ENV_VAR: str(tmp_path / "elsewhere")})
    assert found.skip_reason is None and found.source == "--spark-kafka-jars"


def test_nothing_given_and_no_maven_names_the_option_the_variable_and_what_maven_tried() -> None:
    found = resolve(None, environ={})
    assert found.jars == ()
    assert "--spark-kafka-jars" in found.skip_reason and ENV_VAR in found.skip_reason
    assert MAVEN_FAILURE in found.skip_reason


def test_nothing_given_falls_back_to_maven_and_the_source_names_its_version(tmp_path: Path) -> None:
    paths = tuple(_jars(tmp_path / "m2", tuple(name.replace("4.3.0", "4.2.0") for name in NAMES)))
    connector = SparkKafkaConnector(paths, "4.2.0", "4.3.0", fallback_reason="4.3.0: not found")
    found = resolve(None, environ={}, resolver=lambda: connector)
    assert found.skip_reason is None
    assert found.jars == paths
    assert "4.2.0" in found.source and "Maven Central" in found.source and "4.3.0 is not served" in found.source


def test_maven_is_the_default_resolver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    paths = tuple(_jars(tmp_path))
    monkeypatch.setattr(spark_kafka_jars, "resolve_connector",
                        lambda: SparkKafkaConnector(paths, "4.3.0", "4.3.0"))
    found = resolve(None, environ={})
    assert found.skip_reason is None and "4.3.0" in found.source and "pyspark's own version" in found.source


def test_the_environment_variable_wins_over_maven(tmp_path: Path) -> None:
    _jars(tmp_path / "jars")

    def fail() -> SparkKafkaConnector:
        raise AssertionError("Maven was asked although the variable is set")

    found = resolve(None, environ={ENV_VAR: str(tmp_path / "jars")}, resolver=fail)
    assert found.skip_reason is None and found.source == ENV_VAR


def test_a_missing_jar_is_named(tmp_path: Path) -> None:
    _jars(tmp_path, NAMES[:3])
    found = resolve(str(tmp_path), environ={})
    assert found.skip_reason is not None and "commons-pool2" in found.skip_reason
    assert "kafka-clients" not in found.skip_reason.split("no ", 1)[1]


def test_a_path_that_does_not_exist_is_named(tmp_path: Path) -> None:
    found = resolve(str(tmp_path / "nowhere"), environ={})
    assert found.skip_reason is not None and "nowhere does not exist" in found.skip_reason


def test_runs_on_spark_connector_are_skipped_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    args = run_bench.parse_args(["--runs", "spark_builtin,spark_builtin_source_restart,spark_eos"])
    selected = run_bench.selected_runs(args)
    skipped: dict[str, str] = {}
    assert run_bench.skip_spark_connector_runs(args, selected, skipped).skip_reason
    assert selected == ["spark_eos"]
    assert set(skipped) == {"spark_builtin", "spark_builtin_source_restart"}
    assert all(ENV_VAR in why and MAVEN_FAILURE in why for why in skipped.values())


def test_runs_on_spark_connector_get_its_formats_and_jars(tmp_path: Path) -> None:
    _jars(tmp_path / "jars")
    args = run_bench.parse_args(["--runs", "spark_builtin,spark_builtin_source,spark_builtin_restart",
                                 "--spark-kafka-jars", str(tmp_path / "jars")])
    selected = run_bench.selected_runs(args)
    skipped: dict[str, str] = {}
    jars = run_bench.skip_spark_connector_runs(args, selected, skipped)
    assert not skipped
    runs = run_bench.build_runs(args, "127.0.0.1:9092", "in", "stamp", tmp_path, None, selected, None, jars)

    def value(run: run_bench.Run, flag: str) -> str:
        return run.command[run.command.index(flag) + 1]

    builtin, source, restart = runs["spark_builtin"], runs["spark_builtin_source"], runs["spark_builtin_restart"]
    assert (value(builtin, "--source-format"), value(builtin, "--sink-format")) == ("kafka", "kafka")
    assert builtin.guarantee == "at_least_once"  # Spark's own sink
    assert (value(source, "--source-format"), value(source, "--sink-format")) == ("kafka", "kafka-eos")
    assert source.guarantee == "exactly_once" and value(source, "--delivery-guarantee") == "exactly_once"
    assert value(builtin, "--jars") == jars.spark_jars
    assert restart.config in run_bench.RESTART_RUNS
