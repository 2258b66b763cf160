"""The build step that pyproject.toml cannot declare: the kit's JVM provider of ``format("kafka-eos")``
(connectors/spark/jvm_provider.py), compiled from its Java source into a jar inside the package.

``build_py`` compiles it with the JDK's ``javac --release 17`` against Spark's API jars of the
lowest Spark 4 release that has every class it uses (4.0.0), so that one jar runs on every Spark 4.
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
#: Compile-time only (the running Spark provides them): the lowest Spark 4 with every class used.
SPARK_API = ("org.apache.spark:spark-sql_2.13:4.0.0", "org.apache.spark:spark-catalyst_2.13:4.0.0",
             "org.apache.spark:spark-sql-api_2.13:4.0.0", "org.apache.spark:spark-core_2.13:4.0.0",
             "org.apache.spark:spark-common-utils_2.13:4.0.0",
             "org.scala-lang:scala-library:2.13.16",
             # Spark's logging API, which every Spark 4 ships (WriteTasks' one warning).
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


def build_jar(target: Path) -> Path:
    """Compile the provider into ``target/JAR_NAME``."""
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
    sources = sorted(str(p) for p in (source / "src").rglob("*.java"))
    with tempfile.TemporaryDirectory(prefix="kafka-eos-provider-") as work:
        classes = Path(work, "classes")
        compiled = subprocess.run([javac, "--release", "17", "-nowarn", "-cp", api.classpath, "-d", str(classes),
                                   *sources], capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if compiled.returncode != 0:
            raise ProviderBuildError(f"javac could not compile the JVM provider: {compiled.stderr.strip()[-2000:]}")
        target.mkdir(parents=True, exist_ok=True)
        partial = target / f".{JAR_NAME}.partial"
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as jar:
            jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\nCreated-By: pyspark-kafka-eos setup.py\n\n")
            for folder in (classes, source / "resources"):
                for path in sorted(p for p in folder.rglob("*") if p.is_file()):
                    jar.write(path, path.relative_to(folder).as_posix())
        os.replace(partial, target / JAR_NAME)
    return target / JAR_NAME


class BuildPyWithProvider(build_py):
    """``build_py``, then the provider's jar beside the modules (in place for an editable install)."""

    def run(self) -> None:
        super().run()
        target = ROOT / PROVIDER if getattr(self, "editable_mode", False) else Path(self.build_lib) / PROVIDER
        try:
            jar = build_jar(target)
        except ProviderBuildError as exc:
            sys.exit(f"error: {exc}")
        self.announce(f"built {jar}", level=2)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        outputs = super().get_outputs(include_bytecode)
        if getattr(self, "editable_mode", False):
            return outputs  # the jar is in the checkout, where the editable install reads the package
        return [*outputs, str(Path(self.build_lib) / PROVIDER / JAR_NAME)]


setup(cmdclass={"build_py": BuildPyWithProvider})
