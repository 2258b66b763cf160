"""Crash at every failpoint, restart from the store in a fresh coordinator, and check that every
input record is visible exactly once and nothing of an aborted transaction ever is."""

from collections import Counter

import pytest

from kafka_testkit.memory_system import ListSource, MemorySink, MemoryTransactionalSystem, StepClock
from twophase import failpoints
from twophase.checkpoint_store import FileCheckpointStore
from twophase.coordinator import CheckpointConfig, CheckpointCoordinator
from twophase.pipeline import LocalPipeline

RECORDS = list(range(500))


@pytest.fixture(autouse=True)
def _clean_failpoints():
    failpoints.disable()
    yield
    failpoints.disable()


def run_once(tmp_path, system):
    """One 'process lifetime': fresh coordinator, source and sinks over the surviving system."""
    coordinator = CheckpointCoordinator(
        FileCheckpointStore(tmp_path / "chk", retained_checkpoints=2),
        CheckpointConfig(checkpoint_interval=0.5, tolerable_failed_checkpoints=10),
        clock=StepClock(0.1),
    )
    sinks = [MemorySink("out-0", system), MemorySink("out-1", system)]
    pipeline = LocalPipeline(coordinator, ListSource(RECORDS), lambda r: [r], sinks,
                             route=lambda v: v % 2, max_poll_records=9)
    return pipeline.run()


def run_until_done(tmp_path, system, max_lives=5):
    crashes = []
    for _ in range(max_lives):
        try:
            run_once(tmp_path, system)
            return crashes
        except failpoints.FailpointCrash as crash:
            crashes.append(crash.name)
    raise AssertionError(f"pipeline did not finish in {max_lives} lives: {crashes}")


SCENARIOS = {
    "before_pre_commit": {"before_pre_commit": "raise@5"},
    "after_pre_commit": {"after_pre_commit": "raise@5"},
    "after_checkpoint_stored": {"after_checkpoint_stored": "raise@3"},
    "before_commit": {"before_commit": "raise@4"},
    "mid_commit": {"mid_commit": "raise@3"},
    "after_commit": {"after_commit": "raise@3"},
    # A crash while recovering from a crash: the second restore dies too.
    # The coordinator's recovery hits it once: hit 1 is the fresh start, hit 2 the first restore
    # after the crash.
    "during_restore": {"after_pre_commit": "raise@5", "during_restore": "raise@2"},
}


def test_every_failpoint_has_a_scenario():
    assert set(SCENARIOS) == set(failpoints.ALL)


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_crash_restart_exactly_once(tmp_path, scenario):
    for name, action in SCENARIOS[scenario].items():
        failpoints.enable(name, action)
    system = MemoryTransactionalSystem()

    crashes = run_until_done(tmp_path, system)

    assert scenario in crashes, f"failpoint {scenario} never fired"
    if scenario == "during_restore":
        assert crashes == ["after_pre_commit", "during_restore"], crashes
    counts = Counter(system.visible)
    duplicates = {v: n for v, n in counts.items() if n > 1}
    lost = set(RECORDS) - set(counts)
    assert not duplicates, f"duplicates after {scenario}: {duplicates}"
    assert not lost, f"lost after {scenario}: {sorted(lost)[:10]}"
    assert system.open_txn_ids("") == [], "a transaction was left open"
    committed = [v for t in system.txns.values() if t.state == "committed" for v in t.values]
    assert Counter(committed) == counts, "visible output is not exactly the committed transactions"
    aborted = [t.txn_id for t in system.txns.values() if t.state == "aborted"]
    if scenario in ("before_pre_commit", "after_pre_commit", "during_restore"):
        # The crashed checkpoint never completed: its open transactions were aborted on restore.
        assert aborted, "restore did not abort the crashed checkpoint's transactions"
    if scenario in ("after_checkpoint_stored", "before_commit", "mid_commit"):
        # Stored but not confirmed committed: restore must have committed it again.
        assert system.recommitted, "restore did not re-commit the stored checkpoint"
    if scenario == "after_commit":
        assert system.recommitted == [], "a checkpoint marked committed was committed again"
