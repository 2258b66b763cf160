"""State storages for unit tests: a local directory, and pyarrow over fsspec's in-memory
filesystem (the same ArrowStateStorage code that serves S3, GCS, ABFS and HDFS)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pyarrow.fs as pafs
from fsspec.implementations.memory import MemoryFileSystem

from twophase.conditional_create import SingleProcessCreate
from twophase.state_storage import ArrowStateStorage, LocalStateStorage, StateStorage

KINDS = ("local", "memory")


def memory_storage() -> ArrowStateStorage:
    # fsspec's memory filesystem is one store per process: a folder of its own per test.
    base = f"/state-{uuid.uuid4().hex}"
    filesystem = pafs.PyFileSystem(pafs.FSSpecHandler(MemoryFileSystem()))
    return ArrowStateStorage(filesystem, base, SingleProcessCreate(), f"memory://{base}")


def make_storage(kind: str, tmp_path: Path) -> StateStorage:
    if kind == "local":
        return LocalStateStorage(tmp_path / "state")
    if kind == "memory":
        return memory_storage()
    raise ValueError(f"unknown storage kind {kind!r}; valid: {KINDS}")
