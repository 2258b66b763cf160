"""The kit's state storage on an in-memory filesystem: pyarrow over fsspec's MemoryFileSystem, the
same ArrowStateStorage code that serves S3, GCS, ABFS and HDFS (fsspec is a test dependency)."""

from __future__ import annotations

import errno
import posixpath
import threading
import uuid

import pyarrow.fs as pafs

from twophase.storage.arrow_filesystem import ArrowStateStorage
from twophase.storage.conditional_create import ConditionalCreate


class SingleProcessCreate(ConditionalCreate):
    """Check, then write, under a lock: conditional among the threads of one process, which is
    all an in-memory filesystem has."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def create(self, filesystem: pafs.FileSystem, path: str, data: bytes) -> None:
        with self._lock:
            if filesystem.get_file_info(path).type != pafs.FileType.NotFound:
                raise FileExistsError(errno.EEXIST, "state file already exists", path)
            parent = posixpath.dirname(path)
            if parent:
                filesystem.create_dir(parent, recursive=True)
            with filesystem.open_output_stream(path) as out:
                out.write(data)


def memory_storage() -> ArrowStateStorage:
    """A fresh state directory in memory (fsspec's memory filesystem is one per process, so each
    call gets a folder of its own)."""
    from fsspec.implementations.memory import MemoryFileSystem

    base = f"/state-{uuid.uuid4().hex}"
    filesystem = pafs.PyFileSystem(pafs.FSSpecHandler(MemoryFileSystem()))
    return ArrowStateStorage(filesystem, base, SingleProcessCreate(), f"memory://{base}")
