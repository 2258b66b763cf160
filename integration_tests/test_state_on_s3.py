"""The kit's state on a real S3 server (see conftest.py for how it is found): write-once files,
conditional creates that a second writer loses, retention, savepoints, and a crash before every
write of the state, as in tests/twophase/test_checkpoint_store.py."""

from __future__ import annotations


from kafka_testkit.state_scenarios import (crash_at_every_write, racing_creates, savepoint_lifecycle,
                                           write_once_with_retention, zombie_driver_refused)
from twophase.storage.arrow_filesystem import ArrowStateStorage
from twophase.storage.conditional_create import s3_client
from twophase.storage.state_storage import open_state_storage


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
    # No directory markers, no temp objects: one object per fact, retention applied.
    write_once_with_retention(s3_prefix, lambda: objects_under(s3_prefix))


def test_a_conditional_create_on_s3_has_exactly_one_winner(s3_prefix):
    storage = open_state_storage(s3_prefix)
    for round_ in range(5):
        racing_creates(storage, f"chk-{round_}/_metadata")


def test_a_zombie_driver_cannot_overwrite_a_stored_checkpoint_on_s3(s3_prefix):
    zombie_driver_refused(s3_prefix)


def test_savepoints_on_s3(s3_prefix):
    savepoint_lifecycle(f"{s3_prefix}/savepoints/sp-1", lambda: objects_under(s3_prefix))


def test_a_crash_before_every_write_of_the_state_on_s3_is_exactly_once(s3_prefix):
    crashes = crash_at_every_write(lambda label: open_state_storage(f"{s3_prefix}/{label}"), workers=8)
    assert crashes > 20
