"""Where the bench finds Spark's own Kafka connector (``format("kafka")``), which is not on PyPI.

``--spark-kafka-jars`` or the environment variable ``KAFKA_EOS_SPARK_KAFKA_JARS`` (the same one
the integration tests read): comma-separated jar paths or directories (every ``*.jar`` in them).
The connector needs four jars: ``spark-sql-kafka-0-10``, its token provider ``spark-token-provider-
kafka-0-10``, ``kafka-clients`` and ``commons-pool2``. When any is missing, the runs on Spark's
connector are skipped, and the reason names what was looked at and what is missing.

When neither is given, the official artifacts are resolved from Maven Central with the user's
``mvn`` (``kafka_testkit.spark_kafka_connector``: the installed pyspark's version, else the nearest
one served), and ``source`` names the version used, so that the bench's report says which connector
its numbers are of. When that fails too, the runs are skipped with what was tried.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

# The test kit (kafka_testkit/) is in the checkout only, which the benchmarks run from: after the
# installed packages, so that the kit itself comes from the install.
sys.path.append(str(Path(__file__).resolve().parent.parent))

from connectors.servers.maven_artifacts import MavenUnavailableError  # noqa: E402
from kafka_testkit.spark_kafka_connector import SparkKafkaConnector, resolve_connector  # noqa: E402

ENV_VAR = "KAFKA_EOS_SPARK_KAFKA_JARS"
OPTION = "--spark-kafka-jars"
#: What each required jar's file name starts with (the version follows).
REQUIRED = {
    "spark-sql-kafka-0-10": re.compile(r"^spark-sql-kafka-0-10_[\d.]+-.*\.jar$"),
    "spark-token-provider-kafka-0-10": re.compile(r"^spark-token-provider-kafka-0-10_[\d.]+-.*\.jar$"),
    "kafka-clients": re.compile(r"^kafka-clients-\d.*\.jar$"),
    "commons-pool2": re.compile(r"^commons-pool2-\d.*\.jar$"),
}


@dataclass(frozen=True)
class SparkKafkaJars:
    """The jars found (in the order given), or why there are none usable (``skip_reason``)."""

    jars: tuple[Path, ...]
    source: str  # where the setting came from, for the report
    skip_reason: str | None = None

    @property
    def spark_jars(self) -> str:
        """The value of ``spark.jars``."""
        return ",".join(str(jar) for jar in self.jars)


def _expand(entry: str) -> tuple[list[Path], str | None]:
    path = Path(entry).expanduser()
    if path.is_dir():
        return sorted(p for p in path.glob("*.jar") if p.is_file()), None
    if path.is_file():
        return [path], None
    return [], f"{path} does not exist"


def from_maven(resolver: Callable[[], SparkKafkaConnector] | None = None) -> SparkKafkaJars:
    """The connector from Maven Central (``resolver``, default :func:`resolve_connector`, looked up
    when called so that tests can replace it); ``source`` names its version."""
    try:
        connector = (resolver or resolve_connector)()
    except MavenUnavailableError as exc:
        return SparkKafkaJars((), "Maven Central", f"Spark's own Kafka connector is not on PyPI, neither {OPTION} "
                                                   f"nor {ENV_VAR} is given, and Maven Central gave none: {exc}")
    return SparkKafkaJars(connector.jars, connector.description)


def resolve(option: str | None, environ: Mapping[str, str] | None = None,
            resolver: Callable[[], SparkKafkaConnector] | None = None) -> SparkKafkaJars:
    """The connector's jars from ``option`` (``--spark-kafka-jars``), else ``ENV_VAR``, else Maven
    Central (``resolver``)."""
    environ = os.environ if environ is None else environ
    if option:
        value, source = option, OPTION
    elif environ.get(ENV_VAR, "").strip():
        value, source = environ[ENV_VAR], ENV_VAR
    else:
        return from_maven(resolver)
    jars: list[Path] = []
    problems: list[str] = []
    for entry in (part.strip() for part in value.split(",")):
        if entry:
            found, problem = _expand(entry)
            jars += [jar for jar in found if jar not in jars]
            if problem:
                problems.append(problem)
    missing = [name for name, pattern in REQUIRED.items() if not any(pattern.match(jar.name) for jar in jars)]
    if missing:
        why = f"{source}={value!r}: no {', '.join(missing)} jar" + (f" ({'; '.join(problems)})" if problems else "")
        return SparkKafkaJars(tuple(jars), source, why)
    return SparkKafkaJars(tuple(jars), source)
