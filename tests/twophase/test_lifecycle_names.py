"""The lifecycle's names of 0.1.0 keep working for one release, each with one DeprecationWarning
naming its new name."""

import warnings

import pytest

from twophase import lifecycle
from twophase.checkpoint import CompletedCheckpoint
from twophase.checkpoint_store import FileCheckpointStore
from twophase.lifecycle import CommitLifecycle


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    monkeypatch.setattr(lifecycle, "_warned", set())


def test_the_old_names_answer_as_the_new_ones_and_warn_once_each(tmp_path):
    store = FileCheckpointStore(tmp_path / "chk")
    store.add(CompletedCheckpoint(checkpoint_id=3, trigger_timestamp_ms=1, completion_timestamp_ms=2,
                                  operator_states={}))
    old = CommitLifecycle(store, ())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert old.newest_stored_id() == old.stored.newest_listed_id() == 3
        assert old.stored_checkpoint() == old.stored.newest_readable()
        assert old.abort(3, {}) is True  # stored: committed (nothing to end), never aborted
        assert old.abort(4, {}) is False
    assert [str(w.message).split(" is renamed ")[0] for w in caught if w.category is DeprecationWarning] == [
        "CommitLifecycle.newest_stored_id", "CommitLifecycle.stored_checkpoint", "CommitLifecycle.abort"]
    assert all("release after 0.2.0" in str(w.message) for w in caught)
