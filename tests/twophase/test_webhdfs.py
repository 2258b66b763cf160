"""The WebHDFS state storage without a server: which client it builds, and how the NameNode's answers
become the storage contract's errors. The real create-if-absent is tested on a real HDFS in
integration_tests/test_state_on_hdfs.py."""

from __future__ import annotations

import builtins
from pathlib import Path

import hdfs
import pytest

from twophase.errors import (
    MissingExtraError,
    StateFileExistsError,
    StateFileNotFoundError,
    StateStorageError,
)
from twophase.storage.hadoop_config import WEBHDFS_URL_ENV, load_hadoop_config
from twophase.storage.state_storage import open_state_storage
from twophase.storage.webhdfs import (
    DELEGATION_TOKEN_ENV,
    WebHdfsStateStorage,
    client_identity,
    webhdfs_client,
)

UNREACHABLE = "http://127.0.0.1:9"


@pytest.fixture(autouse=True)
def no_hadoop_environment(monkeypatch):
    for name in ("HADOOP_CONF_DIR", "HADOOP_HOME", WEBHDFS_URL_ENV, DELEGATION_TOKEN_ENV, "HADOOP_USER_NAME"):
        monkeypatch.delenv(name, raising=False)
    webhdfs_client.cache_clear()
    yield
    webhdfs_client.cache_clear()


def kerberos_site(folder: Path) -> Path:
    (folder / "core-site.xml").write_text(
        "<configuration><property><name>hadoop.security.authentication</name><value>kerberos</value>"
        "</property></configuration>")
    return folder


def answer(exception: str, message: str = "from the NameNode"):
    """A client method that fails as HdfsCLI does when the NameNode answers with ``exception``."""
    def fail(*args, **kwargs):
        raise hdfs.HdfsError(message, exception=exception)
    return fail


@pytest.fixture
def storage() -> WebHdfsStateStorage:
    return WebHdfsStateStorage(hdfs.InsecureClient(UNREACHABLE, user="me"), "/user/me/state",
                               "hdfs://nn:8020/user/me/state")


def test_hdfs_locations_open_through_webhdfs_as_the_user(monkeypatch):
    monkeypatch.setenv("HADOOP_USER_NAME", "spark")
    storage = open_state_storage("hdfs://nn.example:8020/user/spark/chk/kafka-eos/")
    assert isinstance(storage, WebHdfsStateStorage)
    assert storage.uri == "hdfs://nn.example:8020/user/spark/chk/kafka-eos"
    assert storage.base == "/user/spark/chk/kafka-eos"
    assert isinstance(storage.client, hdfs.InsecureClient) and storage.client.url == "http://nn.example:9870"
    assert storage.client._session.params["user.name"] == "spark"
    assert storage.location("chk-1/_metadata") == "hdfs://nn.example:8020/user/spark/chk/kafka-eos/chk-1/_metadata"


def test_one_client_per_namenode_and_identity_per_process():
    first = open_state_storage("hdfs://nn:8020/a")
    assert open_state_storage("hdfs://nn:8020/b").client is first.client
    assert open_state_storage("hdfs://other:8020/a").client is not first.client


def test_a_delegation_token_makes_a_token_client(monkeypatch):
    monkeypatch.setenv(DELEGATION_TOKEN_ENV, "HAAEc3Bhcms")
    storage = open_state_storage("hdfs://nn:8020/chk")
    assert isinstance(storage.client, hdfs.TokenClient)
    assert storage.client._session.params == {"delegation": "HAAEc3Bhcms"}


def test_kerberos_from_core_site_needs_the_kerberos_extra(tmp_path, monkeypatch):
    assert client_identity(load_hadoop_config(kerberos_site(tmp_path))) == ("kerberos", "")
    monkeypatch.setenv("HADOOP_CONF_DIR", str(tmp_path))
    real_import = builtins.__import__

    def without_requests_kerberos(name, *args, **kwargs):
        if name in ("requests_kerberos", "hdfs.ext.kerberos"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without_requests_kerberos)
    with pytest.raises(MissingExtraError, match=r"Kerberos .*pip install 'hdfs\[kerberos\]'"):
        open_state_storage("hdfs://nn:8020/chk")


def test_without_hdfscli_the_extra_is_named(monkeypatch):
    real_import = builtins.__import__

    def without_hdfs(name, *args, **kwargs):
        if name == "hdfs" or name.startswith("hdfs."):
            raise ImportError("No module named 'hdfs'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without_hdfs)
    with pytest.raises(MissingExtraError, match=r"pip install 'pyspark-kafka-eos\[hdfs\]'"):
        open_state_storage("hdfs://nn:8020/chk")


class RecordingClient:
    """What the create asks the NameNode: writes, renames (refused where the path is taken),
    statuses and deletes."""

    def __init__(self, taken: set[str]) -> None:
        self.taken, self.calls = set(taken), []

    def write(self, path, data, overwrite):
        self.calls.append(("write", path, data, overwrite))

    def rename(self, source, destination):
        self.calls.append(("rename", source, destination))
        if destination in self.taken:
            raise hdfs.HdfsError("Unable to rename %r to %r.", source, destination)
        self.taken.add(destination)

    def status(self, path, strict=True):
        self.calls.append(("status", path))
        return {"type": "FILE"} if path in self.taken else None

    def delete(self, path, recursive=False):
        self.calls.append(("delete", path))
        return True


def test_a_create_writes_the_whole_file_under_a_temp_name_and_renames_it_without_overwrite(storage):
    storage.client = RecordingClient(taken=set())
    storage.create("chk-1/_metadata", b"x")
    (write, temp, data, overwrite), rename = storage.client.calls
    assert (write, data, overwrite) == ("write", b"x", False)
    assert temp.startswith("/user/me/state/chk-1/._metadata.") and temp.endswith(".tmp")
    assert rename == ("rename", temp, "/user/me/state/chk-1/_metadata")


def test_a_create_of_a_taken_name_is_a_state_file_exists_error_and_leaves_no_temp_file(storage):
    storage.client = RecordingClient(taken={"/user/me/state/chk-1/_metadata"})
    with pytest.raises(StateFileExistsError, match="hdfs://nn:8020/user/me/state/chk-1/_metadata"):
        storage.create("chk-1/_metadata", b"x")
    temp = storage.client.calls[0][1]
    assert storage.client.calls[1:] == [("rename", temp, "/user/me/state/chk-1/_metadata"),
                                        ("status", "/user/me/state/chk-1/_metadata"), ("delete", temp)]


def test_a_rename_refused_for_another_reason_is_a_storage_error(storage):
    client = RecordingClient(taken=set())
    client.rename = answer("AccessControlException", "Permission denied: user=me")
    storage.client = client
    with pytest.raises(StateStorageError, match=r"creating hdfs://nn:8020/user/me/state/_owner through WebHDFS .* "
                                                r"AccessControlException: Permission denied"):
        storage.create("_owner", b"x")
    assert client.calls[-1][0] == "delete"  # its temp file


def test_other_refusals_are_storage_errors_naming_the_file_and_the_cause(storage, monkeypatch):
    monkeypatch.setattr(storage.client, "write", answer("AccessControlException", "Permission denied: user=me"))
    with pytest.raises(StateStorageError, match=r"creating hdfs://nn:8020/user/me/state/_owner through WebHDFS at "
                                                r"http://127.0.0.1:9 failed: AccessControlException: Permission"):
        storage.create("_owner", b"x")


def test_an_unreachable_namenode_fails_the_write_probe_in_one_line(storage):
    with pytest.raises(ValueError, match=r"state location 'hdfs://nn:8020/user/me/state' is not a writable "
                                         r"directory: creating .*_write-probe-.* through WebHDFS at http://127.0.0.1:9"):
        storage.check_writable()


def test_a_missing_file_or_directory_reads_as_missing(storage, monkeypatch):
    monkeypatch.setattr(storage.client, "_open", answer("FileNotFoundException"))
    with pytest.raises(StateFileNotFoundError, match="state/_owner"):
        storage.read("_owner")
    monkeypatch.setattr(storage.client, "status", answer("FileNotFoundException"))
    assert storage.list_keys() == [] and storage.list_keys("chk-3") == []


def test_a_listing_skips_temp_files_and_gives_keys_relative_to_the_directory(storage, monkeypatch):
    tree = [("/user/me/state", ["chk-2"], ["_owner"]),
            ("/user/me/state/chk-2", [], ["_metadata", "._committed.5f1c.tmp"])]
    monkeypatch.setattr(storage.client, "walk", lambda path, **kw: iter(tree))
    assert storage.list_keys() == ["_owner", "chk-2/_metadata"]


def test_a_delete_removes_the_folders_it_empties_and_keeps_those_in_use(storage, monkeypatch):
    deleted = []

    def delete(path, recursive=False):
        deleted.append((path, recursive))
        if path == "/user/me/state/chk-3":
            raise hdfs.HdfsError("chk-3 is non empty", exception="PathIsNotEmptyDirectoryException")
        return True

    monkeypatch.setattr(storage.client, "delete", delete)
    storage.delete(["chk-2/_metadata", "chk-2/_committed", "chk-3/_metadata", "_owner"])
    assert deleted[:4] == [(f"/user/me/state/{k}", False) for k in
                           ("chk-2/_metadata", "chk-2/_committed", "chk-3/_metadata", "_owner")]
    assert sorted(deleted[4:]) == [("/user/me/state/chk-2", False), ("/user/me/state/chk-3", False)]


def test_read_only_storage_refuses_every_write(monkeypatch):
    storage = open_state_storage("hdfs://nn:8020/spark/chk", read_only=True)
    for write in (lambda: storage.create("x", b""), lambda: storage.delete(["x"]), storage.delete_folder):
        with pytest.raises(StateStorageError, match="opened read-only"):
            write()
