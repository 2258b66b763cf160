"""Spark's own Kafka connector (``readStream.format("kafka")``) from Maven Central.

The connector (``org.apache.spark:spark-sql-kafka-0-10_2.13``, ``_2.12`` for Spark 3.5, whose
pyspark runs Scala 2.12) is not part of pyspark, nor on
PyPI. The Apache Spark project publishes it to Maven Central, so the kit resolves it there with the
user's ``mvn`` (``connectors.servers.maven_artifacts``: the user's ``~/.m2/settings.xml`` applies, no
registry host is written here), together with its runtime dependencies: the token provider,
``kafka-clients`` and ``commons-pool2``.

Which version: the installed pyspark's own, because the connector is built against Spark's internal
APIs of that release. A new pyspark may be on PyPI before its connector is served by Maven Central
(or by the user's mirror); then the nearest served release of the same major version is used, and
the result says so (:attr:`SparkKafkaConnector.description`). A version range cannot be resolved in
one ``mvn`` call instead: Spark's parent POM declares a repository of its own that ``mvn`` then
tries to reach for every version of the range; exact versions resolve without it.

Only the jars that pyspark lacks are handed to Spark: the connector's dependencies also bring
``hadoop-client-*``, ``scala-library``, ``slf4j-api``, ``lz4-java``, ``snappy-java`` ... at other
versions than pyspark's own, and two versions of one library on the classpath fail at random. The
jars are compared by artifact name, without versions.

``KAFKA_EOS_SPARK_KAFKA_JARS`` (read by the callers: the integration tests, the bench) names jars
the user provides, and wins over Maven Central.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from connectors.servers.maven_artifacts import (
    MavenUnavailableError,
    mvn_executable,
    nearest_versions,
    release_versions,
    remember_pick,
    remembered_pick,
    resolve_jars,
)

log = logging.getLogger(__name__)

GROUP = "org.apache.spark"
#: The connector's artifact, without its Scala suffix (``_2.13``, or ``_2.12`` on Spark 3.5).
ARTIFACT_STEM = "spark-sql-kafka-0-10"
#: How many versions are tried in all (the exact one first): each failed try costs an ``mvn`` run,
#: once (the pick is remembered). Enough to go back from a line's newest patch to its first release:
#: Maven Central serves 4.0.0 and 4.1.1 of the connector, not pyspark's 4.0.5 and 4.1.4.
MAX_TRIES = 8
#: How long a fallback found for a pyspark version is reused before the exact version is tried
#: again (it may be served by then); within it a session starts with no ``mvn`` run at all.
#: The cache name of the connector version remembered for a pyspark version (maven_artifacts' picks).
_PICK_NAME = "spark-sql-kafka"
#: A jar's version: the first ``-``-separated part of its name that looks like ``1.2...``.
_DOTTED = re.compile(r"^\d+\.\d")


class SparkKafkaConnectorError(MavenUnavailableError):
    """No version of Spark's Kafka connector could be resolved; the message is one line and names
    every version tried."""


@dataclass(frozen=True)
class SparkKafkaConnector:
    """The connector's jars to hand to Spark (``spark.jars``), and where they come from."""

    #: The jars pyspark lacks, for ``spark.jars`` / ``--jars``.
    jars: tuple[Path, ...]
    #: The connector's version.
    version: str
    #: The installed pyspark's version, the one wanted.
    pyspark_version: str
    #: Resolved dependencies left out because pyspark has its own version of them.
    excluded: tuple[Path, ...] = ()
    #: Why the exact version was not used (its error, shortened), when it was not.
    fallback_reason: str | None = None

    @property
    def exact(self) -> bool:
        """Whether the connector is the installed pyspark's own version."""
        return self.version == self.pyspark_version

    @property
    def spark_jars(self) -> str:
        """The value of ``spark.jars`` (comma-separated)."""
        return ",".join(str(jar) for jar in self.jars)

    @property
    def description(self) -> str:
        """One line for logs and reports."""
        if self.exact:
            return f"Spark's Kafka connector {self.version} from Maven Central (pyspark's own version)"
        return (f"Spark's Kafka connector {self.version} from Maven Central "
                f"(pyspark is {self.pyspark_version}; {self.pyspark_version} is not served)")


def installed_pyspark_version() -> str:
    """The installed pyspark's release (``4.1.0.dev2`` gives ``4.1.0``), imported lazily: pyspark is
    only needed by the callers that run Spark."""
    import pyspark

    match = re.match(r"^\d+\.\d+\.\d+", pyspark.__version__)
    if match is None:
        raise SparkKafkaConnectorError(f"pyspark's version {pyspark.__version__!r} is not a Spark release")
    return match.group(0)


def pyspark_jars_dir() -> Path | None:
    """The folder of the jars Spark runs with: pyspark's own ``jars``, else ``$SPARK_HOME/jars``."""
    try:
        import pyspark
    except ImportError:
        pyspark = None  # type: ignore[assignment]
    candidates = []
    if pyspark is not None and pyspark.__file__:
        candidates.append(Path(pyspark.__file__).parent / "jars")
    if os.environ.get("SPARK_HOME"):
        candidates.append(Path(os.environ["SPARK_HOME"]) / "jars")
    return next((folder for folder in candidates if folder.is_dir()), None)


def jar_artifact(name: str) -> str:
    """The artifact name of a jar file named ``<artifact>-<version>.jar``: ``zstd-jni-1.5.7-7.jar``
    gives ``zstd-jni``, ``spark-sql-kafka-0-10_2.13-4.2.0.jar`` gives ``spark-sql-kafka-0-10_2.13``
    (its ``0-10`` is part of the name: a version has a dot)."""
    stem = name.removesuffix(".jar")
    parts = stem.split("-")
    for index, part in enumerate(parts[1:], start=1):
        if _DOTTED.match(part):
            return "-".join(parts[:index])
    for index, part in enumerate(parts[1:], start=1):
        if part[:1].isdigit():
            return "-".join(parts[:index])
    return stem


def split_clashing(jars: Iterable[Path], spark_jars_dir: Path | None) -> tuple[tuple[Path, ...], tuple[Path, ...]]:
    """``jars`` split into those Spark lacks and those it has at some version of its own."""
    present = ({jar_artifact(p.name) for p in spark_jars_dir.glob("*.jar")} if spark_jars_dir else set())
    kept: list[Path] = []
    excluded: list[Path] = []
    for jar in jars:
        (excluded if jar_artifact(jar.name) in present else kept).append(jar)
    return tuple(kept), tuple(excluded)


def artifact_for(version: str) -> str:
    """The connector's artifact for a Spark version, for the Scala of that Spark's jars."""
    from connectors.spark.spark_versions import scala_binary_version

    return f"{ARTIFACT_STEM}_{scala_binary_version(version)}"


def _coordinates(version: str) -> list[str]:
    return [f"{GROUP}:{artifact_for(version)}:{version}"]


def _cache_name(version: str) -> str:
    return f"spark-sql-kafka-{version}"


def _fallback_candidates(target: str) -> list[str]:
    """The served releases nearest to ``target``, of its major version only: a connector of another
    major version is built for another Spark (and Scala) and does not load."""
    major = target.split(".")[0]
    releases = release_versions(GROUP, artifact_for(target))
    return [v for v in nearest_versions(target, releases) if v != target and v.split(".")[0] == major]


def _short(error: Exception) -> str:
    return str(error).removeprefix("mvn could not resolve ")[:240]


def resolve_connector(pyspark_version: str | None = None, *,
                      spark_jars_dir: Path | None = None) -> SparkKafkaConnector:
    """Spark's Kafka connector at ``pyspark_version`` (default: the installed pyspark's), else at
    the nearest release Maven Central serves (at most :data:`MAX_TRIES` versions in all); the jars
    of ``spark_jars_dir`` (default: pyspark's) are left out of the result.

    Raises SparkKafkaConnectorError (one line, naming the versions tried) when none resolves."""
    target = pyspark_version or installed_pyspark_version()
    jars_dir = spark_jars_dir if spark_jars_dir is not None else pyspark_jars_dir()
    mvn_executable()  # fail once, naming what is missing, rather than once per version

    tried: list[str] = []
    errors: list[str] = []

    def attempt(version: str, reason: str | None) -> SparkKafkaConnector | None:
        tried.append(version)
        try:
            resolved = resolve_jars(_coordinates(version), _cache_name(version))
        except MavenUnavailableError as exc:
            log.info("Spark's Kafka connector %s: %s", version, exc)
            errors.append(f"{version}: {_short(exc)}")
            return None
        kept, excluded = split_clashing(resolved.jars, jars_dir)
        connector = SparkKafkaConnector(kept, version, target, excluded, reason)
        log.info("%s: %s (left out, pyspark has them: %s)", connector.description,
                 ", ".join(jar.name for jar in kept), ", ".join(jar.name for jar in excluded) or "none")
        return connector

    pick = remembered_pick(_PICK_NAME, target)
    if pick is not None:
        log.info("pyspark %s: connector %s as found before (%s)", target, pick.version, pick.reason)
        connector = attempt(pick.version, pick.reason)
        if connector is not None:
            return connector
    connector = attempt(target, None)
    if connector is not None:
        return connector
    exact_error = errors[-1]
    try:
        candidates = _fallback_candidates(target)
    except MavenUnavailableError as exc:
        candidates = []
        errors.append(f"listing versions: {_short(exc)}")
    else:
        if not candidates:
            errors.append(f"Maven lists no other {target.split('.')[0]}.x release")
    for version in candidates:
        if len(tried) >= MAX_TRIES:
            break
        if version in tried:
            continue
        connector = attempt(version, exact_error)
        if connector is not None:
            remember_pick(_PICK_NAME, target, version, exact_error)
            return connector
    raise SparkKafkaConnectorError(f"Spark's Kafka connector ({GROUP}:{artifact_for(target)}) for pyspark {target} from Maven "
                                   f"Central: tried {', '.join(tried) or 'nothing'}; " + "; ".join(errors))
