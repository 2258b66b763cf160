import json
import logging

import pytest

from twophase.checkpoint import FORMAT_VERSION, CompletedCheckpoint, decode, encode
from twophase.errors import CheckpointExistsError, CorruptCheckpointError
from twophase.checkpoint_store import FileCheckpointStore
from twophase import savepoints


def chk(cid: int, **states) -> CompletedCheckpoint:
    return CompletedCheckpoint(cid, 1000 * cid, 1000 * cid + 5, states or {"source": cid})


def test_round_trip_carries_format_version_and_checksum():
    data = encode(chk(7, source={"t": {"0": 42}}, sink=[{"checkpoint_id": 7, "committables": []}]))
    document = json.loads(data)
    assert document["format_version"] == FORMAT_VERSION
    assert document["checksum"].startswith("sha256:")
    restored = decode(data)
    assert restored.checkpoint_id == 7
    assert restored.state_of("source") == {"t": {"0": 42}}


@pytest.mark.parametrize("mangle", [
    lambda b: b[: len(b) // 2],                                     # torn write
    lambda b: b"",                                                   # empty file (disk full)
    lambda b: b.replace(b'"source": 3', b'"source": 4'),             # bit rot / tampering
    lambda b: b.replace(b'"format_version": 1', b'"format_version": 0'),   # no version this kit wrote
    lambda b: b"\xff\xfe garbage",
])
def test_corrupt_metadata_is_detected(mangle):
    data = encode(chk(3))
    with pytest.raises(CorruptCheckpointError):
        decode(mangle(data))


def test_retention_subsumes_only_older_checkpoints(tmp_path):
    store = FileCheckpointStore(tmp_path, retained_checkpoints=2)
    for cid in range(1, 6):
        store.add(chk(cid))
    assert store.checkpoint_ids() == [4, 5]
    assert store.latest().checkpoint_id == 5


def test_corrupt_latest_falls_back_to_previous_and_logs_path(tmp_path, caplog):
    store = FileCheckpointStore(tmp_path, retained_checkpoints=3)
    for cid in (1, 2, 3):
        store.add(chk(cid))
    metadata = tmp_path / "chk-3" / "_metadata"
    metadata.write_bytes(metadata.read_bytes()[:40])
    assert store.latest().checkpoint_id == 3  # what this process wrote, it keeps (written once)
    with caplog.at_level(logging.ERROR):
        latest = FileCheckpointStore(tmp_path).latest()  # a restart reads the files
    assert latest.checkpoint_id == 2
    assert str(metadata) in caplog.text


def test_folder_without_metadata_is_skipped(tmp_path):
    store = FileCheckpointStore(tmp_path)
    store.add(chk(1))
    (tmp_path / "chk-2").mkdir()
    assert store.latest().checkpoint_id == 1


def test_retention_goes_by_the_listing_and_reads_nothing(tmp_path):
    # Every _metadata is created whole and never rewritten, so retention counts what the listing
    # shows without reading it: a commit on an object store costs no GET per retained checkpoint.
    store = FileCheckpointStore(tmp_path, retained_checkpoints=2)
    store.add(chk(1))
    store.add(chk(2))
    (tmp_path / "chk-2" / "_metadata").write_text("{")  # bit rot after the write
    store.add(chk(3))
    assert store.checkpoint_ids() == [2, 3]


def test_ids_never_reused_across_restart(tmp_path):
    store = FileCheckpointStore(tmp_path)
    store.add(chk(1))
    store.reserve_checkpoint_id(2)  # triggered, never completed
    reopened = FileCheckpointStore(tmp_path)
    assert reopened.next_checkpoint_id() == 3


def test_commit_marker(tmp_path):
    store = FileCheckpointStore(tmp_path)
    store.add(chk(1))
    assert not store.is_committed(1)
    store.mark_committed(1)
    assert store.is_committed(1)
    with pytest.raises(FileNotFoundError):
        store.mark_committed(2)


def test_unwritable_directory_fails_at_start(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(ValueError, match="not a writable directory"):
        FileCheckpointStore(blocker / "checkpoints")


@pytest.mark.parametrize("retained", [0, -1, 1.5, None])
def test_bad_retained_count(tmp_path, retained):
    with pytest.raises(ValueError, match="retained_checkpoints"):
        FileCheckpointStore(tmp_path, retained_checkpoints=retained)


def test_savepoint_is_self_contained_and_disposable(tmp_path):
    savepoints.write_savepoint(tmp_path / "sp", chk(4))
    assert savepoints.load_savepoint(tmp_path / "sp").checkpoint_id == 4
    with pytest.raises(FileExistsError):
        savepoints.write_savepoint(tmp_path / "sp", chk(5))
    savepoints.dispose_savepoint(tmp_path / "sp")
    assert not (tmp_path / "sp").exists()
    with pytest.raises(FileNotFoundError):
        savepoints.dispose_savepoint(tmp_path / "sp")
    (tmp_path / "not-a-savepoint").mkdir()
    with pytest.raises(FileNotFoundError):
        savepoints.dispose_savepoint(tmp_path / "not-a-savepoint")
    assert (tmp_path / "not-a-savepoint").exists()


# -- the write-once layout, on a local directory and on pyarrow's in-memory filesystem ----------

from kafka_testkit.state_scenarios import KINDS, crash_at_every_write, make_storage  # noqa: E402
from twophase.state_owner import StateOwner  # noqa: E402


@pytest.fixture(params=KINDS)
def storage(request, tmp_path):
    return make_storage(request.param, tmp_path)


def test_layout_is_one_file_per_fact(storage):
    store = FileCheckpointStore(storage, retained_checkpoints=2)
    store.reserve_checkpoint_id(1)
    store.add(chk(1))
    store.mark_committed(1)
    store.add(chk(2))
    assert storage.list_keys() == ["chk-1/_committed", "chk-1/_metadata", "chk-1/_reserved", "chk-2/_metadata"]
    store.mark_committed(2)
    store.mark_committed(2)  # again: nothing is rewritten
    store.add(chk(3))
    assert storage.list_keys() == ["chk-2/_committed", "chk-2/_metadata", "chk-3/_metadata"]
    reopened = FileCheckpointStore(storage)
    assert reopened.latest().checkpoint_id == 3 and reopened.is_committed(2) and not reopened.is_committed(3)


def test_next_id_comes_from_the_listing(storage):
    store = FileCheckpointStore(storage)
    assert store.next_checkpoint_id() == 1 and store.is_empty()
    store.add(chk(4))
    store.reserve_checkpoint_id(5)  # triggered, never completed: 5 is never handed out again
    assert FileCheckpointStore(storage).next_checkpoint_id() == 6
    with pytest.raises(CheckpointExistsError, match="already taken"):
        FileCheckpointStore(storage).reserve_checkpoint_id(5)


def test_two_writers_of_one_checkpoint_one_wins_and_its_record_stays(storage):
    driver, zombie = FileCheckpointStore(storage), FileCheckpointStore(storage)
    assert driver.latest() is None and zombie.latest() is None  # both listed before either wrote
    zombie.add(chk(7, sink=["zombie's transactions"]))
    with pytest.raises(CheckpointExistsError, match="another driver of this job"):
        driver.add(chk(7, sink=["driver's transactions"]))
    assert FileCheckpointStore(storage).latest().state_of("sink") == ["zombie's transactions"]


def test_owner_is_claimed_once(storage):
    store = FileCheckpointStore(storage)
    assert store.owner() is None
    first = StateOwner("spark-streaming-query", "q-1", "checkpointLocation /c1")
    assert store.claim_owner(first) == first
    recorded = FileCheckpointStore(storage).claim_owner(StateOwner("spark-streaming-query", "q-2"))
    assert recorded == first and store.owner() == first


def test_a_store_of_the_previous_layout_is_read_and_goes_on(tmp_path):
    # Written by versions that renamed files into place and rewrote a counter.
    (tmp_path / "chk-4").mkdir()
    (tmp_path / "chk-4" / "_metadata").write_bytes(encode(chk(4)))
    (tmp_path / "chk-4" / "_committed").write_bytes(b"")
    (tmp_path / "_checkpoint_counter").write_text(json.dumps({"format_version": 1, "next_checkpoint_id": 9}))
    store = FileCheckpointStore(tmp_path, retained_checkpoints=1)
    assert store.latest().checkpoint_id == 4 and store.is_committed(4) and not store.is_empty()
    assert store.next_checkpoint_id() == 9
    store.add(chk(9))
    assert store.checkpoint_ids() == [9] and (tmp_path / "_checkpoint_counter").exists()


@pytest.mark.parametrize("kind", KINDS)
def test_a_crash_between_any_two_writes_of_the_state_is_exactly_once(tmp_path, kind):
    crashes = crash_at_every_write(lambda label: make_storage(kind, tmp_path / label))
    assert crashes > 20  # reserve, store, mark and subsume, for 7 checkpoints
