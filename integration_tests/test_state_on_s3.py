"""The kit's state on a real S3 server (see conftest.py for how it is found): write-once files,
conditional creates that a second writer loses, retention, savepoints, and a crash before every
write of the state, as in tests/twophase/test_checkpoint_store.py."""

from __future__ import annotations

import pytest

from kafka_testkit.state_scenarios import crash_at_every_write, racing_creates
from twophase import savepoints
from twophase.checkpoint import CompletedCheckpoint
from twophase.checkpoint_store import FileCheckpointStore
from twophase.errors import CheckpointExistsError
from twophase.conditional_create import s3_client
from twophase.state_owner import StateOwner
from twophase.state_storage import ArrowStateStorage, open_state_storage


def chk(cid: int, **states) -> CompletedCheckpoint:
    return CompletedCheckpoint(cid, 1000 * cid, 1000 * cid + 5, states or {"source": cid})


def objects_under(uri: str) -> list[str]:
    """The object keys under ``uri``, listed by boto3 (not by the code under test)."""
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    pages = s3_client(None).get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/")
    return sorted(o["Key"][len(prefix) + 1:] for page in pages for o in page.get("Contents", []))


def test_s3a_locations_open_on_s3_and_the_probe_passes(s3_prefix):
    storage = open_state_storage(s3_prefix.replace("s3://", "s3a://"))
    assert isinstance(storage, ArrowStateStorage) and storage.uri == s3_prefix
    storage.check_writable()  # includes: a second create of the probe is refused (412)
    assert objects_under(s3_prefix) == []


def test_checkpoints_on_s3_are_write_once_objects(s3_prefix):
    store = FileCheckpointStore(s3_prefix, retained_checkpoints=2)
    store.claim_owner(StateOwner("spark-streaming-query", "q-1", "it"))
    for cid in range(1, 6):
        store.add(chk(cid))
        store.mark_committed(cid)
    store.reserve_checkpoint_id(6)
    # No directory markers, no temp objects: one object per fact, retention applied.
    assert objects_under(s3_prefix) == ["_owner", "chk-4/_committed", "chk-4/_metadata", "chk-5/_committed",
                                        "chk-5/_metadata", "chk-6/_reserved"]
    elsewhere = FileCheckpointStore(s3_prefix)  # what a driver on another machine reads
    assert elsewhere.latest().checkpoint_id == 5 and elsewhere.is_committed(5)
    assert elsewhere.next_checkpoint_id() == 7
    assert elsewhere.owner().owner_id == "q-1"


def test_a_conditional_create_on_s3_has_exactly_one_winner(s3_prefix):
    storage = open_state_storage(s3_prefix)
    for round_ in range(5):
        racing_creates(storage, f"chk-{round_}/_metadata")


def test_a_zombie_driver_cannot_overwrite_a_stored_checkpoint_on_s3(s3_prefix):
    driver, zombie = FileCheckpointStore(s3_prefix), FileCheckpointStore(s3_prefix)
    driver.latest(), zombie.latest()
    driver.add(chk(3, sink=["driver"]))
    with pytest.raises(CheckpointExistsError, match="another driver"):
        zombie.add(chk(3, sink=["zombie"]))
    assert FileCheckpointStore(s3_prefix).latest().state_of("sink") == ["driver"]


def test_savepoints_on_s3(s3_prefix):
    location = f"{s3_prefix}/savepoints/sp-1"
    savepoints.write_savepoint(location, chk(4))
    with pytest.raises(FileExistsError, match="already holds a savepoint"):
        savepoints.write_savepoint(location, chk(5))
    savepoints.mark_savepoint_committed(location)
    assert savepoints.load_savepoint(location).checkpoint_id == 4 and savepoints.is_savepoint_committed(location)
    savepoints.dispose_savepoint(location)
    assert objects_under(s3_prefix) == []


def test_a_crash_before_every_write_of_the_state_on_s3_is_exactly_once(s3_prefix):
    crashes = crash_at_every_write(lambda label: open_state_storage(f"{s3_prefix}/{label}"))
    assert crashes > 20
