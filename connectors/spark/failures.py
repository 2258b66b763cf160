"""The kit's own error lines, out of the Spark exceptions that wrap them.

An error raised in a Spark task, or on the driver inside the data source, reaches the application
wrapped: a ``StreamingQueryException`` (or ``PythonException``) whose message holds the Python
worker's whole traceback and Spark's query description around it. The kit's errors have one-line
messages that say what to do, e.g. ``principal User:app needs READ on topic 'orders' ...``;
:func:`kit_error_lines` finds them in such a message, so an application can print them last,
where they are read::

    try:
        query.awaitTermination()
    except Exception as exc:
        for line in kit_error_lines(exc):
            print(f"kafka-eos: {line}", file=sys.stderr)
        raise

One failure of another kind is turned into a line of the kit's too: Spark's Python workers failing
to import the kit (``ModuleNotFoundError: No module named 'connectors'``, or a package the kit
needs). It happens before any of the kit's code runs in the worker, when the worker unpickles the
function it was sent (the data source's reader or writer, a ``mapInArrow`` task), so the kit cannot
catch it there. Spark sends the worker's traceback to the driver as the text of a
``PythonException`` (through the failed task's reason, inside the ``SparkException`` of the
failed job, inside the ``StreamingQueryException`` of a query); its last line is the
``ModuleNotFoundError``, which :func:`kit_error_lines` recognises and answers with
:func:`worker_python_message`: which setting gives the workers a Python that has the kit.
"""

from __future__ import annotations

import re

# The errors of every package whose code runs in a query (the CLI's and the monitoring's never
# do), so that the root's subclasses below are all defined.
import connectors.kafka.kafka_errors  # noqa: F401
import connectors.spark.spark_errors  # noqa: F401
from twophase.errors import KafkaEosError

# How Python prints an exception's last line: its qualified class name, then its message.
_EXCEPTION_LINE = re.compile(r"^(?P<name>[\w.]+): (?P<message>.+)$")
# A worker that could not import a module.
_MISSING_MODULE = re.compile(r"^(?:[\w.]*\.)?(?:ModuleNotFoundError|ImportError): No module named '(?P<module>[\w.]+)'")

#: The kit's packages, and the packages they import on executors (pyproject.toml's dependencies
#: but pyspark, which Spark itself puts on its workers' path).
KIT_MODULES = frozenset({"connectors", "twophase", "tenacity", "confluent_kafka", "kafka", "pyarrow"})


def worker_python_message(module: str, python: str | None = None) -> str:
    """The one line for Spark's Python workers lacking ``module`` (the kit's, or one it needs);
    ``python``: the Python they ran, when known."""
    ran = f" ({python})" if python else " (PYSPARK_PYTHON or spark.pyspark.python; python3 from PATH if neither is set)"
    return (f"Spark's Python workers cannot import the kit (No module named {module!r}): the Python they run{ran} "
            "lacks it. Set PYSPARK_PYTHON to a Python that has the kit installed on every node, or ship the kit "
            "with the job as a packed virtualenv: spark.archives=env.tar.gz#environment and "
            "PYSPARK_PYTHON=./environment/bin/python (see docs/where-it-runs.md)")


def missing_kit_module(error: BaseException | str) -> str | None:
    """The kit's module (or a dependency's) that a Spark Python worker could not import, named in
    ``error`` (an exception or its text); None if there is none."""
    texts = [error] if isinstance(error, str) else _texts(error)
    for text in texts:
        for line in text.splitlines():
            match = _MISSING_MODULE.match(line.strip())
            if match is not None and match["module"].split(".")[0] in KIT_MODULES:
                return match["module"]
    return None


def _kit_error_names() -> frozenset[str]:
    """The names the kit's errors are printed with: each subclass of the root, by its qualified
    and by its bare name."""
    names: set[str] = set()
    pending: list[type[BaseException]] = [KafkaEosError]
    while pending:
        error_type = pending.pop()
        names.update((f"{error_type.__module__}.{error_type.__qualname__}", error_type.__name__))
        pending.extend(error_type.__subclasses__())
    return frozenset(names)


_KIT_ERROR_NAMES = _kit_error_names()


def kit_error_lines(error: BaseException | str) -> list[str]:
    """The messages of the kit's errors in ``error`` (an exception, or its text), each once, in
    the order they appear. Empty when the failure is not one of the kit's errors."""
    texts = [str(error)] if isinstance(error, str) else _texts(error)
    found: list[str] = []
    for text in texts:
        for line in text.splitlines():
            match = _EXCEPTION_LINE.match(line.strip())
            if match is not None and match["name"] in _KIT_ERROR_NAMES and match["message"] not in found:
                found.append(match["message"])
    if not found:
        module = missing_kit_module(error)
        if module is not None:
            found.append(worker_python_message(module))
    return found


def _texts(error: BaseException) -> list[str]:
    texts = []
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, KafkaEosError):
            texts.append(f"{type(current).__module__}.{type(current).__qualname__}: {current}")
        texts.append(str(current))
        current = current.__cause__ or current.__context__
    return texts
