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

# How Python prints an exception's last line: its qualified class name, then its message.
_KIT_ERROR = re.compile(r"^(?:connectors|twophase)(?:\.\w+)+\.(?P<name>\w*(?:Error|Exception)): (?P<message>.+)$")


def kit_error_lines(error: BaseException | str) -> list[str]:
    """The messages of the kit's errors in ``error`` (an exception, or its text), each once, in
    the order they appear. Empty when the failure is not one of the kit's errors."""
    texts = [str(error)] if isinstance(error, str) else _texts(error)
    found: list[str] = []
    for text in texts:
        for line in text.splitlines():
            match = _KIT_ERROR.match(line.strip())
            if match is not None and match["message"] not in found:
                found.append(match["message"])
    return found


def _texts(error: BaseException) -> list[str]:
    texts = []
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if type(current).__module__.startswith(("connectors.", "twophase.")):
            texts.append(f"{type(current).__module__}.{type(current).__name__}: {current}")
        texts.append(str(current))
        current = current.__cause__ or current.__context__
    return texts
