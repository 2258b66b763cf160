"""The Python for the processes Spark starts for a PySpark job (its ``PYSPARK_PYTHON``): the same
interpreter, importing pyspark from the installed package with its cached bytecode instead of
from ``pyspark.zip``.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on the ``PYTHONPATH`` of every Python
process it starts: each planning step of a Python data source (lookup, creation, read and write
planning, the streaming source and sink runners) and each worker daemon. Python compiles modules
imported from a zip on every import and caches no bytecode, so every such process spends about
half a second compiling pyspark before it does anything. With pyspark installed by pip,
``SPARK_HOME`` is the installed package, and the zip holds the very files of the package next to
it, whose bytecode Python caches.

``kafka-eos-worker-python -m MODULE ARGS`` does what ``python -m MODULE ARGS`` does after taking off
``sys.path`` a ``pyspark.zip`` that lies inside the pyspark package the path would import
otherwise (``<dir>/pyspark/python/lib/pyspark.zip`` with ``<dir>`` on ``sys.path``): never one
pyspark version for another. Any other command line goes to the interpreter unchanged.

**Which Python Spark starts by default.** PySpark's ``SparkContext`` takes ``pythonExec`` from
``PYSPARK_PYTHON`` when it starts, else ``python3`` (whichever ``python3`` comes first on
``PATH``), and Spark gives every Python function it plans (a UDF, ``mapInArrow``, a registered
Python data source) the ``pythonExec`` of the moment the function is made: that is the Python the
workers of those tasks start, on the driver and on executors. A job run as ``.venv/bin/python
job.py`` from a shell where the venv is not activated would therefore have its workers run the
system's ``python3``, which lacks the kit (``No module named 'connectors'``).
:func:`use_session_python` (called by ``connectors.spark.register`` and the foreachBatch helper, on
the driver, before their functions are made) sets ``pythonExec`` to this interpreter (through its
launcher) on a local master, where every worker runs on this machine, unless the user chose a
Python (``PYSPARK_PYTHON`` or ``spark.pyspark.python``). ``spark.pyspark.python`` is honoured by
``spark-submit`` (which exports it as ``PYSPARK_PYTHON`` before the driver starts), not by a
session built in a plain ``python job.py``; either way it is left alone. On a cluster, executors
have their own Python: there ``PYSPARK_PYTHON`` must name one that has the kit on every node, or the
kit is shipped with the job (``spark.archives``, ``docs/where-it-runs.md``).
"""

from __future__ import annotations

import os
import runpy
import shutil
import sys
import warnings
from pathlib import Path

#: The launcher's console script (``[project.scripts]``): named apart from the Python data source's
#: ``kafka-eos-python`` (``connectors/spark/format_names.py``).
COMMAND = "kafka-eos-worker-python"
#: Its name until 0.2.0, kept for one release: it warns once, then does what ``COMMAND`` does.
DEPRECATED_COMMAND = "kafka-eos-python"
#: ``0``: ``path()`` is the plain interpreter, and ``connectors.spark.register`` keeps the
#: session's Python for the kit's data source.
DISABLE_ENV = "KAFKA_EOS_WORKER_PYTHON"


def _disabled() -> bool:
    return os.environ.get(DISABLE_ENV, "").strip().lower() in ("0", "false", "off", "no")


def path() -> str:
    """This environment's ``kafka-eos-worker-python``, for ``PYSPARK_PYTHON`` or
    ``spark.pyspark.python`` (next to the interpreter, as pip installs console scripts); where an
    install older than the launcher's name has only ``kafka-eos-python`` (an editable install not
    reinstalled since), that one; the interpreter itself if there is none (a source checkout that
    was not installed) or ``KAFKA_EOS_WORKER_PYTHON=0``."""
    if _disabled():
        return sys.executable
    for name in (COMMAND, DEPRECATED_COMMAND):
        launcher = Path(sys.executable).with_name(name)
        if launcher.is_file() and os.access(launcher, os.X_OK):
            return str(launcher)
    return sys.executable


#: What PySpark's ``SparkContext`` runs when ``PYSPARK_PYTHON`` is not set.
PYSPARK_DEFAULT_PYTHON = "python3"
#: Spark's setting of the Python of the driver and executors (``spark-submit`` exports it).
PYTHON_CONF = "spark.pyspark.python"


def is_local_master(master: str) -> bool:
    """``local``, ``local[N]``, ``local[*]``, ``local[N,F]``, ``local-cluster[...]``: every
    executor and Python worker is a process of this machine, so this interpreter's path is valid
    for them."""
    return master.strip().startswith("local")


def use_session_python(context: object) -> str | None:
    """On a local master, make ``context`` (a classic ``SparkContext``) start Spark's Python
    processes with this interpreter (``path()``: its ``kafka-eos-worker-python`` launcher if installed),
    unless the user chose a Python: ``PYSPARK_PYTHON`` set, ``spark.pyspark.python`` set, or
    ``pythonExec`` changed from PySpark's default. Returns what it set, or None.

    Only the Python-side ``SparkContext.pythonExec`` is changed: functions made after this call
    (the kit's data source at ``register``, its ``mapInArrow`` tasks, the user's UDFs) start their
    workers with it. Functions made before keep what they had; the environment is not changed, so
    a later session (possibly on a cluster) makes its own choice. (``KAFKA_EOS_WORKER_PYTHON=0``:
    the plain interpreter rather than the launcher.)"""
    try:
        master = str(context.master)  # type: ignore[attr-defined]
        current = context.pythonExec  # type: ignore[attr-defined]
        if not is_local_master(master) or os.environ.get("PYSPARK_PYTHON") or current != PYSPARK_DEFAULT_PYTHON:
            # Decided without the configuration, whose copy costs ~18 ms of round trips to the JVM:
            # the foreachBatch sink calls this at every batch, and after the first it is set.
            return None
        configured = context.getConf().get(PYTHON_CONF)  # type: ignore[attr-defined]
    except Exception:  # not a classic SparkContext (Spark Connect): the server starts the processes
        return None
    if configured:
        return None
    chosen = path()
    context.pythonExec = chosen  # type: ignore[attr-defined]
    return chosen


def for_data_source(python_exec: str, master: str) -> str | None:
    """The launcher to give the kit's data source instead of ``python_exec`` (the session's
    ``PYSPARK_PYTHON``), or None to keep it.

    Only where it is the same thing: a local master (the data source's tasks run on this machine,
    like its planning steps) and ``python_exec`` being this very interpreter, so the launcher
    (next to it) sees the same packages. On a cluster, executors may have another layout: there a
    user sets ``PYSPARK_PYTHON`` (``spark.pyspark.python``) to the executors' ``kafka-eos-worker-python``."""
    if _disabled() or not is_local_master(master):
        return None
    found = shutil.which(python_exec)
    if found is None or os.path.abspath(found) != os.path.abspath(sys.executable):
        return None
    launcher = path()
    return launcher if launcher != sys.executable else None


def shadowing_zips(entries: list[str]) -> list[str]:
    """The entries of ``entries`` that are a ``pyspark.zip`` inside a pyspark package that a later
    entry (a site-packages folder) would import from."""
    folders = {os.path.realpath(entry) for entry in entries if entry and not entry.endswith(".zip")}
    found = []
    for entry in entries:
        zip_file = Path(entry)
        if zip_file.name != "pyspark.zip" or zip_file.parent.name != "lib" or zip_file.parent.parent.name != "python":
            continue
        package = zip_file.parent.parent.parent
        if (package.name == "pyspark" and (package / "__init__.py").is_file()
                and os.path.realpath(package.parent) in folders):
            found.append(entry)
    return found


def main(argv: list[str] | None = None) -> None:
    if argv is None:
        warn_if_old_name(sys.argv[0])
    args = sys.argv[1:] if argv is None else argv
    if len(args) >= 2 and args[0] == "-m":
        for entry in shadowing_zips(sys.path):
            sys.path.remove(entry)
        # As ``python -m``: the current directory first, not the folder of this launcher.
        launcher_folder = os.path.dirname(os.path.abspath(sys.argv[0]))
        if sys.path and sys.path[0] and os.path.abspath(sys.path[0]) == launcher_folder:
            sys.path[0] = os.getcwd()
        sys.argv = [args[1], *args[2:]]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        return
    os.execv(sys.executable, [sys.executable, *args])


_deprecation_warned = False


def warn_if_old_name(program: str) -> bool:
    """One DeprecationWarning per process when the launcher runs as ``kafka-eos-python``, its name
    until 0.2.0 (removed in the release after it); returns whether ``program`` is that name.

    Both console scripts name :func:`main`, which every version of the kit has: a job whose
    ``PYTHONPATH`` puts another version's ``connectors`` first still finds it."""
    global _deprecation_warned
    if Path(program).name != DEPRECATED_COMMAND:
        return False
    if not _deprecation_warned:
        _deprecation_warned = True
        # stacklevel 3: the console script's __main__, where Python shows a DeprecationWarning.
        warnings.warn(f"{DEPRECATED_COMMAND} is deprecated and will be removed in the release after 0.2.0: "
                      f"use {COMMAND} (the same launcher; {DEPRECATED_COMMAND} is also the name of the kit's "
                      "Python data source)", DeprecationWarning, stacklevel=3)
    return True


if __name__ == "__main__":
    main()
