"""Conditional creates ("create this file only if it does not exist") on remote filesystems.

``pyarrow.fs`` reads, lists and deletes on every store the kit supports, but it has no
conditional write: its output streams overwrite. Each store's own SDK has one, and that is what
is used here:

| filesystem | conditional create | library |
|---|---|---|
| S3 (AWS, MinIO, Ceph RGW) | ``PutObject`` with ``If-None-Match: *`` (412 if the key exists) | boto3 (``pip install pyspark-kafka-eos[s3]``) |
| GCS | upload with ``ifGenerationMatch=0`` | google-cloud-storage (``[gcs]``) |
| ABFS (ADLS Gen2, Blob) | ``Put Blob`` with ``If-None-Match: *`` (``overwrite=False``) | azure-storage-blob, azure-identity (``[azure]``) |
| ``viewfs://`` (HDFS federation) | temp file, then rename, then read back | pyarrow (libhdfs) |

Every SDK finds credentials and endpoints the way pyarrow does (environment variables, config
files, instance or workload identity), so both sides reach the same store as the same principal.

``hdfs://`` is not here: it is served through WebHDFS (:mod:`twophase.storage.webhdfs`), whose
``RENAME`` of a whole temp file, refused onto a taken name, is the NameNode's own atomic
create-if-absent. Only
``viewfs://`` still goes through pyarrow's libhdfs, because its mount table is resolved inside
Hadoop's Java client. libhdfs opens every file for writing with overwrite, and pyarrow's ``move``
replaces an existing file, so the viewfs create checks, renames and reads back: a collision is
detected unless the two writers' renames and read-backs interleave within the same few
milliseconds. The design doc argues why that window is acceptable there (Spark's own metadata log
on the same directory refuses the second driver of a query). Not tested against a server.
"""

from __future__ import annotations

import errno
import importlib.util
import logging
import os
import posixpath
import uuid
from abc import ABC, abstractmethod
from functools import lru_cache
from typing import Any, Sequence

import pyarrow.fs as pafs
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential
from twophase.errors import InvalidValueError, MissingExtraError, StateFileExistsError, StateStorageError

log = logging.getLogger(__name__)


def _exists_error(location: str) -> StateFileExistsError:
    return StateFileExistsError(errno.EEXIST, "state file already exists", location)


def _missing_extra(extra: str, package: str, scheme: str, exc: ImportError) -> MissingExtraError:
    return MissingExtraError(
        f"state on {scheme} needs {package} for conditional creates: pip install "
        f"'pyspark-kafka-eos[{extra}]' ({exc})")


class ConditionalCreate(ABC):
    """How one kind of filesystem creates a file only if it does not exist yet."""

    @abstractmethod
    def create(self, filesystem: pafs.FileSystem, path: str, data: bytes) -> None:
        """Create ``path`` with ``data``; FileExistsError (and nothing changed) if it exists."""

    def delete(self, filesystem: pafs.FileSystem, paths: Sequence[str]) -> None:
        for path in paths:
            try:
                filesystem.delete_file(path)
            except FileNotFoundError:
                pass


class ReadOnly(ConditionalCreate):
    """For locations the kit only reads (another program's files): every write is refused."""

    def __init__(self, location: str) -> None:
        self.location = location

    def create(self, filesystem: pafs.FileSystem, path: str, data: bytes) -> None:
        raise StateStorageError(f"{self.location} was opened read-only; not writing {path}")

    def delete(self, filesystem: pafs.FileSystem, paths: Sequence[str]) -> None:
        raise StateStorageError(f"{self.location} was opened read-only; not deleting {len(paths)} files")


def _s3_conflict(exc: BaseException) -> bool:
    """AWS answers 409 ConditionalRequestConflict while another conditional write of the key is
    in flight; the retry then gets 412 (or succeeds if the other one failed)."""
    response = getattr(exc, "response", None) or {}
    return response.get("Error", {}).get("Code") == "ConditionalRequestConflict"


@lru_cache(maxsize=None)
def s3_client(region: str | None) -> Any:
    """One boto3 client per region and process (creating one costs tens of milliseconds)."""
    try:
        import boto3
        from botocore.config import Config
    except ImportError as exc:
        raise _missing_extra("s3", "boto3", "S3", exc) from exc
    session = boto3.session.Session()
    client = session.client("s3", region_name=region)
    endpoint = client.meta.endpoint_url or ""
    if ".amazonaws.com" not in endpoint:
        # An S3-compatible server (AWS_ENDPOINT_URL): path-style requests, as pyarrow sends them.
        client = session.client("s3", region_name=region, config=Config(s3={"addressing_style": "path"}))
    log.debug("boto3 S3 client for region %s at %s", region, client.meta.endpoint_url)
    return client


class S3ConditionalCreate(ConditionalCreate):
    """``PutObject`` with ``If-None-Match: *`` through boto3, and ``DeleteObjects`` in bulk."""

    def __init__(self, region: str | None) -> None:
        self.region = region or None
        if importlib.util.find_spec("boto3") is None:  # fail at open, naming the extra
            raise _missing_extra("s3", "boto3", "S3", ImportError("No module named 'boto3'"))

    @staticmethod
    def _split(path: str) -> tuple[str, str]:
        bucket, _, key = path.partition("/")
        return bucket, key

    def create(self, filesystem: pafs.FileSystem, path: str, data: bytes) -> None:
        from botocore.exceptions import ClientError

        bucket, key = self._split(path)
        client = s3_client(self.region)
        retrying = Retrying(stop=stop_after_attempt(5), wait=wait_exponential(multiplier=0.05, max=1),
                            retry=retry_if_exception(_s3_conflict), reraise=True)
        try:
            retrying(client.put_object, Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
        except ClientError as exc:
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if status == 412 or exc.response.get("Error", {}).get("Code") == "PreconditionFailed":
                raise _exists_error(f"s3://{path}") from None
            raise StateStorageError(f"creating s3://{path} failed: {exc}") from exc

    def delete(self, filesystem: pafs.FileSystem, paths: Sequence[str]) -> None:
        from botocore.exceptions import ClientError

        by_bucket: dict[str, list[str]] = {}
        for path in paths:
            bucket, key = self._split(path)
            by_bucket.setdefault(bucket, []).append(key)
        client = s3_client(self.region)
        for bucket, keys in by_bucket.items():
            for start in range(0, len(keys), 1000):
                chunk = keys[start:start + 1000]
                try:
                    answer = client.delete_objects(
                        Bucket=bucket, Delete={"Objects": [{"Key": k} for k in chunk], "Quiet": True})
                except ClientError as exc:
                    raise StateStorageError(f"deleting {len(chunk)} objects in s3://{bucket} failed: {exc}") from exc
                errors = answer.get("Errors") or []
                if errors:
                    raise StateStorageError(f"deleting objects in s3://{bucket} failed: {errors[:5]}")


class GcsConditionalCreate(ConditionalCreate):
    """An upload with ``ifGenerationMatch=0`` through google-cloud-storage."""

    def __init__(self) -> None:
        try:
            self._client = _gcs_client()
        except ImportError as exc:
            raise _missing_extra("gcs", "google-cloud-storage", "GCS", exc) from exc

    def create(self, filesystem: pafs.FileSystem, path: str, data: bytes) -> None:
        from google.api_core.exceptions import PreconditionFailed

        bucket, _, name = path.partition("/")
        try:
            self._client.bucket(bucket).blob(name).upload_from_string(data, if_generation_match=0)
        except PreconditionFailed:
            raise _exists_error(f"gs://{path}") from None


@lru_cache(maxsize=None)
def _gcs_client() -> Any:
    """One client per process; Application Default Credentials, as pyarrow's GcsFileSystem."""
    from google.cloud import storage

    return storage.Client()


class AzureConditionalCreate(ConditionalCreate):
    """``Put Blob`` with ``If-None-Match: *`` through azure-storage-blob, authenticated by
    azure-identity's DefaultAzureCredential (the chain pyarrow's AzureFileSystem uses too), or by
    the account key in ``AZURE_STORAGE_ACCOUNT_KEY``."""

    def __init__(self, account_url: str, account_name: str) -> None:
        try:
            self._service = _azure_service(account_url, account_name)
        except ImportError as exc:
            raise _missing_extra("azure", "azure-storage-blob and azure-identity", "ABFS", exc) from exc

    def create(self, filesystem: pafs.FileSystem, path: str, data: bytes) -> None:
        from azure.core.exceptions import ResourceExistsError

        container, _, name = path.partition("/")
        try:
            self._service.get_blob_client(container, name).upload_blob(data, overwrite=False)
        except ResourceExistsError:
            raise _exists_error(f"abfs://{path}") from None


@lru_cache(maxsize=None)
def _azure_service(account_url: str, account_name: str) -> Any:
    """One service client (and credential, which caches its tokens) per account and process."""
    from azure.storage.blob import BlobServiceClient

    key = os.environ.get("AZURE_STORAGE_ACCOUNT_KEY")
    if key:
        credential: Any = {"account_name": account_name, "account_key": key}
    else:
        from azure.identity import DefaultAzureCredential

        credential = DefaultAzureCredential()
    return BlobServiceClient(account_url=account_url, credential=credential)


class HdfsCreate(ConditionalCreate):
    """For ``viewfs://`` through libhdfs: temp file, existence check, rename, read back (see the
    module docstring for the window; ``hdfs://`` uses WebHDFS's atomic create instead)."""

    def create(self, filesystem: pafs.FileSystem, path: str, data: bytes) -> None:
        if filesystem.get_file_info(path).type != pafs.FileType.NotFound:
            raise _exists_error(path)
        folder, name = posixpath.split(path)
        temp = f"{folder}/.{name}.{uuid.uuid4().hex}.tmp"
        filesystem.create_dir(folder, recursive=True)
        with filesystem.open_output_stream(temp) as out:
            out.write(data)
        try:
            if filesystem.get_file_info(path).type != pafs.FileType.NotFound:
                raise _exists_error(path)
            filesystem.move(temp, path)
        finally:
            if filesystem.get_file_info(temp).type != pafs.FileType.NotFound:
                filesystem.delete_file(temp)
        with filesystem.open_input_stream(path) as stream:
            if stream.read() != data:
                raise _exists_error(path)


def azure_account_of(uri_host: str) -> tuple[str, str]:
    """(blob endpoint URL, account name) of an ABFS URI's host ``container@account.dfs.core.windows.net``."""
    host = uri_host.rpartition("@")[2]
    account, _, suffix = host.partition(".")
    service, _, domain = suffix.partition(".")
    if not account or service not in ("dfs", "blob") or not domain:
        raise InvalidValueError(f"ABFS host {uri_host!r} is not of the form container@account.dfs.core.windows.net")
    return f"https://{account}.blob.{domain}", account


def conditional_create_for(filesystem: pafs.FileSystem, uri: str) -> ConditionalCreate:
    """The conditional create for ``filesystem``, opened from ``uri`` (canonical, see state_storage)."""
    kind = filesystem.type_name
    if kind == "s3":
        return S3ConditionalCreate(getattr(filesystem, "region", None))
    if kind == "gcs":
        return GcsConditionalCreate()
    if kind == "abfs":
        url, account = azure_account_of(uri.split("://", 1)[1].split("/", 1)[0])
        return AzureConditionalCreate(url, account)
    if kind == "hdfs":
        return HdfsCreate()
    raise InvalidValueError(f"no conditional create is known for pyarrow filesystem {kind!r} ({uri})")
