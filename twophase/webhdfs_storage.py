"""The kit's state on HDFS, through WebHDFS (HdfsCLI, ``pip install 'pyspark-kafka-eos[hdfs]'``): no
native library, no JVM in the Python process.

The decision of a state file is one request to the NameNode: WebHDFS ``op=CREATE&overwrite=false``.
The NameNode creates the file only if the path is free, under its namespace lock, so of two
writers of one key exactly one gets the file; the other gets ``FileAlreadyExistsException`` (or
``AlreadyBeingCreatedException`` while the winner is still writing), raised here as
:class:`StateFileExistsError`. Unlike a rename-based create, the file exists from that request on:
a reader that comes within the milliseconds of the upload sees it short, and a writer killed in the
middle of sending its few bytes leaves it short (the DataNode closes what it got). Nothing reads a
state file as valid unless it is whole: a checkpoint carries a checksum, the owner record must be
valid JSON, the markers carry no content.

Reads, listings (LISTSTATUS, folder by folder) and deletes are WebHDFS requests too. A delete
removes the folders it leaves empty (a non-recursive DELETE of the folder, which the NameNode
refuses while anything is in it), so retention leaves no empty ``chk-N`` folders behind.

Where the NameNode's HTTP address comes from: :mod:`twophase.hadoop_config`. Authentication, as
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
from twophase.hadoop_config import HadoopConfig, load_hadoop_config, uses_kerberos, webhdfs_urls
from twophase.state_storage import StateStorage, check_key, is_temp_name

log = logging.getLogger(__name__)

DELEGATION_TOKEN_ENV = "KAFKA_EOS_WEBHDFS_DELEGATION_TOKEN"
HADOOP_USER_ENV = "HADOOP_USER_NAME"
WEBHDFS_SCHEMES = ("hdfs", "webhdfs", "swebhdfs")
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
        self._refuse_write(f"creating {key}")
        hdfs = _hdfscli()
        path = self._path(key)
        try:
            # One CREATE with overwrite=false: the NameNode's create-if-absent decides (parents are
            # created with the file).
            self.client.write(path, data=data, overwrite=False)
        except hdfs.HdfsError as exc:
            if getattr(exc, "exception", None) in _EXISTS:
                raise StateFileExistsError(errno.EEXIST, "state file already exists", self.location(key)) from None
            raise self._failed("creating", key, exc) from exc
        except OSError as exc:  # requests' connection errors
            raise self._failed("creating", key, exc) from exc

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
            status = self.client.status(self._path(key), strict=False)
        except (hdfs.HdfsError, OSError) as exc:
            raise self._failed("looking up", key, exc) from exc
        return bool(status) and status.get("type") == "FILE"

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
