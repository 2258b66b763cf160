"""Where a local Kafka node's programs come from: an unpacked distribution, or Maven Central.

``LocalKafkaBroker`` (and the cluster and secured node built on it) asks its distribution for two
commands, the storage formatter and the server, and for their environment:

- :class:`KafkaHome`: an unpacked Apache Kafka distribution (``KAFKA_HOME``), run through its
  ``bin/kafka-storage.sh`` and ``bin/kafka-server-start.sh``;
- :class:`MavenKafka`: the official ``org.apache.kafka:kafka_2.13`` artifact and its runtime
  dependencies, resolved with ``mvn`` (``connectors.servers.maven_artifacts``) into the kit's cache and
  run as ``java -cp <jars> kafka.Kafka`` and ``kafka.tools.StorageTool``, the classes the
  distribution's scripts run. The version is an option or ``KAFKA_EOS_KAFKA_VERSION``: ``4`` (the
  default, the newest 4.x that resolves), ``3.9`` (the newest 3.9.x), an exact ``4.1.0``, or
  ``off`` to never use Maven.

Either way the server command's PID is the broker's JVM itself (the scripts ``exec`` into java).
"""

from __future__ import annotations

import logging
import os
import shutil
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Mapping

from connectors.servers.server_errors import KafkaDistributionError, MavenUnavailableError
from connectors.servers.maven_artifacts import (
    ResolvedJars,
    pick_version,
    release_versions,
    remember_pick,
    remembered_pick,
    resolve_jars,
)

log = logging.getLogger(__name__)

VERSION_ENV = "KAFKA_EOS_KAFKA_VERSION"
DEFAULT_VERSION_SPEC = "4"
#: Values of ``KAFKA_EOS_KAFKA_VERSION`` that turn Maven Central off as a source of brokers.
OFF = ("off", "none", "no", "0", "false")
GROUP = "org.apache.kafka"
ARTIFACT = "kafka_2.13"
#: What Kafka's own kafka-run-class.sh gives the broker's JVM besides the heap.
_JVM_OPTS = ("-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
             "-XX:+ExplicitGCInvokesConcurrent", "-Djava.awt.headless=true")


def _java() -> str:
    java_home = os.environ.get("JAVA_HOME", "").strip()
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return str(Path(java_home) / "bin" / "java")
    java = shutil.which("java")
    if java is None:
        raise KafkaDistributionError("no Java runtime: neither 'java' on PATH nor JAVA_HOME is set")
    return java


class KafkaDistribution(ABC):
    """The commands that format a node's storage and run it."""

    #: For logs and reports, e.g. "Apache Kafka 4.1.0 from Maven Central".
    description: str
    #: The Kafka version, when known.
    version: str | None = None

    def check(self) -> None:
        """Raise KafkaDistributionError (or LocalBrokerError) if no broker can be run from here."""

    @abstractmethod
    def storage_command(self, arguments: list[str]) -> list[str]:
        """``kafka-storage.sh <arguments>``."""

    @abstractmethod
    def server_command(self, properties: Path, heap_opts: str) -> list[str]:
        """The broker with the configuration ``properties`` (in its work dir)."""

    @abstractmethod
    def environment(self, base: Mapping[str, str], work_dir: Path, heap_opts: str) -> dict[str, str]:
        """The environment of both commands."""


class KafkaHome(KafkaDistribution):
    """An unpacked Apache Kafka distribution, run through its own scripts."""

    def __init__(self, home: str | os.PathLike[str]) -> None:
        self.home = Path(home)
        self.description = f"Kafka at KAFKA_HOME={self.home}"

    def check(self) -> None:
        for script in ("kafka-server-start.sh", "kafka-storage.sh"):
            if not (self.home / "bin" / script).is_file():
                raise KafkaDistributionError(f"{self.home} is not a Kafka distribution: bin/{script} is missing")
        _java()

    def storage_command(self, arguments: list[str]) -> list[str]:
        return [str(self.home / "bin" / "kafka-storage.sh"), *arguments]

    def server_command(self, properties: Path, heap_opts: str) -> list[str]:
        # The heap goes through KAFKA_HEAP_OPTS (environment()), which the script reads.
        return [str(self.home / "bin" / "kafka-server-start.sh"), str(properties)]

    def environment(self, base: Mapping[str, str], work_dir: Path, heap_opts: str) -> dict[str, str]:
        env = dict(base)
        env["KAFKA_HEAP_OPTS"] = heap_opts
        # Kafka's own log4j files (server.log, controller.log, GC log) go to the work dir, not
        # into KAFKA_HOME/logs, which may be shared or read-only.
        env["LOG_DIR"] = str(work_dir / "applogs")
        return env


class MavenKafka(KafkaDistribution):
    """The official ``kafka_2.13`` jars of one Kafka version from Maven Central, run with ``java``."""

    def __init__(self, version_spec: str | None = None) -> None:
        spec = (version_spec or os.environ.get(VERSION_ENV, "") or DEFAULT_VERSION_SPEC).strip()
        if spec.lower() in OFF:
            raise KafkaDistributionError(f"{VERSION_ENV}={spec}: Kafka from Maven Central is turned off")
        if not all(part.isdigit() for part in spec.split(".")):
            raise KafkaDistributionError(f"Kafka version {spec!r} is not a version: use 4 (the newest 4.x), "
                                         "3.9 (the newest 3.9.x) or an exact one such as 4.1.0")
        self.spec = spec
        self.description = f"Apache Kafka {spec} from Maven Central"
        self._jars: tuple[ResolvedJars, ...] | None = None
        self._major = 0

    # -- resolution ----------------------------------------------------------------------------

    def check(self) -> None:
        _java()
        if self._jars is None:
            self._jars = self._resolve()
            self._major = int(self.version.split(".")[0]) if self.version else 0
            self.description = f"Apache Kafka {self.version} from Maven Central"

    def _cached_pick(self) -> str | None:
        if self.spec.count(".") == 2:
            return self.spec
        pick = remembered_pick("kafka", self.spec)
        return pick.version if pick is not None else None

    def _candidates(self) -> list[str]:
        cached = self._cached_pick()
        if cached is not None:
            return [cached]
        candidates = pick_version(self.spec, release_versions(GROUP, ARTIFACT))
        if not candidates:
            raise KafkaDistributionError(f"Maven lists no Kafka release matching {self.spec!r}")
        return candidates

    def _resolve(self) -> tuple[ResolvedJars, ...]:
        errors = []
        # The newest listed release may not be served yet (or not whole): try the next one.
        for version in self._candidates()[:3]:
            try:
                broker = resolve_jars([f"{GROUP}:{ARTIFACT}:{version}"], f"kafka-{version}")
                logging_jars = resolve_jars(_logging_binding(broker, version), f"kafka-{version}-logging")
            except MavenUnavailableError as exc:
                errors.append(str(exc))
                continue
            self.version = version
            if self.spec.count(".") < 2:
                remember_pick("kafka", self.spec, version)
            return broker, logging_jars
        raise KafkaDistributionError(f"Kafka {self.spec} from Maven Central: {'; '.join(errors)}")

    @property
    def classpath(self) -> str:
        assert self._jars is not None, "check() resolves the jars"
        return os.pathsep.join(resolved.classpath for resolved in self._jars)

    # -- commands -------------------------------------------------------------------------------

    def _jvm(self, main_class: str, *arguments: str) -> list[str]:
        return [_java(), "-cp", self.classpath, main_class, *arguments]

    def storage_command(self, arguments: list[str]) -> list[str]:
        return self._jvm("kafka.tools.StorageTool", *arguments)

    def server_command(self, properties: Path, heap_opts: str) -> list[str]:
        work_dir = properties.parent
        logging_options = self._write_logging_config(work_dir)
        extra = os.environ.get("KAFKA_OPTS", "").split()
        return [_java(), *heap_opts.split(), *_JVM_OPTS, f"-Dkafka.logs.dir={work_dir / 'applogs'}",
                *logging_options, *extra, "-cp", self.classpath, "kafka.Kafka", str(properties)]

    def environment(self, base: Mapping[str, str], work_dir: Path, heap_opts: str) -> dict[str, str]:
        # KAFKA_OPTS is read into server_command's JVM options; nothing else of Kafka's scripts
        # applies to a plain java command.
        return dict(base)

    def _write_logging_config(self, work_dir: Path) -> list[str]:
        """Kafka's INFO log to stdout (the launcher's broker.log), as its scripts' default does to
        server.log: the tail of it explains a broker that did not start."""
        if self._major >= 4:
            config = work_dir / "log4j2.properties"
            config.write_text(
                "status = warn\n"
                "appender.out.type = Console\nappender.out.name = out\n"
                "appender.out.layout.type = PatternLayout\nappender.out.layout.pattern = [%d] %p %m (%c)%n\n"
                "rootLogger.level = info\nrootLogger.appenderRef.out.ref = out\n"
                "logger.state.name = state.change.logger\nlogger.state.level = warn\n"
            )
            return [f"-Dlog4j2.configurationFile={config}"]
        config = work_dir / "log4j.properties"
        config.write_text(
            "log4j.rootLogger=INFO, out\nlog4j.appender.out=org.apache.log4j.ConsoleAppender\n"
            "log4j.appender.out.layout=org.apache.log4j.PatternLayout\n"
            "log4j.appender.out.layout.ConversionPattern=[%d] %p %m (%c)%n\n"
            "log4j.logger.state.change.logger=WARN\n"
        )
        return [f"-Dlog4j.configuration=file:{config}"]


def _logging_binding(broker: ResolvedJars, version: str) -> list[str]:
    """The SLF4J binding that Kafka's distribution ships but its Maven artifact does not depend on:
    without it the broker logs nothing at all. Kafka 4.x logs with Log4j 2, 3.x with reload4j."""
    slf4j = broker.jar_version("slf4j-api") or "1.7.36"
    log4j2 = broker.jar_version("log4j-api")
    if int(version.split(".")[0]) >= 4 and log4j2:
        binding = "log4j-slf4j2-impl" if slf4j.startswith("2.") else "log4j-slf4j-impl"
        return [f"org.apache.logging.log4j:{binding}:{log4j2}"]
    return [f"org.slf4j:slf4j-reload4j:{slf4j}"]


def from_environment(kafka_home: str | None, version_spec: str | None = None) -> KafkaDistribution:
    """``KAFKA_HOME`` when given, else Kafka from Maven Central (``version_spec`` or
    ``KAFKA_EOS_KAFKA_VERSION``)."""
    if kafka_home:
        return KafkaHome(kafka_home)
    return MavenKafka(version_spec)


def as_distribution(value: "str | os.PathLike[str] | KafkaDistribution") -> KafkaDistribution:
    """A distribution object, or a ``KAFKA_HOME`` path (the launchers' original argument)."""
    return value if isinstance(value, KafkaDistribution) else KafkaHome(value)
