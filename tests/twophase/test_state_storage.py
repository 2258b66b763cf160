"""The filesystem layer under the kit's state: write-once creates, listings, deletes, and the
mapping of Spark's locations (s3a://, abfss://, dbfs:/, ...) to what the kit opens."""

from __future__ import annotations

import errno
import os

import pyarrow.fs as pafs
import pytest

from kafka_testkit.memory_storage import memory_storage
from kafka_testkit.state_scenarios import KINDS, make_storage, racing_creates
from twophase.errors import ConditionalCreateUnsupportedError, UnsupportedStateLocationError
from twophase.storage.arrow_filesystem import ArrowStateStorage
from twophase.storage.conditional_create import ConditionalCreate, azure_account_of
from twophase.storage.state_storage import (
    LocalStateStorage,
    canonical_location,
    open_state_storage,
)


@pytest.fixture(params=KINDS)
def storage(request, tmp_path):
    return make_storage(request.param, tmp_path)


def test_create_writes_once_and_never_overwrites(storage):
    storage.create("chk-1/_metadata", b"first")
    with pytest.raises(FileExistsError):
        storage.create("chk-1/_metadata", b"second")
    assert storage.read("chk-1/_metadata") == b"first"
    assert storage.exists("chk-1/_metadata") and not storage.exists("chk-2/_metadata")


def test_listing_is_recursive_and_sorted(storage):
    for key in ("chk-10/_metadata", "chk-2/_committed", "chk-2/_metadata", "_owner"):
        storage.create(key, b"x")
    assert storage.list_keys() == ["_owner", "chk-10/_metadata", "chk-2/_committed", "chk-2/_metadata"]
    assert storage.list_keys("chk-2") == ["chk-2/_committed", "chk-2/_metadata"]
    assert storage.list_keys("chk-3") == []


def test_a_missing_directory_is_empty(storage):
    assert storage.list_keys() == []
    with pytest.raises(FileNotFoundError):
        storage.read("_owner")


def test_delete_ignores_missing_keys(storage):
    storage.create("chk-1/_metadata", b"x")
    storage.create("chk-1/_committed", b"")
    storage.create("chk-2/_metadata", b"y")
    storage.delete(["chk-1/_metadata", "chk-1/_committed", "chk-1/_gone"])
    assert storage.list_keys() == ["chk-2/_metadata"]


@pytest.mark.parametrize("key", ["", "/abs", "a/../b", "a//b", "./a"])
def test_keys_must_stay_inside_the_directory(storage, key):
    with pytest.raises(ValueError, match="relative path"):
        storage.create(key, b"x")


def test_write_probe_passes_and_leaves_nothing(storage):
    storage.check_writable()
    assert storage.list_keys() == []


class _Overwriting(ConditionalCreate):
    """What an S3-compatible server that ignores If-None-Match does."""

    def create(self, filesystem: pafs.FileSystem, path: str, data: bytes) -> None:
        filesystem.create_dir(path.rsplit("/", 1)[0], recursive=True)
        with filesystem.open_output_stream(path) as out:
            out.write(data)


def test_a_storage_that_ignores_conditional_creates_is_refused():
    memory = memory_storage()
    ignoring = ArrowStateStorage(memory.filesystem, memory.base, _Overwriting(), memory.uri)
    with pytest.raises(ConditionalCreateUnsupportedError, match="ignores conditional creates"):
        ignoring.check_writable()
    assert ignoring.list_keys() == []


def test_unwritable_local_directory_is_named(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(ValueError, match=r"state location .*a-file/state.* is not a writable directory"):
        LocalStateStorage(blocker / "state").check_writable()


def test_local_creates_of_one_key_racing_have_one_winner(tmp_path):
    storage = LocalStateStorage(tmp_path / "state")
    for round_ in range(10):
        racing_creates(storage, f"chk-{round_}/_metadata")


def test_local_create_without_hard_links_is_still_exclusive(tmp_path, monkeypatch, caplog):
    def no_links(src, dst):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    storage = LocalStateStorage(tmp_path / "fuse")
    storage.create("chk-1/_metadata", b"first")
    with pytest.raises(FileExistsError):
        storage.create("chk-1/_metadata", b"second")
    assert storage.read("chk-1/_metadata") == b"first"
    assert "has no hard links" in caplog.text
    assert [p.name for p in (tmp_path / "fuse" / "chk-1").iterdir()] == ["_metadata"]  # no temp left


def test_local_temp_files_of_crashed_creates_are_invisible_and_swept(tmp_path):
    storage = LocalStateStorage(tmp_path / "state")
    storage.create("chk-1/_metadata", b"x")
    (tmp_path / "state" / "chk-1" / "._committed.abc123.tmp").write_bytes(b"")  # died before link()
    assert storage.list_keys() == ["chk-1/_metadata"]
    storage.delete(["chk-1/_metadata"])
    assert not (tmp_path / "state" / "chk-1").exists()


@pytest.mark.parametrize("location, expected", [
    ("/data/chk", "/data/chk"),
    ("file:///data/chk", "/data/chk"),
    ("file:/data/chk", "/data/chk"),
    ("dbfs:/checkpoints/q1", "/dbfs/checkpoints/q1"),
    ("dbfs:///checkpoints/q1", "/dbfs/checkpoints/q1"),
    ("s3a://bucket/chk/q1/", "s3://bucket/chk/q1"),
    ("s3n://bucket/chk", "s3://bucket/chk"),
    ("S3://bucket/chk", "s3://bucket/chk"),
    ("gcs://bucket/chk", "gs://bucket/chk"),
    ("abfs://c@acct.dfs.core.windows.net/chk", "abfs://c@acct.dfs.core.windows.net/chk"),
    ("hdfs://nn:8020/user/spark/chk", "hdfs://nn:8020/user/spark/chk"),
    ("viewfs://cluster/chk", "viewfs://cluster/chk"),
    ("webhdfs://nn:9870/chk/", "webhdfs://nn:9870/chk"),
    ("swebhdfs://nn:9871/chk", "swebhdfs://nn:9871/chk"),
])
def test_locations_are_mapped_to_what_the_kit_opens(location, expected):
    assert canonical_location(location) == expected


def test_relative_paths_become_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert canonical_location("chk") == str(tmp_path / "chk")


@pytest.mark.parametrize("location, fragment", [
    ("wasbs://c@acct.blob.core.windows.net/chk", r"'wasbs' is not supported. Azure Blob Storage is served through ABFS"),
    ("oss://bucket/chk", r"'oss' is not supported.*Valid locations: .*s3://bucket/path.*gs://"),
    ("s3a:///chk", "names no bucket"),
    ("dbfs://host/chk", "write dbfs:/path"),
])
def test_unsupported_locations_name_the_scheme_and_what_works(location, fragment):
    with pytest.raises(UnsupportedStateLocationError, match=fragment):
        canonical_location(location)


def test_dbfs_without_the_mount_is_refused(monkeypatch):
    real_isdir = os.path.isdir
    monkeypatch.setattr(os.path, "isdir", lambda p: False if p == "/dbfs" else real_isdir(p))
    with pytest.raises(UnsupportedStateLocationError, match="/dbfs mount of Databricks"):
        open_state_storage("dbfs:/checkpoints/q1")


def test_local_locations_open_as_local_storage(tmp_path):
    storage = open_state_storage(f"file://{tmp_path}/state")
    assert isinstance(storage, LocalStateStorage) and storage.root == tmp_path / "state"


def test_azure_blob_endpoint_of_an_abfs_host():
    assert azure_account_of("c@acct.dfs.core.windows.net") == ("https://acct.blob.core.windows.net", "acct")
    assert azure_account_of("c@acct.dfs.core.chinacloudapi.cn")[0] == "https://acct.blob.core.chinacloudapi.cn"
    with pytest.raises(ValueError, match="container@account.dfs.core.windows.net"):
        azure_account_of("c@127.0.0.1:10000")
