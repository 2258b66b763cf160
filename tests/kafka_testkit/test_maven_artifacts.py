"""The pure parts of the Maven resolution (connectors/servers/maven_artifacts.py) and the version
fallback of Spark's Kafka connector (kafka_testkit/spark_kafka_connector.py).

No test here runs ``mvn`` or touches the network: ``_run_mvn`` and the resolver are replaced, and
the cache is a temporary folder (``KAFKA_EOS_CACHE_DIR``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import pytest

from connectors.servers import maven_artifacts
from kafka_testkit import spark_kafka_connector
from connectors.servers.maven_artifacts import (
    CACHE_ENV,
    Artifact,
    MavenUnavailableError,
    ResolvedJars,
    cache_dir,
    nearest_versions,
    pick_version,
    resolve_jars,
)
from kafka_testkit.spark_kafka_connector import (
    SparkKafkaConnector,
    SparkKafkaConnectorError,
    jar_artifact,
    resolve_connector,
    split_clashing,
)

RELEASES = ["3.9.0", "3.9.1", "4.0.0", "4.0.1", "4.1.0", "4.1.1", "4.2.0"]


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets a cache of its own, and no test can reach the real mvn."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(maven_artifacts, "mvn_executable", lambda: "/no/mvn")

    def no_mvn(pom: str, goals: Sequence[str], what: str) -> str:
        raise AssertionError(f"a unit test ran mvn for {what}")

    monkeypatch.setattr(maven_artifacts, "_run_mvn", no_mvn)
    return tmp_path / "cache"


# -- maven_artifacts: versions ----------------------------------------------------------------------

@pytest.mark.parametrize(("spec", "expected"), [
    ("4", ["4.2.0", "4.1.1", "4.1.0", "4.0.1", "4.0.0"]),
    ("4.1", ["4.1.1", "4.1.0"]),
    ("3.9", ["3.9.1", "3.9.0"]),
    ("4.0.1", ["4.0.1"]),
    ("5", []),
    ("4.3.0", []),
])
def test_pick_version_newest_matching_first(spec: str, expected: list[str]) -> None:
    assert pick_version(spec, RELEASES) == expected


def test_pick_version_compares_numbers_not_strings() -> None:
    assert pick_version("4", ["4.9.0", "4.10.0", "4.2.0"]) == ["4.10.0", "4.9.0", "4.2.0"]


def test_nearest_versions_exact_then_older_of_the_major_then_newer() -> None:
    assert nearest_versions("4.1.0", RELEASES) == ["4.1.0", "4.0.1", "4.0.0", "4.1.1", "4.2.0"]


def test_nearest_versions_of_an_unlisted_version_starts_with_the_older_one() -> None:
    # pyspark 4.3.0 before its connector is served: 4.2.0 first, never 3.x
    assert nearest_versions("4.3.0", RELEASES)[:3] == ["4.2.0", "4.1.1", "4.1.0"]
    assert not any(v.startswith("3.") for v in nearest_versions("4.3.0", RELEASES))


def test_nearest_versions_of_an_old_version_lists_newer_ones_oldest_first() -> None:
    assert nearest_versions("3.8.0", RELEASES) == ["3.9.0", "3.9.1", "4.0.0", "4.0.1", "4.1.0", "4.1.1", "4.2.0"]


# -- maven_artifacts: coordinates and cache -------------------------------------------------------------

def test_artifact_parse_and_str_roundtrip() -> None:
    artifact = Artifact.parse("org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0")
    assert artifact == Artifact("org.apache.spark", "spark-sql-kafka-0-10_2.13", "4.2.0")
    assert str(artifact) == "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"


@pytest.mark.parametrize("bad", ["org.apache.kafka:kafka_2.13", "a:b:c:d", "a::1", ""])
def test_artifact_parse_rejects_what_is_not_group_artifact_version(bad: str) -> None:
    with pytest.raises(ValueError, match="group:artifact:version"):
        Artifact.parse(bad)


def test_cache_dir_explicit_wins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "explicit"


def test_cache_dir_expands_the_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv(CACHE_ENV, "~/kit-cache")
    assert cache_dir() == tmp_path / "kit-cache"


def test_cache_dir_xdg_then_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(CACHE_ENV, "  ")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "pyspark-kafka-eos"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "pyspark-kafka-eos"


def _fake_mvn(calls: list[str], names: Sequence[str]):  # type: ignore[no-untyped-def]
    """A ``_run_mvn`` that "copies" ``names`` into the -DoutputDirectory it is given."""

    def run(pom: str, goals: Sequence[str], what: str) -> str:
        calls.append(what)
        assert "dependency:copy-dependencies" in goals and "-DincludeScope=runtime" in goals
        output = Path(next(g for g in goals if g.startswith("-DoutputDirectory=")).split("=", 1)[1])
        for name in names:
            (output / name).write_bytes(b"PK")
        return ""

    return run


def test_resolve_jars_runs_mvn_once_then_reads_the_manifest(monkeypatch: pytest.MonkeyPatch, _cache: Path) -> None:
    calls: list[str] = []
    names = ["kafka-clients-3.9.2.jar", "spark-sql-kafka-0-10_2.13-4.2.0.jar"]
    monkeypatch.setattr(maven_artifacts, "_run_mvn", _fake_mvn(calls, names))
    coordinates = ["org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"]

    first = resolve_jars(coordinates, "spark-sql-kafka-4.2.0")
    assert calls == ["org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"]
    assert first.folder == _cache / "maven" / "spark-sql-kafka-4.2.0"
    assert [jar.name for jar in first.jars] == sorted(names)
    assert first.jar_version("kafka-clients") == "3.9.2" and first.jar_version("commons-pool2") is None
    manifest = json.loads((first.folder / "manifest.json").read_text())
    assert manifest["coordinates"] == coordinates and manifest["jars"] == sorted(names)
    assert not [p for p in first.folder.parent.iterdir() if p.name.startswith(".")], "staging folder left"

    second = resolve_jars(coordinates, "spark-sql-kafka-4.2.0")
    assert calls == ["org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"], "mvn ran again"
    assert second == first


def test_resolve_jars_again_when_a_jar_is_gone_or_the_coordinates_differ(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(maven_artifacts, "_run_mvn", _fake_mvn(calls, ["a-1.0.jar"]))
    resolved = resolve_jars(["g:a:1.0"], "a")
    resolved.jars[0].unlink()
    resolve_jars(["g:a:1.0"], "a")
    resolve_jars(["g:a:1.1"], "a")
    assert len(calls) == 3


def test_resolve_jars_without_any_jar_fails_in_one_line(monkeypatch: pytest.MonkeyPatch, _cache: Path) -> None:
    monkeypatch.setattr(maven_artifacts, "_run_mvn", _fake_mvn([], []))
    with pytest.raises(MavenUnavailableError, match="resolved no jar for g:a:1.0") as raised:
        resolve_jars(["g:a:1.0"], "a")
    assert "\n" not in str(raised.value)
    assert not (_cache / "maven" / "a").exists()


# -- spark_kafka_connector: which jars ------------------------------------------------------------------

@pytest.mark.parametrize(("name", "artifact"), [
    ("spark-sql-kafka-0-10_2.13-4.2.0.jar", "spark-sql-kafka-0-10_2.13"),
    ("spark-token-provider-kafka-0-10_2.13-4.2.0.jar", "spark-token-provider-kafka-0-10_2.13"),
    ("zstd-jni-1.5.7-7.jar", "zstd-jni"),
    ("hadoop-client-runtime-3.5.0.jar", "hadoop-client-runtime"),
    ("lz4-java-1.10.1.jar", "lz4-java"),
    ("scala-parallel-collections_2.13-1.2.0.jar", "scala-parallel-collections_2.13"),
    ("jsr305-3.0.0.jar", "jsr305"),
    ("commons-pool2-2.13.1.jar", "commons-pool2"),
])
def test_jar_artifact_drops_the_version_only(name: str, artifact: str) -> None:
    assert jar_artifact(name) == artifact


def test_only_the_jars_spark_lacks_are_kept(tmp_path: Path) -> None:
    spark_jars = tmp_path / "pyspark-jars"
    spark_jars.mkdir()
    for name in ("hadoop-client-api-3.5.0.jar", "scala-library-2.13.18.jar", "commons-pool-1.5.4.jar"):
        (spark_jars / name).write_bytes(b"PK")
    resolved = [Path(n) for n in ("commons-pool2-2.13.1.jar", "hadoop-client-api-3.4.1.jar", "kafka-clients-3.9.2.jar",
                                  "scala-library-2.13.15.jar")]
    kept, excluded = split_clashing(resolved, spark_jars)
    assert [p.name for p in kept] == ["commons-pool2-2.13.1.jar", "kafka-clients-3.9.2.jar"]
    assert [p.name for p in excluded] == ["hadoop-client-api-3.4.1.jar", "scala-library-2.13.15.jar"]
    assert split_clashing(resolved, None) == (tuple(resolved), ())


# -- spark_kafka_connector: which version ------------------------------------------------------------------

class FakeMaven:
    """``resolve_jars`` and ``release_versions`` of a repository that serves ``served`` only."""

    def __init__(self, folder: Path, served: Sequence[str], listed: Sequence[str] = RELEASES) -> None:
        self.folder, self.served, self.listed = folder, set(served), list(listed)
        self.resolved: list[str] = []
        self.listings = 0

    def resolve_jars(self, coordinates: Sequence[str], cache_name: str) -> ResolvedJars:
        (coordinate,) = coordinates
        version = coordinate.rsplit(":", 1)[1]
        self.resolved.append(version)
        if version not in self.served:
            raise MavenUnavailableError(f"mvn could not resolve {coordinate}: was not found")
        names = [f"spark-sql-kafka-0-10_2.13-{version}.jar", "kafka-clients-3.9.2.jar", "scala-library-2.13.15.jar"]
        return ResolvedJars(tuple(coordinates), self.folder, tuple(self.folder / n for n in names))

    def release_versions(self, group: str, artifact: str) -> list[str]:
        assert (group, artifact) in (("org.apache.spark", "spark-sql-kafka-0-10_2.13"),
                                     ("org.apache.spark", "spark-sql-kafka-0-10_2.12"))
        self.listings += 1
        return self.listed


@pytest.fixture
def spark_jars(tmp_path: Path) -> Path:
    folder = tmp_path / "pyspark-jars"
    folder.mkdir()
    (folder / "scala-library-2.13.18.jar").write_bytes(b"PK")
    return folder


def _maven(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, served: Sequence[str],
           listed: Sequence[str] = RELEASES) -> FakeMaven:
    fake = FakeMaven(tmp_path / "m2", served, listed)
    monkeypatch.setattr(spark_kafka_connector, "resolve_jars", fake.resolve_jars)
    monkeypatch.setattr(spark_kafka_connector, "release_versions", fake.release_versions)
    monkeypatch.setattr(spark_kafka_connector, "mvn_executable", lambda: "/no/mvn")
    return fake


def test_the_exact_pyspark_version_needs_no_listing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                     spark_jars: Path) -> None:
    fake = _maven(monkeypatch, tmp_path, served=["4.1.1"])
    connector = resolve_connector("4.1.1", spark_jars_dir=spark_jars)
    assert connector.exact and connector.version == "4.1.1" and connector.fallback_reason is None
    assert fake.resolved == ["4.1.1"] and fake.listings == 0
    assert [p.name for p in connector.jars] == ["spark-sql-kafka-0-10_2.13-4.1.1.jar", "kafka-clients-3.9.2.jar"]
    assert [p.name for p in connector.excluded] == ["scala-library-2.13.15.jar"]
    assert connector.description == "Spark's Kafka connector 4.1.1 from Maven Central (pyspark's own version)"


def test_an_unserved_version_falls_back_to_the_nearest_served_one(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                                   spark_jars: Path) -> None:
    fake = _maven(monkeypatch, tmp_path, served=["4.1.1", "4.2.0"])
    connector = resolve_connector("4.3.0", spark_jars_dir=spark_jars)
    assert fake.resolved == ["4.3.0", "4.2.0"]
    assert connector.version == "4.2.0" and not connector.exact
    assert connector.description == ("Spark's Kafka connector 4.2.0 from Maven Central "
                                      "(pyspark is 4.3.0; 4.3.0 is not served)")
    assert connector.fallback_reason is not None and "4.3.0" in connector.fallback_reason
    assert connector.spark_jars.endswith("spark-sql-kafka-0-10_2.13-4.2.0.jar," + str(tmp_path / "m2" /
                                                                                       "kafka-clients-3.9.2.jar"))


def test_a_fallback_is_remembered_so_the_next_session_runs_no_failing_mvn(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, spark_jars: Path) -> None:
    fake = _maven(monkeypatch, tmp_path, served=["4.2.0"])
    resolve_connector("4.3.0", spark_jars_dir=spark_jars)
    fake.resolved.clear()
    again = resolve_connector("4.3.0", spark_jars_dir=spark_jars)
    assert fake.resolved == ["4.2.0"] and fake.listings == 1
    assert again.version == "4.2.0" and "4.3.0 is not served" in again.description


def test_a_stale_pick_tries_the_exact_version_again(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                    spark_jars: Path) -> None:
    fake = _maven(monkeypatch, tmp_path, served=["4.2.0"])
    resolve_connector("4.3.0", spark_jars_dir=spark_jars)
    monkeypatch.setattr(maven_artifacts.time, "time", lambda: 10 ** 11)  # the remembered pick ages out
    fake.served.add("4.3.0")
    fake.resolved.clear()
    assert resolve_connector("4.3.0", spark_jars_dir=spark_jars).exact
    assert fake.resolved == ["4.3.0"]


def test_at_most_max_tries_versions_are_tried_and_the_error_names_them(monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path, spark_jars: Path) -> None:
    monkeypatch.setattr(spark_kafka_connector, "MAX_TRIES", 3)
    fake = _maven(monkeypatch, tmp_path, served=["4.0.0"])
    with pytest.raises(SparkKafkaConnectorError) as raised:
        resolve_connector("4.3.0", spark_jars_dir=spark_jars)
    assert fake.resolved == ["4.3.0", "4.2.0", "4.1.1"]
    message = str(raised.value)
    assert "\n" not in message and "tried 4.3.0, 4.2.0, 4.1.1" in message and "pyspark 4.3.0" in message


def test_spark_3s_connector_is_scala_2_12s_and_spark_4s_2_13s() -> None:
    assert spark_kafka_connector.artifact_for("3.5.9") == "spark-sql-kafka-0-10_2.12"
    assert spark_kafka_connector.artifact_for("4.0.5") == "spark-sql-kafka-0-10_2.13"


def test_a_lines_newest_patch_goes_back_to_the_first_release_maven_serves(monkeypatch: pytest.MonkeyPatch,
                                                                         tmp_path: Path, spark_jars: Path) -> None:
    # Maven Central serves Spark's connector 4.0.0, not pyspark's 4.0.5 (nor 4.0.1 to 4.0.4).
    listed = ["3.5.7", "4.0.0", "4.0.1", "4.0.2", "4.0.3", "4.0.4", "4.0.5", "4.1.1"]
    fake = _maven(monkeypatch, tmp_path, served=["4.0.0", "4.1.1"], listed=listed)
    connector = resolve_connector("4.0.5", spark_jars_dir=spark_jars)
    assert connector.version == "4.0.0" and not connector.exact
    assert fake.resolved[0] == "4.0.5" and fake.resolved[-1] == "4.0.0"


def test_no_fallback_to_another_major_version(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                              spark_jars: Path) -> None:
    # a Spark 4 connector is built for another Spark (and Scala): it would not load on Spark 3
    fake = _maven(monkeypatch, tmp_path, served=["4.0.0"], listed=["3.9.1", "4.0.0"])
    with pytest.raises(SparkKafkaConnectorError, match="tried 3.9.2, 3.9.1;"):
        resolve_connector("3.9.2", spark_jars_dir=spark_jars)
    assert fake.resolved == ["3.9.2", "3.9.1"]
    _maven(monkeypatch, tmp_path, served=["4.0.0"], listed=["4.0.0"])
    with pytest.raises(SparkKafkaConnectorError, match="Maven lists no other 3.x release"):
        resolve_connector("3.9.2", spark_jars_dir=spark_jars)


def test_a_failed_listing_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, spark_jars: Path) -> None:
    _maven(monkeypatch, tmp_path, served=[])

    def no_listing(group: str, artifact: str) -> list[str]:
        raise MavenUnavailableError("Maven lists no release of org.apache.spark:spark-sql-kafka-0-10_2.13")

    monkeypatch.setattr(spark_kafka_connector, "release_versions", no_listing)
    with pytest.raises(SparkKafkaConnectorError, match="listing versions: Maven lists no release"):
        resolve_connector("4.3.0", spark_jars_dir=spark_jars)


def test_no_mvn_fails_once_without_trying_versions(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                   spark_jars: Path) -> None:
    fake = _maven(monkeypatch, tmp_path, served=["4.3.0"])

    def missing() -> str:
        raise MavenUnavailableError("no 'mvn' on PATH")

    monkeypatch.setattr(spark_kafka_connector, "mvn_executable", missing)
    with pytest.raises(MavenUnavailableError, match="no 'mvn' on PATH"):
        resolve_connector("4.3.0", spark_jars_dir=spark_jars)
    assert fake.resolved == []


def test_the_connector_result_is_plain_data() -> None:
    connector = SparkKafkaConnector((Path("/a.jar"), Path("/b.jar")), "4.2.0", "4.2.0")
    assert connector.exact and connector.spark_jars == "/a.jar,/b.jar"
