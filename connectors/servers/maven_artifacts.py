"""Official jars from Maven coordinates, resolved with the user's own ``mvn`` into a cache.

The kit starts real servers (Apache Kafka's broker) and loads Spark's own Kafka connector from the
artifacts the Apache projects publish to Maven Central. It resolves them with ``mvn`` rather than
by downloading URLs itself, so that the user's ``~/.m2/settings.xml`` (mirrors, proxies,
credentials) applies, and so that no registry host is written here.

- :func:`resolve_jars` copies a set of artifacts and their runtime dependencies into a folder of
  the cache (``$KAFKA_EOS_CACHE_DIR``, else ``$XDG_CACHE_HOME/pyspark-kafka-eos``, else
  ``~/.cache/pyspark-kafka-eos``), once: a later call with the same coordinates reads the folder's
  manifest and runs no ``mvn``.
- :func:`release_versions` lists the release versions of an artifact that the repository
  publishes (its ``maven-metadata.xml``, fetched by ``mvn`` into the local repository).

Every failure is a :class:`MavenUnavailableError` whose message is one line.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Sequence

from connectors.servers.server_errors import MavenUnavailableError
from twophase.errors import InvalidValueError

log = logging.getLogger(__name__)

CACHE_ENV = "KAFKA_EOS_CACHE_DIR"
#: How long a version found by listing and trying is reused before Maven is asked again.
PICK_TTL_S = 24 * 3600.0
#: One ``mvn`` call may download a few hundred MB on a cold cache.
_MVN_TIMEOUT_S = 900.0
_MANIFEST = "manifest.json"
_MANIFEST_VERSION = 1
#: A release version: digits and dots only (no -preview, -rc, -SNAPSHOT).
_RELEASE = re.compile(r"^\d+(\.\d+)*$")


@dataclass(frozen=True)
class Artifact:
    group: str
    artifact: str
    version: str

    @classmethod
    def parse(cls, coordinates: str) -> "Artifact":
        parts = coordinates.split(":")
        if len(parts) != 3 or not all(parts):
            raise InvalidValueError(f"Maven coordinates {coordinates!r} are not group:artifact:version")
        return cls(*parts)

    def __str__(self) -> str:
        return f"{self.group}:{self.artifact}:{self.version}"


@dataclass(frozen=True)
class ResolvedJars:
    """What a resolution put in its cache folder (persisted as its manifest)."""

    #: The coordinates asked for, in order.
    coordinates: tuple[str, ...]
    folder: Path
    jars: tuple[Path, ...]
    version: int = _MANIFEST_VERSION

    @property
    def classpath(self) -> str:
        return os.pathsep.join(str(jar) for jar in self.jars)

    def jar_version(self, artifact: str) -> str | None:
        """The version of the jar named ``<artifact>-<version>.jar`` among the resolved ones."""
        pattern = re.compile(rf"^{re.escape(artifact)}-(\d[^/]*)\.jar$")
        for jar in self.jars:
            match = pattern.match(jar.name)
            if match:
                return match.group(1)
        return None


def cache_dir() -> Path:
    """The kit's cache folder (created on first use by the callers that write into it)."""
    explicit = os.environ.get(CACHE_ENV, "").strip()
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(xdg) if xdg else Path.home() / ".cache") / "pyspark-kafka-eos"


def mvn_executable() -> str:
    """``mvn`` on PATH, with a Java to run it; MavenUnavailableError saying what is missing."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise MavenUnavailableError("no 'mvn' on PATH: install Apache Maven to fetch official jars from Maven "
                                    "Central (e.g. apt-get install maven)")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise MavenUnavailableError("no Java runtime: neither 'java' on PATH nor JAVA_HOME is set")
    return mvn


def _pom(artifacts: Iterable[Artifact], *, transitive: bool = True) -> str:
    exclusions = ("" if transitive else
                  "<exclusions><exclusion><groupId>*</groupId><artifactId>*</artifactId></exclusion></exclusions>")
    dependencies = "".join(
        f"<dependency><groupId>{a.group}</groupId><artifactId>{a.artifact}</artifactId>"
        f"<version>{a.version}</version>{exclusions}</dependency>"
        for a in artifacts
    )
    return ("<project xmlns=\"http://maven.apache.org/POM/4.0.0\"><modelVersion>4.0.0</modelVersion>"
            "<groupId>pyspark-kafka-eos.local</groupId><artifactId>resolve</artifactId><version>0</version>"
            f"<dependencies>{dependencies}</dependencies></project>\n")


def _run_mvn(pom: str, goals: Sequence[str], what: str) -> str:
    """Run ``mvn`` in batch mode on a throwaway project holding ``pom``; its output, or
    MavenUnavailableError naming ``what`` and mvn's first error line."""
    mvn = mvn_executable()
    with tempfile.TemporaryDirectory(prefix="kafka-eos-mvn-") as project:
        Path(project, "pom.xml").write_text(pom)
        command = [mvn, "-B", "-ntp", "-Dstyle.color=never", *goals]
        log.info("resolving %s with %s", what, " ".join(command))
        try:
            result = subprocess.run(command, cwd=project, capture_output=True, text=True,
                                    timeout=_MVN_TIMEOUT_S, stdin=subprocess.DEVNULL, check=False)
        except subprocess.TimeoutExpired:
            raise MavenUnavailableError(f"mvn did not resolve {what} in {_MVN_TIMEOUT_S:.0f} s") from None
    if result.returncode != 0:
        errors = [line for line in result.stdout.splitlines() if line.startswith("[ERROR]")]
        first = errors[0].removeprefix("[ERROR]").strip() if errors else f"exit code {result.returncode}"
        raise MavenUnavailableError(f"mvn could not resolve {what}: {first[:400]}")
    # Some Maven versions colour forced output even in batch mode.
    return re.sub(r"\x1b\[[0-9;]*m", "", result.stdout)


def _read_manifest(folder: Path, coordinates: tuple[str, ...]) -> ResolvedJars | None:
    try:
        data = json.loads((folder / _MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    if data.get("version") != _MANIFEST_VERSION or tuple(data.get("coordinates", ())) != coordinates:
        return None
    jars = tuple(folder / name for name in data.get("jars", ()))
    if not jars or not all(jar.is_file() for jar in jars):
        return None
    return ResolvedJars(coordinates, folder, jars)


def resolve_jars(coordinates: Sequence[str], cache_name: str, *, transitive: bool = True) -> ResolvedJars:
    """The jars of ``coordinates`` (``group:artifact:version``, exact versions) and of their runtime
    dependencies (none with ``transitive=False``), in the cache folder ``maven/<cache_name>``;
    resolved with ``mvn`` once, read from the cache after that."""
    wanted = tuple(str(Artifact.parse(c)) for c in coordinates)
    folder = cache_dir() / "maven" / cache_name
    cached = _read_manifest(folder, wanted)
    if cached is not None:
        log.info("using cached jars of %s in %s", ", ".join(wanted), folder)
        return cached
    # Resolve into a fresh sibling folder and rename it into place: a run killed half-way leaves
    # no folder that looks complete, and two runs resolving at once do not mix their files.
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{cache_name}-", dir=folder.parent))
    try:
        _run_mvn(_pom(map(Artifact.parse, wanted), transitive=transitive),
                 ["dependency:copy-dependencies", f"-DoutputDirectory={staging}", "-DincludeScope=runtime"],
                 ", ".join(wanted))
        jars = sorted(p.name for p in staging.glob("*.jar"))
        if not jars:
            raise MavenUnavailableError(f"mvn resolved no jar for {', '.join(wanted)}")
        manifest = ResolvedJars(wanted, folder, ())
        (staging / _MANIFEST).write_text(json.dumps(
            {**asdict(manifest), "folder": None, "jars": jars}, indent=1) + "\n")
        shutil.rmtree(folder, ignore_errors=True)
        staging.rename(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    resolved = _read_manifest(folder, wanted)
    if resolved is None:
        raise MavenUnavailableError(f"the jars of {', '.join(wanted)} vanished from {folder} after resolving")
    log.info("resolved %d jars of %s into %s", len(resolved.jars), ", ".join(wanted), folder)
    return resolved


@lru_cache(maxsize=1)
def _local_repository() -> Path:
    out = _run_mvn(_pom(()), ["help:evaluate", "-Dexpression=settings.localRepository", "-q", "-DforceStdout"],
                   "the local repository's path")
    return Path(out.strip().splitlines()[-1].strip())


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def release_versions(group: str, artifact: str) -> list[str]:
    """The release versions of ``group:artifact`` that the repository lists, oldest first.

    ``mvn`` is asked to resolve the artifact over an open version range (without its
    dependencies), which makes it fetch the artifact's ``maven-metadata.xml`` from every
    repository of the user's settings into the local repository; the listing is read from there.
    Pre-releases (``-preview``, ``-rc``) are left out."""
    probe = Artifact(group, artifact, "[0,)")
    try:
        _run_mvn(_pom([probe], transitive=False), ["dependency:resolve"], f"the versions of {group}:{artifact}")
    except MavenUnavailableError as exc:
        # The range's newest entry may list a version whose jar is not served; the metadata has
        # been fetched all the same.
        log.info("listing versions: %s", exc)
    folder = _local_repository().joinpath(*group.split("."), artifact)
    versions: set[str] = set()
    for metadata in folder.glob("maven-metadata*.xml"):
        try:
            root = ElementTree.parse(metadata).getroot()
        except ElementTree.ParseError:
            continue
        versions.update(v.text.strip() for v in root.iter("version") if v.text)
    releases = sorted((v for v in versions if _RELEASE.match(v)), key=_version_key)
    if not releases:
        raise MavenUnavailableError(f"Maven lists no release of {group}:{artifact} (looked in {folder})")
    return releases


def pick_version(spec: str, releases: Sequence[str]) -> list[str]:
    """The releases that match ``spec``, best first: ``4`` (the newest 4.x first), ``3.9`` (the
    newest 3.9.x first) or an exact ``4.1.0``."""
    prefix = _version_key(spec)
    matching = [v for v in releases if _version_key(v)[: len(prefix)] == prefix]
    return sorted(matching, key=_version_key, reverse=True)


def nearest_versions(target: str, releases: Sequence[str]) -> list[str]:
    """``releases`` ordered by nearness to ``target``: ``target`` itself, then the older ones of the
    same major version (newest first), then the newer ones (oldest first)."""
    key = _version_key(target)
    older = sorted((v for v in releases if _version_key(v) < key and _version_key(v)[0] == key[0]),
                   key=_version_key, reverse=True)
    newer = sorted((v for v in releases if _version_key(v) > key), key=_version_key)
    exact = [v for v in releases if v == target]
    return exact + older + newer


@dataclass(frozen=True)
class VersionPick:
    """A version found by listing and trying (the newest 4.x, the connector nearest to pyspark's),
    persisted in the cache so that the next start needs neither; reused for ``PICK_TTL_S``."""

    #: What was asked for: a version spec such as ``4``, or the version a fallback stands in for.
    asked: str
    version: str
    #: Why it is not what was asked for, when it is a fallback.
    reason: str | None
    picked_at: float
    format_version: int = 1


def _pick_file(name: str, asked: str) -> Path:
    return cache_dir() / "maven" / f"{name}-pick-{asked}.json"


def remembered_pick(name: str, asked: str) -> VersionPick | None:
    """The pick of ``name`` for ``asked`` remembered by :func:`remember_pick`, while fresh."""
    try:
        pick = VersionPick(**json.loads(_pick_file(name, asked).read_text()))
    except (OSError, ValueError, TypeError):
        return None
    if pick.asked != asked or time.time() - pick.picked_at >= PICK_TTL_S:
        return None
    return pick


def remember_pick(name: str, asked: str, version: str, reason: str | None = None) -> None:
    path = _pick_file(name, asked)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(VersionPick(asked, version, reason, time.time()))) + "\n")
    except OSError as exc:  # only a cache: the next start looks for the version again
        log.warning("could not remember %s %s in %s: %s", name, version, path, exc)
