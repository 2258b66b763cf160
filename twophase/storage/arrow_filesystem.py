"""State on the stores ``pyarrow.fs`` serves (S3, GCS, ABFS, and ``viewfs://`` through libhdfs):
reads, listings and deletes through pyarrow, creates through the store's own conditional create
(:mod:`twophase.storage.conditional_create`). :func:`twophase.storage.state_storage.open_state_storage`
opens it for those schemes; a query whose state is on a local path or HDFS never imports pyarrow
for it.
"""

from __future__ import annotations

import errno
import logging
import posixpath
from functools import lru_cache
from typing import Iterable

import pyarrow.fs as pafs

from twophase.errors import StateFileNotFoundError, StateStorageError
from twophase.storage.conditional_create import ConditionalCreate, ReadOnly, conditional_create_for
from twophase.storage.state_files import StateStorage, check_key, is_temp_name

log = logging.getLogger(__name__)


class ArrowStateStorage(StateStorage):
    """A directory on a ``pyarrow.fs`` filesystem: reads, listings and deletes through pyarrow,
    creates through ``conditional`` (the store's own conditional create)."""

    def __init__(self, filesystem: pafs.FileSystem, base: str, conditional: ConditionalCreate,
                 uri: str | None = None) -> None:
        self.filesystem = filesystem
        self.base = base.rstrip("/")
        self.conditional = conditional
        self.uri = uri or f"{filesystem.type_name}://{self.base}"

    def __repr__(self) -> str:
        return f"ArrowStateStorage({self.uri!r})"

    def _path(self, key: str) -> str:
        return f"{self.base}/{check_key(key)}"

    def create(self, key: str, data: bytes) -> None:
        self.conditional.create(self.filesystem, self._path(key), data)

    def read(self, key: str) -> bytes:
        path = self._path(key)
        try:
            with self.filesystem.open_input_stream(path) as stream:
                return stream.read()
        except FileNotFoundError:
            raise
        except OSError as exc:
            # pyarrow reports some stores' missing objects as a plain OSError
            if self.filesystem.get_file_info(path).type == pafs.FileType.NotFound:
                raise StateFileNotFoundError(errno.ENOENT, "no such state file", self.location(key)) from exc
            raise

    def exists(self, key: str) -> bool:
        return self.filesystem.get_file_info(self._path(key)).type == pafs.FileType.File

    def list_keys(self, subdirectory: str = "") -> list[str]:
        base = self._path(subdirectory) if subdirectory else self.base
        selector = pafs.FileSelector(base, recursive=True, allow_not_found=True)
        prefix = f"{self.base}/"
        return sorted(info.path[len(prefix):] for info in self.filesystem.get_file_info(selector)
                      if info.type == pafs.FileType.File and info.path.startswith(prefix)
                      and not is_temp_name(posixpath.basename(info.path)))

    def delete(self, keys: Iterable[str]) -> None:
        self.conditional.delete(self.filesystem, [self._path(k) for k in keys])


def open_arrow_storage(canonical: str, *, read_only: bool = False) -> ArrowStateStorage:
    """The storage of ``canonical`` (a URI of :func:`twophase.storage.state_storage.canonical_location`
    whose scheme pyarrow serves)."""
    scheme, rest = canonical.split("://", 1)
    netloc, _, path = rest.partition("/")
    filesystem, root = _filesystem_of(f"{scheme}://{netloc}")
    conditional = ReadOnly(canonical) if read_only else conditional_create_for(filesystem, canonical)
    return ArrowStateStorage(filesystem, f"{root}/{path}" if path else root, conditional, canonical)


@lru_cache(maxsize=None)
def _filesystem_of(root_uri: str) -> tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem of a bucket, container or namenode, and its root path there. One per
    process: opening one can cost a request (pyarrow asks S3 for the bucket's region) and every
    batch opens the state again."""
    try:
        filesystem, root = pafs.FileSystem.from_uri(root_uri)
    except Exception as exc:  # pyarrow raises ArrowInvalid, OSError (no libhdfs, no network), ...
        raise StateStorageError(f"state location {root_uri!r} could not be opened with pyarrow.fs: {exc}") from exc
    log.debug("opened %s as pyarrow %s filesystem", root_uri, filesystem.type_name)
    return filesystem, root.rstrip("/")
