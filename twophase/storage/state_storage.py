"""Where the kit keeps its state: a directory on any filesystem Spark keeps checkpoints on.

A :class:`StateStorage` is one directory seen as a set of **write-once files** under relative keys
(``chk-7/_metadata``). Object stores have no atomic rename, no directory fsync, and a reader that
streams an object while it is overwritten can see a mix of both versions. So the state is never
rewritten in place: every file is created exactly once, whole, and later only deleted.
:meth:`StateStorage.create` is a conditional create (``If-None-Match: *`` semantics): of two
writers of one key exactly one succeeds, the other gets :class:`FileExistsError`.

:func:`open_state_storage` maps a path or URI to an implementation:

- a local or mounted POSIX path, ``file:`` and ``dbfs:/`` (the ``/dbfs`` mount of Databricks):
  :class:`LocalStateStorage`, temp file + fsync + ``link()`` (fails if the name exists) + fsync of
  the directory;
- ``s3://`` (also Spark's ``s3a://`` and ``s3n://``), ``gs://``, ``abfs://``/``abfss://``,
  ``viewfs://``: :class:`twophase.storage.arrow_filesystem.ArrowStateStorage`, reads and listings
  through ``pyarrow.fs`` (credentials and endpoints found as pyarrow and the cloud SDKs find
  them), conditional creates through the store's own SDK
  (:mod:`twophase.storage.conditional_create`);
- ``hdfs://`` (``hdfs:///path``: the namenode of ``fs.defaultFS``), ``webhdfs://``,
  ``swebhdfs://``: :class:`twophase.storage.webhdfs.WebHdfsStateStorage`, every operation a WebHDFS
  request, the conditional create a whole temp file and one ``RENAME`` that the NameNode refuses
  onto a taken name. ``viewfs://`` stays on
  pyarrow's libhdfs: its mount table is resolved inside Hadoop's Java client, which WebHDFS does not
  have.

A scheme outside that list is refused with :class:`UnsupportedStateLocationError`.
"""

from __future__ import annotations

import errno
import logging
import os
import posixpath
import shutil
import tempfile
from pathlib import Path
from typing import Iterable
from urllib.parse import urlparse

from twophase.errors import (
    StateFileExistsError,
    UnsupportedStateLocationError,
)
# The contract and its helpers are defined in state_files.py, which every storage imports (so none
# imports this dispatcher back); StateStorage is named here too, where the kit's modules find it.
from twophase.storage.state_files import TEMP_SUFFIX, WEBHDFS_SCHEMES, StateStorage, check_key, is_temp_name

log = logging.getLogger(__name__)

#: Schemes Spark users write, mapped to the pyarrow filesystem that serves them.
_ARROW_SCHEMES = {
    "s3": "s3", "s3a": "s3", "s3n": "s3",
    "gs": "gs", "gcs": "gs",
    "abfs": "abfs", "abfss": "abfss",
    "viewfs": "viewfs",
}
_LOCAL_SCHEMES = ("", "file")
DBFS_MOUNT = "/dbfs"
SUPPORTED_LOCATIONS = (
    "a local or mounted path (/path or file:///path), dbfs:/path (the /dbfs mount), "
    "s3://bucket/path (also s3a://, s3n://), gs://bucket/path, "
    "abfss://container@account.dfs.core.windows.net/path (also abfs://), hdfs://namenode/path "
    "(also hdfs:///path, webhdfs://, swebhdfs://, viewfs://)"
)
class LocalStateStorage(StateStorage):
    """A directory on a local or mounted POSIX filesystem.

    create(): the data goes to a temp file in the target folder, which is fsynced and then
    hard-linked to its final name (``link()`` fails when the name exists, so it is a conditional
    create), and the folder is fsynced. Where the filesystem has no hard links (some FUSE mounts),
    the final name is created with ``O_EXCL`` and written in place: still one winner, but a crash
    in the middle of that write leaves a truncated file, which the checkpoint's checksum catches.
    """

    def __init__(self, root: str | os.PathLike[str], uri: str | None = None) -> None:
        self.root = Path(os.path.abspath(root))
        self.uri = uri or str(self.root)

    def __repr__(self) -> str:
        return f"LocalStateStorage({str(self.root)!r})"

    def _path(self, key: str) -> Path:
        return self.root / check_key(key)

    def create(self, key: str, data: bytes) -> None:
        target = self._path(key)
        self._make_folder(target.parent)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=TEMP_SUFFIX, dir=target.parent)
        try:
            with os.fdopen(fd, "wb") as tmp:
                tmp.write(data)
                tmp.flush()
                os.fsync(tmp.fileno())
            try:
                os.link(tmp_name, target)
            except FileExistsError:
                raise StateFileExistsError(errno.EEXIST, "state file already exists", str(target)) from None
            except OSError as exc:
                if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS,
                                     errno.EXDEV, errno.EMLINK):
                    raise
                log.warning("%s has no hard links (%s); creating %s with O_EXCL instead",
                            target.parent, exc.strerror, target.name)
                self._create_exclusive_in_place(target, data)
        finally:
            try:
                os.unlink(tmp_name)
            except FileNotFoundError:
                pass
        _fsync_directory(target.parent)

    @staticmethod
    def _create_exclusive_in_place(target: Path, data: bytes) -> None:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())

    def _make_folder(self, folder: Path) -> None:
        if folder.is_dir():
            return
        missing = [p for p in (folder, *folder.parents) if not p.exists()]
        folder.mkdir(parents=True, exist_ok=True)
        # A new folder's own entry must be durable too, or a crash can lose every file in it.
        for created in reversed(missing):
            _fsync_directory(created.parent)

    def read(self, key: str) -> bytes:
        return self._path(key).read_bytes()

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def list_keys(self, subdirectory: str = "") -> list[str]:
        base = self._path(subdirectory) if subdirectory else self.root
        keys = []
        for folder, _, files in os.walk(base):
            relative = Path(folder).relative_to(self.root).as_posix()
            for name in files:
                if not is_temp_name(name):
                    keys.append(name if relative == "." else f"{relative}/{name}")
        return sorted(keys)

    def delete(self, keys: Iterable[str]) -> None:
        folders: set[Path] = set()
        deleted = False
        for key in keys:
            path = self._path(key)
            try:
                path.unlink()
                deleted = True
            except FileNotFoundError:
                pass
            if path.parent != self.root:
                folders.add(path.parent)
        for folder in sorted(folders, key=lambda p: len(p.parts), reverse=True):
            self._remove_if_only_temp_files(folder)
        if (deleted or folders) and self.root.is_dir():
            _fsync_directory(self.root)

    def delete_folder(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
        if self.root.parent.is_dir():
            _fsync_directory(self.root.parent)

    def _remove_if_only_temp_files(self, folder: Path) -> None:
        """Remove ``folder`` if all that is left in it are temp files of crashed creates."""
        try:
            entries = list(folder.iterdir())
        except FileNotFoundError:
            return
        if any(not (e.is_file() and is_temp_name(e.name)) for e in entries):
            return
        for entry in entries:
            entry.unlink(missing_ok=True)
        try:
            folder.rmdir()
        except OSError as exc:  # a writer put something in meanwhile: leave it
            log.debug("kept %s: %s", folder, exc)


def _fsync_directory(directory: Path) -> None:
    """Make a link, rename or unlink in ``directory`` durable (POSIX needs the folder fsynced)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def canonical_location(location: str | os.PathLike[str]) -> str:
    """The one spelling of a state location: an absolute path for local ones (``file:`` and
    ``dbfs:/`` resolved), otherwise the URI with Spark's scheme aliases mapped to pyarrow's
    (``s3a://b/p`` -> ``s3://b/p``) and ``hdfs:///p`` given the namenode of ``fs.defaultFS``.
    Refuses schemes the kit cannot open."""
    text = os.fspath(location)
    parsed = urlparse(text)
    scheme = parsed.scheme.lower()
    if len(scheme) == 1:  # a Windows drive letter, not a scheme
        scheme = ""
    if scheme in _LOCAL_SCHEMES:
        return os.path.abspath(parsed.path if scheme == "file" else text)
    if scheme == "dbfs":
        if parsed.netloc:
            raise UnsupportedStateLocationError(
                f"state location {text!r}: write dbfs:/path (the /dbfs mount); dbfs://host/... is not supported")
        return posixpath.join(DBFS_MOUNT, parsed.path.lstrip("/"))
    if scheme in WEBHDFS_SCHEMES:
        netloc = parsed.netloc or (_default_namenode(text) if scheme == "hdfs" else "")
        if not netloc:
            raise UnsupportedStateLocationError(
                f"state location {text!r} names no namenode; valid: {SUPPORTED_LOCATIONS}")
        return f"{scheme}://{netloc}{parsed.path.rstrip('/')}"
    if scheme in _ARROW_SCHEMES:
        if not parsed.netloc:
            raise UnsupportedStateLocationError(
                f"state location {text!r} names no bucket, container or namenode; valid: {SUPPORTED_LOCATIONS}")
        path = parsed.path.rstrip("/")
        return f"{_ARROW_SCHEMES[scheme]}://{parsed.netloc}{path}"
    hint = ""
    if scheme in ("wasb", "wasbs"):
        hint = " Azure Blob Storage is served through ABFS: write abfss://container@account.dfs.core.windows.net/path."
    raise UnsupportedStateLocationError(
        f"state location {text!r}: the scheme {scheme!r} is not supported.{hint} Valid locations: "
        f"{SUPPORTED_LOCATIONS}")


def _default_namenode(location: str) -> str:
    """The namenode of ``fs.defaultFS`` (Hadoop's core-site.xml), for ``hdfs:///path``."""
    from twophase.storage.hadoop_config import default_filesystem_authority, load_hadoop_config

    config = load_hadoop_config()
    namenode = default_filesystem_authority(config)
    if namenode is None:
        raise UnsupportedStateLocationError(
            f"state location {location!r} names no namenode, and fs.defaultFS is no hdfs:// URI "
            f"({config.describe()}): write hdfs://namenode:port/path, or set HADOOP_CONF_DIR to the "
            "folder of the cluster's core-site.xml")
    return namenode


def open_state_storage(location: str | os.PathLike[str], *, read_only: bool = False) -> StateStorage:
    """The storage of ``location`` (a path or URI; see :func:`canonical_location`).

    Remote filesystems are opened the way pyarrow opens them from a URI: credentials, endpoint and
    region come from the environment, the SDKs' config files and instance metadata (for S3:
    ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``, ``AWS_PROFILE``, instance
    profiles); for HDFS, see :mod:`twophase.storage.hadoop_config`. Nothing is contacted until the first read
    or write. ``read_only`` storages need no conditional-create library (for reading what another
    program wrote, such as Spark's own checkpoint folder; on ``hdfs://`` the ``hdfs`` extra still
    does every read); their create() and delete() raise.
    """
    canonical = canonical_location(location)
    if "://" not in canonical:
        if canonical.startswith(DBFS_MOUNT + "/") and not os.path.isdir(DBFS_MOUNT):
            raise UnsupportedStateLocationError(
                f"state location {os.fspath(location)!r} is on DBFS, which the kit reaches through the "
                f"{DBFS_MOUNT} mount of Databricks clusters; this machine has no {DBFS_MOUNT}")
        return LocalStateStorage(canonical, os.fspath(location) if isinstance(location, str) else None)
    scheme, rest = canonical.split("://", 1)
    if scheme in WEBHDFS_SCHEMES:
        from twophase.storage.webhdfs import open_webhdfs_storage  # needs the hdfs extra: only for HDFS

        return open_webhdfs_storage(canonical, read_only=read_only)
    # Imported here, not at the top: pyarrow (and the stores' SDKs) cost about 0.1 s to import, in
    # every Python process of a query that opens the state (the sink's write planning and commit
    # processes, the foreachBatch driver) though state on a local path or HDFS needs none of it.
    from twophase.storage.arrow_filesystem import open_arrow_storage

    return open_arrow_storage(canonical, read_only=read_only)
