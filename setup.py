"""The build step that pyproject.toml cannot declare: the kit's two jars, compiled from their Java
source into the package:

- the JVM provider of ``format("kafka-eos")`` (connectors/spark/jvm_provider.py), ``jvm/src``, for
  Spark 4 (Java 17);
- the SQL functions of the aligned write (connectors/spark/aligned_write.py), ``jvm/functions-src``,
  for every line from Spark 3.5 on, so for Java 8, the oldest Java Spark 3.5 runs on.

``build_py`` compiles the provider with the JDK's ``javac --release 17`` against Spark's API jars of
the lowest Spark 4 release that has every class it uses (4.0.0), so that one jar runs on every
Spark 4; the functions use only interfaces every line has (``UDF2``, Spark's MurmurHash3), and are
compiled against the same jars with ``--release 8``.
Those jars come from Maven Central through the user's ``mvn`` (its settings apply), only them (no
dependency), cached in the kit's cache; no pyspark is needed, so the build works under pip's build
isolation. For an editable install the jar is written into the checkout (git ignores it).

A build without ``javac`` or ``mvn`` fails with one line naming what is missing: a kit without the
jar would refuse update output mode at run time, which is not the product.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
PROVIDER = Path("connectors", "spark", "jvm")
JAR_NAME = "kafka-eos-spark-provider.jar"
#: The aligned write's SQL functions: (source folder, jar, javac --release).
FUNCTIONS = ("functions-src", "kafka-eos-spark-functions.jar", "8")
#: Compile-time only (the running Spark provides them): the lowest Spark 4 with every class used.
SPARK_API = ("org.apache.spark:spark-sql_2.13:4.0.0", "org.apache.spark:spark-catalyst_2.13:4.0.0",
             "org.apache.spark:spark-sql-api_2.13:4.0.0", "org.apache.spark:spark-core_2.13:4.0.0",
             "org.apache.spark:spark-common-utils_2.13:4.0.0",
             "org.apache.spark:spark-unsafe_2.13:4.0.0",
             "org.scala-lang:scala-library:2.13.16",
             # Spark's logging API, which every Spark 4 ships (WritePlanning' one warning).
             "org.slf4j:slf4j-api:2.0.16")


class ProviderBuildError(RuntimeError):
    """The jar could not be built; the message is one line."""


def _javac() -> str:
    home = os.environ.get("JAVA_HOME", "").strip()
    candidates = [str(Path(home, "bin", "javac"))] if home else []
    candidates.append(shutil.which("javac") or "")
    for javac in candidates:
        if javac and Path(javac).is_file():
            return javac
    raise ProviderBuildError("building pyspark-kafka-eos needs a JDK 17+ (javac) for its JVM provider of update "
                             "mode: install one (e.g. apt-get install openjdk-17-jdk-headless) or set JAVA_HOME")


def build_jars(target: Path) -> list[Path]:
    """Compile the provider into ``target/JAR_NAME`` and the functions into ``target/FUNCTIONS[1]``."""
    sys.path.insert(0, str(ROOT))  # the kit's own Maven driver, standard library only
    try:
        from connectors.servers.server_errors import MavenUnavailableError
        from connectors.servers.maven_artifacts import resolve_jars
    finally:
        sys.path.remove(str(ROOT))
    javac = _javac()
    try:
        api = resolve_jars(SPARK_API, "spark-4.0.0-api", transitive=False)
    except MavenUnavailableError as exc:
        raise ProviderBuildError(f"building pyspark-kafka-eos's JVM provider needs Spark's API jars: {exc}") from None
    source = ROOT / PROVIDER
    return [_compile(javac, api.classpath, source / "src", source / "resources", "17", target / JAR_NAME),
            _compile(javac, api.classpath, source / FUNCTIONS[0], None, FUNCTIONS[2], target / FUNCTIONS[1])]


def _compile(javac: str, classpath: str, sources: Path, resources: Path | None, release: str, jar_path: Path) -> Path:
    """Compile the Java files under ``sources`` for Java ``release`` into ``jar_path``, with ``resources``."""
    files = sorted(str(p) for p in sources.rglob("*.java"))
    with tempfile.TemporaryDirectory(prefix="kafka-eos-jar-") as work:
        classes = Path(work, "classes")
        compiled = subprocess.run([javac, "--release", release, "-nowarn", "-cp", classpath, "-d", str(classes),
                                   *files], capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if compiled.returncode != 0:
            raise ProviderBuildError(f"javac could not compile {jar_path.name}: {compiled.stderr.strip()[-2000:]}")
        jar_path.parent.mkdir(parents=True, exist_ok=True)
        partial = jar_path.parent / f".{jar_path.name}.partial"
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as jar:
            jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\nCreated-By: pyspark-kafka-eos setup.py\n\n")
            for folder in (classes, resources):
                if folder is None:
                    continue
                for path in sorted(p for p in folder.rglob("*") if p.is_file()):
                    jar.write(path, path.relative_to(folder).as_posix())
        os.replace(partial, jar_path)
    return jar_path


class BuildPyWithProvider(build_py):
    """``build_py``, then the provider's jar beside the modules (in place for an editable install)."""

    def run(self) -> None:
        super().run()
        target = ROOT / PROVIDER if getattr(self, "editable_mode", False) else Path(self.build_lib) / PROVIDER
        try:
            jars = build_jars(target)
        except ProviderBuildError as exc:
            sys.exit(f"error: {exc}")
        self.announce(f"built {', '.join(map(str, jars))}", level=2)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        outputs = super().get_outputs(include_bytecode)
        if getattr(self, "editable_mode", False):
            return outputs  # the jar is in the checkout, where the editable install reads the package
        return [*outputs, *(str(Path(self.build_lib) / PROVIDER / name) for name in (JAR_NAME, FUNCTIONS[1]))]


setup(cmdclass={"build_py": BuildPyWithProvider})
