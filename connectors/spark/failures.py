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
"""

from __future__ import annotations

import re

# Every package's errors, so that the root's subclasses below are all defined.
import connectors.kafka.errors  # noqa: F401
import connectors.spark.errors  # noqa: F401
import connectors.tools.errors  # noqa: F401
from twophase.errors import KafkaEosError

# How Python prints an exception's last line: its qualified class name, then its message.
_EXCEPTION_LINE = re.compile(r"^(?P<name>[\w.]+): (?P<message>.+)$")


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
