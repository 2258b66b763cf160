"""One directory of state as a set of write-once files: the :class:`StateStorage` contract that
every storage implements (local disk in ``state_storage.py``, the ``pyarrow.fs`` stores in
``arrow_filesystem.py``, HDFS in ``webhdfs.py``), its keys and the temp names of creates in
progress. :func:`twophase.storage.state_storage.open_state_storage` picks the storage of a location.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from typing import Iterable

from twophase.errors import ConditionalCreateUnsupportedError, InvalidValueError

#: Served through WebHDFS (twophase/storage/webhdfs.py), not pyarrow.
WEBHDFS_SCHEMES = ("hdfs", "webhdfs", "swebhdfs")
TEMP_SUFFIX = ".tmp"
_PROBE_PREFIX = "_write-probe-"


def is_temp_name(name: str) -> bool:
    """A temp file of a create in progress (ours, or Spark's checkpoint manager's ``.name.uuid.tmp``)."""
    return name.startswith(".") and name.endswith(TEMP_SUFFIX)


def temp_name(name: str) -> str:
    """A name of this writer's own for the content of ``name`` before it is decided (a temp file
    that :func:`is_temp_name` knows and listings skip)."""
    return f".{name}.{uuid.uuid4().hex}{TEMP_SUFFIX}"


def check_key(key: str) -> str:
    """``key`` if it is a relative path that stays inside the state directory."""
    parts = key.split("/")
    if not key or key.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise InvalidValueError(f"state key {key!r} must be a relative path without '.' or '..' parts")
    return key


class StateStorage(ABC):
    """One directory of state, as write-once files under relative, '/'-separated keys."""

    #: The location as the user would write it, for messages.
    uri: str

    @abstractmethod
    def create(self, key: str, data: bytes) -> None:
        """Write ``key`` once. A reader sees all of ``data`` or no file; a second create of the
        same key, by anyone, raises FileExistsError and leaves the first content in place."""

    @abstractmethod
    def read(self, key: str) -> bytes:
        """The whole content of ``key``; FileNotFoundError if it does not exist."""

    @abstractmethod
    def exists(self, key: str) -> bool: ...

    @abstractmethod
    def list_keys(self, subdirectory: str = "") -> list[str]:
        """Keys of every file under the directory (or under ``subdirectory`` of it), any depth,
        sorted. Temp files of creates in progress are not listed."""

    @abstractmethod
    def delete(self, keys: Iterable[str]) -> None:
        """Delete ``keys`` (missing ones are ignored) and whatever folder they leave empty."""

    def delete_folder(self) -> None:
        """Delete every file under the directory, and the directory itself where that exists."""
        self.delete(self.list_keys())

    def location(self, key: str = "") -> str:
        """``key``'s full location, for messages."""
        return f"{self.uri.rstrip('/')}/{key}" if key else self.uri

    def check_writable(self) -> None:
        """Fail now, not at the first checkpoint, when the directory cannot take our files or
        when the storage ignores conditional creates (an old S3-compatible server, say)."""
        probe = f"{_PROBE_PREFIX}{uuid.uuid4().hex}"
        try:
            self.create(probe, b"probe")
            try:
                self.create(probe, b"second")
            except FileExistsError:
                pass
            else:
                raise ConditionalCreateUnsupportedError(
                    f"the storage of {self.uri!r} let a second writer create an existing file: it "
                    "ignores conditional creates (If-None-Match: *), which the kit needs so that two "
                    "drivers of one query cannot overwrite each other's state. Use a storage that "
                    "supports them (AWS S3, MinIO, Ceph RGW >= 16, GCS, ABFS, HDFS, a POSIX disk)")
            finally:
                self.delete([probe])
        except OSError as exc:
            raise InvalidValueError(f"state location {self.uri!r} is not a writable directory: {exc}") from exc
