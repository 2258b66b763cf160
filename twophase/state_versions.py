"""The versions of every file the kit persists, and the one check each reader makes of them.

Each persisted format carries a ``format_version`` (the Kafka committables inside ``_metadata``
their ``v``). A reader takes every version this kit ever wrote (the upgrade path: state written by
an earlier version is read in place) and refuses a higher one, written by a newer kit (a
downgrade), with :class:`NewerStateFormatError`: one line naming the file, its version, the
versions this kit reads and what to do. It never rewrites such a file, and no caller falls back to
older state past it (an older checkpoint's transactions are not the newest decision). Anything
else (no version, not a number, below 1) is the format's corrupt-file error.

``docs/compatibility.md`` lists which kit versions wrote which format versions;
``tests/twophase/state_fixtures/`` holds a file of each, written by the kit version that wrote it,
and one of a future version per format, read by ``tests/twophase/test_state_fixtures.py``.
"""

from __future__ import annotations

from typing import Any

from twophase.errors import NewerStateFormatError

PACKAGE = "pyspark-kafka-eos"


def check_format_version(version: Any, readable: tuple[int, ...], what: str, location: str | None,
                         corrupt: type[Exception]) -> int:
    """``version`` if it is one of ``readable``; else raise NewerStateFormatError for a higher
    integer (a newer kit wrote it) or ``corrupt`` for anything else."""
    if isinstance(version, int) and not isinstance(version, bool) and version in readable:
        return version
    if isinstance(version, int) and not isinstance(version, bool) and version > max(readable):
        raise newer_state_error(version, readable, what, location)
    raise corrupt(f"format_version {version!r} is not supported (this version reads "
                  f"{_versions(readable)})")


def newer_state_error(version: int, readable: tuple[int, ...], what: str,
                      location: str | None) -> NewerStateFormatError:
    where = location or f"a {what} file"
    return NewerStateFormatError(
        f"{where} is {what} format_version {version}, written by a newer version of {PACKAGE}; "
        f"this version reads format_version {_versions(readable)} only. Upgrade {PACKAGE} to the version "
        "that wrote this state (or later) to run this query; the state is left as it is (a downgrade "
        "never rewrites it).", location=location or "", version=version, readable=readable)


def _versions(readable: tuple[int, ...]) -> str:
    return ", ".join(str(v) for v in readable)
