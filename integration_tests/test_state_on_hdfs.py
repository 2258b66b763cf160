"""The kit's state on a real HDFS (Hadoop's own minicluster, the ``hadoop_cluster`` fixture of
conftest.py), reached through WebHDFS (twophase/storage/webhdfs.py):

- the conditional create (a whole temp file, then WebHDFS ``RENAME`` without overwrite) under writers racing on one
  key, threads of one process and separate processes, released together by a barrier: exactly one
  wins, the others get StateFileExistsError, the content is the winner's;
- write-once checkpoints, retention (no empty folders left), a zombie driver, savepoints, and the
  state crash matrix of tests/twophase (a crash before every write), as on S3;
- Spark's checkpointLocation and the kit's state both on ``hdfs://``: the exactly-once job killed
  at a commit failpoint and restarted on "another machine" (nothing local survives), and a
  restart with another state location refused as lost state (test_driver_moves.py's cases on S3).

``hdfs://127.0.0.1:<rpc port>`` is mapped to the NameNode's HTTP port through the cluster's
hdfs-site.xml, found through ``HADOOP_CONF_DIR`` as a user's would be.
"""

from __future__ import annotations

import multiprocessing
import posixpath
from typing import Any, Callable, Iterator

import pytest

from kafka_testkit.state_scenarios import (crash_at_every_write, racing_creates, savepoint_lifecycle,
                                           write_once_with_retention, zombie_driver_refused)
from test_driver_moves import killed_and_finished_on_another_machine, refused_as_lost_state_then_finished
from twophase.errors import StateFileExistsError
from twophase.storage.hadoop_config import WEBHDFS_URL_ENV
from twophase.storage.state_storage import open_state_storage
from twophase.storage.webhdfs import DELEGATION_TOKEN_ENV, WebHdfsStateStorage, webhdfs_client

PROCESSES = 4


@pytest.fixture(scope="module")
def hdfs(hadoop_cluster: Any) -> Iterator[Any]:
    """The minicluster, with ``HADOOP_CONF_DIR`` naming its configuration for this module and the
    Spark jobs it starts (they inherit the environment)."""
    with pytest.MonkeyPatch.context() as environment:
        environment.setenv("HADOOP_CONF_DIR", str(hadoop_cluster.conf_dir))
        for name in (WEBHDFS_URL_ENV, DELEGATION_TOKEN_ENV):
            environment.delenv(name, raising=False)
        webhdfs_client.cache_clear()
        yield hadoop_cluster
    webhdfs_client.cache_clear()


@pytest.fixture
def hdfs_prefix(hdfs: Any, unique_name: Callable[[str], str]) -> Iterator[str]:
    """``hdfs://127.0.0.1:<port>/<a folder of this test>``, deleted afterwards."""
    uri = f"{hdfs.hdfs_uri.rstrip('/')}/{unique_name('state')}"
    yield uri
    open_state_storage(uri).delete_folder()


def hdfs_tree(cluster: Any, uri: str) -> tuple[list[str], list[str]]:
    """(files, folders) under ``uri``, relative to it, listed by a client of its own on the cluster's
    WebHDFS address as the fixture gives it (not through the mapping under test)."""
    import hdfs as hdfscli

    root = "/" + uri.split("://", 1)[1].partition("/")[2]
    client = hdfscli.InsecureClient(cluster.webhdfs_url)
    files, folders = [], []
    for folder, subfolders, names in client.walk(root):
        relative = posixpath.relpath(folder, root)
        folders += [posixpath.normpath(posixpath.join(relative, name)) for name in subfolders]
        files += [posixpath.normpath(posixpath.join(relative, name)) for name in names]
    return sorted(files), sorted(folders)



def test_hdfs_locations_map_to_webhdfs_through_hdfs_site_and_the_probe_passes(hdfs, hdfs_prefix):
    storage = open_state_storage(hdfs_prefix + "/")
    assert isinstance(storage, WebHdfsStateStorage) and storage.uri == hdfs_prefix
    assert storage.client.url == hdfs.webhdfs_url.rstrip("/")
    storage.check_writable()  # includes: a second create of the probe is refused
    storage.create("chk-1/_metadata", b"first")
    with pytest.raises(StateFileExistsError):
        storage.create("chk-1/_metadata", b"second")
    assert storage.read("chk-1/_metadata") == b"first"
    assert hdfs_tree(hdfs, hdfs_prefix) == (["chk-1/_metadata"], ["chk-1"])


def test_checkpoints_on_hdfs_are_write_once_files_and_retention_leaves_no_folders(hdfs, hdfs_prefix):
    write_once_with_retention(hdfs_prefix, lambda: hdfs_tree(hdfs, hdfs_prefix)[0])
    assert hdfs_tree(hdfs, hdfs_prefix)[1] == ["chk-4", "chk-5", "chk-6"]


def test_a_conditional_create_on_hdfs_has_exactly_one_winner_among_threads(hdfs_prefix):
    storage = open_state_storage(hdfs_prefix)
    for round_ in range(5):
        racing_creates(storage, f"chk-{round_}/_metadata")


def _contend_in_process(location: str, keys: list[str], writer: int, start: Any, results: Any) -> None:
    """One writer process: for each key, wait for every other writer, then create the key."""
    storage = open_state_storage(location)
    for key in keys:
        start.wait()
        try:
            storage.create(key, f"writer {writer}".encode())
            results.put((key, writer, "won"))
        except StateFileExistsError:
            results.put((key, writer, "exists"))
        except Exception as exc:  # reported, so that the test names it
            results.put((key, writer, f"{type(exc).__name__}: {exc}"))


def test_a_conditional_create_on_hdfs_has_exactly_one_winner_among_processes(hdfs_prefix):
    keys = [f"chk-{n}/_metadata" for n in range(5)] + ["_owner"]
    context = multiprocessing.get_context("spawn")
    start, results = context.Barrier(PROCESSES), context.Queue()
    writers = [context.Process(target=_contend_in_process, args=(hdfs_prefix, keys, n, start, results))
               for n in range(PROCESSES)]
    for process in writers:
        process.start()
    outcomes = [results.get(timeout=300) for _ in range(PROCESSES * len(keys))]
    for process in writers:
        process.join(timeout=60)
        assert process.exitcode == 0
    storage = open_state_storage(hdfs_prefix)
    for key in keys:
        of_key = {writer: outcome for k, writer, outcome in outcomes if k == key}
        winners = [writer for writer, outcome in of_key.items() if outcome == "won"]
        assert len(winners) == 1, f"{key}: {of_key}"
        assert sorted(of_key.values()) == ["exists"] * (PROCESSES - 1) + ["won"], f"{key}: {of_key}"
        assert storage.read(key) == f"writer {winners[0]}".encode()


def test_a_zombie_driver_cannot_overwrite_a_stored_checkpoint_on_hdfs(hdfs_prefix):
    zombie_driver_refused(hdfs_prefix)


def test_savepoints_on_hdfs(hdfs, hdfs_prefix):
    savepoint_lifecycle(f"{hdfs_prefix}/savepoints/sp-1", lambda: hdfs_tree(hdfs, hdfs_prefix)[0])


def test_a_crash_before_every_write_of_the_state_on_hdfs_is_exactly_once(hdfs_prefix):
    crashes = crash_at_every_write(lambda label: open_state_storage(f"{hdfs_prefix}/{label}"), workers=8)
    assert crashes > 20


# -- Spark: checkpointLocation and the kit's state on hdfs:// ------------------------------------------

@pytest.mark.spark
@pytest.mark.parametrize("failpoint", ["after_checkpoint_stored", "mid_commit"])
def test_driver_killed_at_a_commit_failpoint_and_restarted_on_another_machine_with_all_on_hdfs_is_exactly_once(
        kafka_bootstrap, kafka_clients, unique_name, tmp_path, hdfs, hdfs_prefix, failpoint):
    checkpoint = f"{hdfs_prefix}/checkpoint"
    killed_and_finished_on_another_machine(kafka_bootstrap, kafka_clients, unique_name, tmp_path, checkpoint,
                                           f"{checkpoint}/kafka-eos",  # eos.stateDir's default
                                           failpoint)
    files, _ = hdfs_tree(hdfs, checkpoint)
    assert "metadata" in files and any(f.startswith("commits/") for f in files), "Spark's checkpoint is not on HDFS"
    assert any(f.startswith("kafka-eos/chk-") for f in files), files
    assert not list((tmp_path / "machine-b").rglob("kafka-eos")), "the kit kept state on the local machine"


@pytest.mark.spark
def test_a_restart_with_another_state_location_on_hdfs_is_refused_as_lost_state(
        kafka_bootstrap, kafka_clients, unique_name, tmp_path, hdfs_prefix):
    refused_as_lost_state_then_finished(kafka_bootstrap, kafka_clients, unique_name, tmp_path,
                                        f"{hdfs_prefix}/checkpoint", f"{hdfs_prefix}/state-a",
                                        f"{hdfs_prefix}/state-b")
