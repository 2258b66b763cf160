"""The kit's JVM provider of ``format("kafka-eos")``: what lets update output mode run.

Spark plans a Python data source through its own JVM classes, whose write builder takes append and
complete mode but not update mode (it lacks the marker interface Spark asks for). The provider,
``jvm/src/kafkaeos/spark/KafkaEosTableProvider.java``, is Spark's Python data source with that
marker added, and delegates everything else to the kit's Python data source. The project's build
compiles it into ``jvm/kafka-eos-spark-provider.jar`` (``setup.py``), which the wheel ships.

``register()`` puts the jar into the running driver (:func:`install`). Spark finds a JVM
``DataSourceRegister`` by name before a Python data source and refuses to register a Python one
under a name a JVM class holds, so the Python data source is registered under
``PYTHON_SOURCE`` behind the provider, and under ``FORMAT`` itself where the provider cannot be
installed (then update mode is refused by Spark, and :func:`install` has said, in one warning line,
what to do).

Executors need nothing of it: the provider only wraps the driver's plan objects; the write tasks
run Spark's own Python writer classes.

    python -m connectors.spark.jvm_provider     # prints the jar's path (for --jars, spark.jars)
"""

from __future__ import annotations

import logging
import sys
import zipfile
from pathlib import Path

from py4j.protocol import Py4JJavaError
from pyspark.sql import SparkSession

from connectors.spark.format_names import FORMAT, PYTHON_SOURCE

log = logging.getLogger(__name__)

#: The provider's class; its jar's ``META-INF/services`` names it to Spark.
PROVIDER_CLASS = "kafkaeos.spark.KafkaEosTableProvider"
#: Where the build puts the jar, inside the installed package (or the checkout, for an editable install).
JAR = Path(__file__).resolve().parent / "jvm" / "kafka-eos-spark-provider.jar"
#: The alternative that takes every output mode without the provider.
_FOREACH_BATCH = ("or write update mode through the foreachBatch sink "
                  "(connectors.spark.foreach_batch.exactly_once_foreach_batch)")
#: Spark's class loader that ``spark-submit`` (and YARN's ApplicationMaster) makes for the job's
#: jars and sets as the context class loader of the thread that starts the Python gateway; every
#: thread Py4J starts for a Python thread, and every streaming query's thread, inherits it.
_JOB_LOADER = "org.apache.spark.util.MutableURLClassLoader"


def install(spark: SparkSession) -> bool:
    """Make ``format("kafka-eos")`` resolve to the provider in ``spark``'s driver, for every thread.
    True when it does; False (after one warning line saying what to do) when it cannot."""
    try:
        spark.sparkContext
    except Exception:  # Spark Connect: no SparkContext on the client
        return _install_over_connect(spark)
    return _install_in_driver(spark)


def _jar_missing() -> bool:
    if JAR.is_file():
        return False
    _warn(f"its jar {JAR} is missing (an install made before the kit had it?)",
          "reinstall the kit (its build compiles the jar with javac and mvn)")
    return True


def _install_in_driver(spark: SparkSession) -> bool:
    """Add the jar to the job's class loader of the driver JVM, unless the provider is already on
    its class path (``spark.jars``, ``--jars``, an earlier ``register()``).

    Spark looks data sources up with ``ServiceLoader`` on the calling thread's context class loader.
    ``ADD JAR`` would set that loader on the calling thread only (a query started from another
    Python thread would not find the format), and ``addArtifacts`` is not consulted there on a
    classic session; the job's loader is the parent of both and every thread's."""
    jvm = spark.sparkContext._jvm  # type: ignore[attr-defined]
    context = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    job_loader_class = jvm.java.lang.Class.forName(_JOB_LOADER)
    job_loader, loader = None, context
    while loader is not None:
        if job_loader_class.isInstance(loader):
            job_loader = loader  # the outermost: a session's ADD JAR loader is a child of the job's
        loader = loader.getParent()
    if _loads_provider(jvm, context):
        log.info("format(%r) is the kit's JVM provider %s, on the driver's class path already (update mode "
                 "enabled)", FORMAT, PROVIDER_CLASS)
        return True
    if _jar_missing():
        return False
    if job_loader is None:
        _warn(f"the driver JVM's class loader ({context.getClass().getName() if context else None}) takes no jar "
              "at run time", f"start the session with spark.jars={JAR}")
        return False
    url = jvm.java.io.File(str(JAR)).toURI().toURL()
    # Once in the job's loader, the jar cannot be taken out, and Spark's lookup of every format
    # would meet a provider that does not link on this Spark: link it in a loader of its own first.
    failure = _link_failure(spark, url, job_loader)
    if failure is not None:
        _warn(f"it does not link on this Spark {spark.version} ({failure})",
              "use a Spark the kit supports (docs/where-it-runs.md)")
        return False
    job_loader.addURL(url)
    log.info("format(%r) is the kit's JVM provider %s from %s (update mode enabled)", FORMAT, PROVIDER_CLASS, JAR)
    return True


def _link_failure(spark: SparkSession, url: object, parent: object) -> str | None:
    """Load, link and initialise every class of the jar, and instantiate the provider and ask its
    name, in a throwaway loader whose parent is ``parent``; None when all of it works, else what
    failed, in one line."""
    gateway = spark.sparkContext._gateway  # type: ignore[attr-defined]
    jvm = gateway.jvm
    urls = gateway.new_array(jvm.java.net.URL, 1)
    urls[0] = url
    loader = jvm.java.net.URLClassLoader(urls, parent)
    try:
        with zipfile.ZipFile(JAR) as jar:
            classes = [name[:-len(".class")].replace("/", ".") for name in jar.namelist() if name.endswith(".class")]
        for name in classes:
            jvm.java.lang.Class.forName(name, True, loader)
        constructor = jvm.java.lang.Class.forName(PROVIDER_CLASS, True, loader).getDeclaredConstructor(
            gateway.new_array(jvm.java.lang.Class, 0))
        constructor.newInstance(gateway.new_array(jvm.java.lang.Object, 0)).shortName()
    except Py4JJavaError as exc:  # a LinkageError, NoSuchMethodError, ... thrown in the JVM
        java = exc.java_exception
        cause = java.getCause()  # newInstance wraps the constructor's failure
        return str((cause if cause is not None else java).toString()).splitlines()[0][:300]
    finally:
        loader.close()
    return None


def _loads_provider(jvm, loader) -> bool:  # type: ignore[no-untyped-def]
    try:
        jvm.java.lang.Class.forName(PROVIDER_CLASS, False, loader)
    except Exception:  # Py4JJavaError wrapping ClassNotFoundException
        return False
    return True


def _install_over_connect(spark: SparkSession) -> bool:
    """Upload the jar as an artifact of the Connect session: the server looks the format up with
    the session's class loader, which holds it (also on a streaming query's thread)."""
    if _jar_missing():
        return False
    try:
        spark.addArtifacts(str(JAR))
    except Exception as exc:
        _warn(f"the Spark Connect server refused it as an artifact ({str(exc).splitlines()[0][:200]})",
              f"start the server with --jars {JAR} (`python -m connectors.spark.jvm_provider` prints the path "
              "where the kit is installed)")
        return False
    log.info("format(%r) is the kit's JVM provider %s, sent to the Spark Connect session (update mode enabled)",
             FORMAT, PROVIDER_CLASS)
    return True


def _warn(reason: str, remedy: str) -> None:
    log.warning("format(%r) runs without the kit's JVM provider, so Spark refuses update output mode (append and "
                "complete run): %s. To enable update mode, %s; %s", FORMAT, reason, remedy, _FOREACH_BATCH)


def main() -> int:
    """Print the jar's path, for ``--jars`` or ``spark.jars``."""
    if not JAR.is_file():
        print(f"{JAR} is missing: reinstall the kit (its build compiles the jar with javac and mvn)", file=sys.stderr)
        return 1
    print(JAR)
    return 0


__all__ = ["JAR", "PROVIDER_CLASS", "PYTHON_SOURCE", "install"]

if __name__ == "__main__":
    sys.exit(main())
