import json
import logging

import pytest

from twophase.checkpoint import CompletedCheckpoint, CorruptCheckpointError, FORMAT_VERSION, decode, encode
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
    lambda b: b.replace(b'"format_version": 1', b'"format_version": 99'),
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
    with caplog.at_level(logging.ERROR):
        latest = store.latest()
    assert latest.checkpoint_id == 2
    assert str(metadata) in caplog.text


def test_folder_without_metadata_is_skipped(tmp_path):
    store = FileCheckpointStore(tmp_path)
    store.add(chk(1))
    (tmp_path / "chk-2").mkdir()
    assert store.latest().checkpoint_id == 1


def test_corrupt_checkpoints_do_not_count_towards_retention(tmp_path):
    store = FileCheckpointStore(tmp_path, retained_checkpoints=2)
    store.add(chk(1))
    store.add(chk(2))
    (tmp_path / "chk-2" / "_metadata").write_text("{")
    store.add(chk(3))
    # chk-2 is corrupt, so chk-1 is still one of the two newest valid checkpoints.
    assert store.checkpoint_ids() == [1, 3]


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
