"""The kit's state on HDFS, through WebHDFS (HdfsCLI, ``pip install 'pyspark-kafka-eos[hdfs]'``): no
native library, no JVM in the Python process.

The decision of a state file is one request to the NameNode, made on a file that is already whole:

1. the content goes to a name of this writer's own (``.<name>.<uuid>.tmp`` beside the file, which
   listings skip), with WebHDFS ``op=CREATE&overwrite=false``;
2. WebHDFS ``op=RENAME`` moves it to the file's name. That rename does not overwrite: the NameNode
   refuses it, under its namespace lock, when the name is taken, so of two writers of one key
   exactly one gets it and the other gets :class:`StateFileExistsError` (its temp file deleted).

A CREATE straight to the file's name would also be an atomic create-if-absent, but the file would
exist from that request on, while its bytes are uploaded: a writer killed in the middle would leave
a short file under the decision's name, which no later writer could replace, and the query could
not store that checkpoint again. With the rename, the name holds a whole file or none; a writer
killed before it leaves only a temp file, which nothing reads.

Reads, listings (LISTSTATUS, folder by folder) and deletes are WebHDFS requests too. A delete
removes the folders it leaves empty (a non-recursive DELETE of the folder, which the NameNode
refuses while anything is in it), so retention leaves no empty ``chk-N`` folders behind.

Where the NameNode's HTTP address comes from: :mod:`twophase.storage.hadoop_config`. Authentication, as
HdfsCLI offers it:

- ``KAFKA_EOS_WEBHDFS_DELEGATION_TOKEN`` set: HdfsCLI's ``TokenClient`` (``delegation=<token>`` on
  every request; the token as WebHDFS's GETDELEGATIONTOKEN returns it);
- ``hadoop.security.authentication=kerberos`` in core-site.xml: HdfsCLI's ``KerberosClient``
  (SPNEGO, from the ticket cache of the process: ``kinit`` or ``KRB5CCNAME``; needs
  ``pip install 'hdfs[kerberos]'``);
- otherwise simple authentication: ``user.name`` is ``$HADOOP_USER_NAME``, else the login name, as
  for Hadoop's own clients.
"""

from __future__ import annotations

import errno
import getpass
import logging
import os
import posixpath
from functools import lru_cache
from typing import Any, Iterable

from twophase.errors import InvalidValueError, MissingExtraError, StateFileExistsError, StateFileNotFoundError, \
    StateStorageError
from twophase.storage.hadoop_config import HadoopConfig, load_hadoop_config, uses_kerberos, webhdfs_urls
from twophase.storage.state_files import WEBHDFS_SCHEMES, StateStorage, check_key, is_temp_name, temp_name

log = logging.getLogger(__name__)

DELEGATION_TOKEN_ENV = "KAFKA_EOS_WEBHDFS_DELEGATION_TOKEN"
HADOOP_USER_ENV = "HADOOP_USER_NAME"
#: Seconds to connect and to wait for an answer: a NameNode that hangs fails the batch, not the query forever.
REQUEST_TIMEOUT_S = 60
#: What the NameNode answers a create of a path that is taken (finished, or still being written).
_EXISTS = ("FileAlreadyExistsException", "AlreadyBeingCreatedException")
_NOT_FOUND = "FileNotFoundException"
_NOT_EMPTY = "PathIsNotEmptyDirectoryException"


def _hdfscli() -> Any:
    try:
        import hdfs
    except ImportError as exc:
        raise MissingExtraError(
            f"state on HDFS is reached through WebHDFS with HdfsCLI: pip install 'pyspark-kafka-eos[hdfs]' ({exc})"
        ) from exc
    return hdfs


@lru_cache(maxsize=None)
def webhdfs_client(urls: tuple[str, ...], auth: str, principal: str) -> Any:
    """One HdfsCLI client (and its connection pool) per NameNode and identity, per process.
    ``auth``: ``simple`` (``principal`` is the user name), ``token`` (the delegation token) or
    ``kerberos``."""
    hdfs = _hdfscli()
    url = ";".join(urls)
    if auth == "token":
        return hdfs.TokenClient(url, principal, timeout=REQUEST_TIMEOUT_S)
    if auth == "kerberos":
        try:
            from hdfs.ext.kerberos import KerberosClient
        except ImportError as exc:
            raise MissingExtraError(
                "state on an HDFS with Kerberos (hadoop.security.authentication=kerberos) needs SPNEGO: "
                f"pip install 'hdfs[kerberos]' ({exc})") from exc
        return KerberosClient(url, timeout=REQUEST_TIMEOUT_S)
    return hdfs.InsecureClient(url, user=principal, timeout=REQUEST_TIMEOUT_S)


def client_identity(config: HadoopConfig) -> tuple[str, str]:
    """(auth, principal) as the module docstring orders them."""
    token = os.environ.get(DELEGATION_TOKEN_ENV, "").strip()
    if token:
        return "token", token
    if uses_kerberos(config):
        return "kerberos", ""
    return "simple", os.environ.get(HADOOP_USER_ENV, "").strip() or getpass.getuser()


class WebHdfsStateStorage(StateStorage):
    """A directory on HDFS, every operation a WebHDFS request through ``client`` (HdfsCLI)."""

    def __init__(self, client: Any, base: str, uri: str, *, read_only: bool = False) -> None:
        self.client = client
        self.base = "/" + base.strip("/") if base.strip("/") else "/"
        self.uri = uri
        self.read_only = read_only

    def __repr__(self) -> str:
        return f"WebHdfsStateStorage({self.uri!r} at {getattr(self.client, 'url', '?')})"

    def _path(self, key: str) -> str:
        return posixpath.join(self.base, check_key(key))

    def _failed(self, what: str, key: str, exc: Exception) -> StateStorageError:
        cause = getattr(exc, "exception", None)
        return StateStorageError(f"{what} {self.location(key)} through WebHDFS at {getattr(self.client, 'url', '?')} "
                                 f"failed: {f'{cause}: ' if cause else ''}{exc}")

    def _refuse_write(self, what: str) -> None:
        if self.read_only:
            raise StateStorageError(f"{self.uri} was opened read-only; not {what}")

    def create(self, key: str, data: bytes) -> None:
        """Steps 1-2 of the module doc: the whole content under a temp name, then the rename that
        the NameNode refuses when ``key`` is taken."""
        self._refuse_write(f"creating {key}")
        hdfs = _hdfscli()
        path = self._path(key)
        folder, name = posixpath.split(path)
        temp = posixpath.join(folder, temp_name(name))
        try:
            # 1. write: parents are created with the file; the name is this writer's alone.
            self.client.write(temp, data=data, overwrite=False)
            # 2. decide.
            try:
                self.client.rename(temp, path)
            except hdfs.HdfsError:
                taken = self._is_file(path)
                self._delete_quietly(temp)
                if taken:
                    raise StateFileExistsError(errno.EEXIST, "state file already exists", self.location(key)) from None
                raise
        except StateFileExistsError:
            raise
        except hdfs.HdfsError as exc:
            if getattr(exc, "exception", None) in _EXISTS:  # the temp name: never, short of a uuid clash
                raise StateFileExistsError(errno.EEXIST, "state file already exists", self.location(key)) from None
            raise self._failed("creating", key, exc) from exc
        except OSError as exc:  # requests' connection errors
            raise self._failed("creating", key, exc) from exc

    def _is_file(self, path: str) -> bool:
        status = self.client.status(path, strict=False)
        return bool(status) and status.get("type") == "FILE"

    def _delete_quietly(self, path: str) -> None:
        try:
            self.client.delete(path)
        except Exception as exc:  # a leftover temp file is skipped by listings; the refusal matters
            log.warning("could not delete the temp file %s: %s", path, exc)

    def read(self, key: str) -> bytes:
        hdfs = _hdfscli()
        try:
            with self.client.read(self._path(key)) as reader:
                return reader.read()
        except hdfs.HdfsError as exc:
            if getattr(exc, "exception", None) == _NOT_FOUND:
                raise StateFileNotFoundError(errno.ENOENT, "no such state file", self.location(key)) from None
            raise self._failed("reading", key, exc) from exc
        except OSError as exc:
            raise self._failed("reading", key, exc) from exc

    def exists(self, key: str) -> bool:
        hdfs = _hdfscli()
        try:
            return self._is_file(self._path(key))
        except (hdfs.HdfsError, OSError) as exc:
            raise self._failed("looking up", key, exc) from exc

    def list_keys(self, subdirectory: str = "") -> list[str]:
        hdfs = _hdfscli()
        start = self._path(subdirectory) if subdirectory else self.base
        prefix = self.base.rstrip("/") + "/"
        keys = []
        try:
            for folder, _, files in self.client.walk(start, ignore_missing=True):
                relative = folder[len(prefix):] if folder.startswith(prefix) else ""
                keys += [posixpath.join(relative, name) for name in files if not is_temp_name(name)]
        except hdfs.HdfsError as exc:
            if getattr(exc, "exception", None) == _NOT_FOUND:
                return []
            raise self._failed("listing", subdirectory, exc) from exc
        except OSError as exc:
            raise self._failed("listing", subdirectory, exc) from exc
        return sorted(keys)

    def delete(self, keys: Iterable[str]) -> None:
        self._refuse_write("deleting files")
        hdfs = _hdfscli()
        folders: set[str] = set()
        for key in keys:
            path = self._path(key)
            try:
                self.client.delete(path)  # False (not an error) when it was not there
            except (hdfs.HdfsError, OSError) as exc:
                raise self._failed("deleting", key, exc) from exc
            folder = posixpath.dirname(path)
            if folder != self.base:
                folders.add(folder)
        for folder in sorted(folders, key=lambda f: f.count("/"), reverse=True):
            try:
                self.client.delete(folder, recursive=False)
            except hdfs.HdfsError as exc:
                if getattr(exc, "exception", None) != _NOT_EMPTY:  # a writer put a file in meanwhile: keep it
                    raise self._failed("deleting the folder", folder[len(self.base):].lstrip("/"), exc) from exc
            except OSError as exc:
                raise self._failed("deleting the folder", folder[len(self.base):].lstrip("/"), exc) from exc

    def delete_folder(self) -> None:
        self._refuse_write("deleting the folder")
        hdfs = _hdfscli()
        try:
            self.client.delete(self.base, recursive=True)
        except (hdfs.HdfsError, OSError) as exc:
            raise self._failed("deleting", "", exc) from exc


def open_webhdfs_storage(canonical: str, *, read_only: bool = False,
                         config: HadoopConfig | None = None) -> WebHdfsStateStorage:
    """The storage of a canonical ``hdfs://``, ``webhdfs://`` or ``swebhdfs://`` location."""
    scheme, rest = canonical.split("://", 1)
    if scheme not in WEBHDFS_SCHEMES:
        raise InvalidValueError(f"{canonical!r} is not an HDFS location; valid schemes: {', '.join(WEBHDFS_SCHEMES)}")
    authority, _, path = rest.partition("/")
    config = config if config is not None else load_hadoop_config()
    urls = webhdfs_urls(scheme, authority, config)
    auth, principal = client_identity(config)
    client = webhdfs_client(urls, auth, principal)
    log.debug("state %s through WebHDFS at %s (%s authentication)", canonical, ";".join(urls), auth)
    return WebHdfsStateStorage(client, path, canonical, read_only=read_only)
