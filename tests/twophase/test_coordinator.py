import pytest

from kafka_testkit.memory_system import ListSource, MemorySink, MemoryTransactionalSystem, StepClock
from twophase.checkpoint_store import FileCheckpointStore
from twophase.coordinator import CheckpointConfig, CheckpointCoordinator
from twophase.errors import (
    CheckpointAbortedError,
    CheckpointCommitError,
    CheckpointFailureError,
    CheckpointTriggerError,
)
from twophase.participants import CheckpointParticipant, RestoredState
from twophase.pipeline import LocalPipeline
from twophase.checkpoint_history import CheckpointStatus


class ManualClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Recording(CheckpointParticipant):
    """Snapshots ``state`` (failing while ``failures`` lasts) and records what it is told."""

    def __init__(self, name: str = "recording", state=None) -> None:
        self.name = name
        self.state = state if state is not None else {}
        self.failures = 0
        self.completed: list[int] = []
        self.aborted: list[int] = []
        self.restored: list[RestoredState] = []

    def snapshot_state(self, checkpoint_id):
        if self.failures:
            self.failures -= 1
            raise OSError("snapshot failed")
        return self.state

    def restore(self, restored):
        self.restored.append(restored)

    def notify_checkpoint_complete(self, checkpoint_id):
        self.completed.append(checkpoint_id)

    def notify_checkpoint_aborted(self, checkpoint_id):
        self.aborted.append(checkpoint_id)


def coordinator_with(tmp_path, participant, clock=None, **knobs):
    coordinator = CheckpointCoordinator(FileCheckpointStore(tmp_path / "chk"),
                                        CheckpointConfig(**knobs), clock=clock or ManualClock())
    coordinator.register(participant)
    coordinator.restore()
    return coordinator


def test_happy_path_pipeline(tmp_path):
    system = MemoryTransactionalSystem()
    store = FileCheckpointStore(tmp_path / "chk")
    coordinator = CheckpointCoordinator(store, CheckpointConfig(checkpoint_interval=1.0), clock=StepClock(0.1))
    records = list(range(1000))
    result = LocalPipeline(coordinator, ListSource(records), lambda r: [r * 10],
                           [MemorySink("out", system)], max_poll_records=7).run()
    assert sorted(system.visible) == [r * 10 for r in records]
    assert result.records_in == 1000 and result.restarts == 0
    stats = coordinator.checkpoint_stats()
    assert len(stats) > 3
    assert all(s.status is CheckpointStatus.COMPLETED for s in stats)
    assert all(s.end_to_end_duration_ms is not None and s.state_size_bytes > 0 for s in stats)
    ids = [s.checkpoint_id for s in stats]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert store.checkpoint_ids() == ids[-3:]
    assert all(store.is_committed(i) for i in store.checkpoint_ids())
    assert system.open_txn_ids("") == []


def test_completed_checkpoint_is_stored_and_committed_before_any_notification(tmp_path):
    seen: list[bool] = []
    participant = Recording(state={"handles": [1, 2]})
    coordinator = coordinator_with(tmp_path, participant)
    participant.notify_checkpoint_complete = lambda cid: seen.append(
        coordinator.store.load(cid).checkpoint_id == cid and coordinator.store.is_committed(cid))
    coordinator.trigger_checkpoint()
    assert seen == [True]


def test_an_aborted_checkpoint_has_its_pre_committed_transactions_aborted_and_told(tmp_path):
    system = MemoryTransactionalSystem()
    sink = MemorySink("out", system)
    failing = Recording("failing")
    store = FileCheckpointStore(tmp_path / "chk")
    coordinator = CheckpointCoordinator(store, CheckpointConfig(tolerable_failed_checkpoints=5),
                                        clock=ManualClock())
    coordinator.register(sink)
    coordinator.register(failing)
    coordinator.restore()
    sink.invoke("a")
    failing.failures = 1
    with pytest.raises(CheckpointAbortedError, match="snapshot failed"):
        coordinator.trigger_checkpoint()
    assert system.txns["out-1"].state == "aborted"
    assert "a" not in system.visible
    assert sink.pending_checkpoint_ids() == [] and failing.aborted == []  # it acknowledged nothing
    [stats] = coordinator.stats_for([1])
    assert stats.status is CheckpointStatus.FAILED and "snapshot failed" in stats.failure_cause


def test_min_pause(tmp_path):
    clock = ManualClock()
    participant = Recording()
    coordinator = coordinator_with(tmp_path, participant, clock, checkpoint_interval=1.0,
                                   min_pause_between_checkpoints=3.0)
    clock.now = 2.0
    first = coordinator.tick()
    assert first is not None
    clock.now = 4.0
    assert coordinator.tick() is None  # interval passed but min pause (3 s after completion at 2) not
    clock.now = 5.0
    second = coordinator.tick()
    assert second == first + 1
    assert participant.completed == [first, second]


def test_tolerable_failed_checkpoints(tmp_path):
    participant = Recording()
    coordinator = coordinator_with(tmp_path, participant, tolerable_failed_checkpoints=1)
    participant.failures = 1
    with pytest.raises(CheckpointAbortedError):
        coordinator.trigger_checkpoint()
    coordinator.trigger_checkpoint()  # a success resets the count
    participant.failures = 2
    with pytest.raises(CheckpointAbortedError):
        coordinator.trigger_checkpoint()
    with pytest.raises(CheckpointFailureError, match="tolerable_failed_checkpoints=1"):
        coordinator.trigger_checkpoint()


def test_ids_increase_across_restart(tmp_path):
    participant = Recording()
    coordinator = coordinator_with(tmp_path, participant)
    for _ in range(3):
        coordinator.trigger_checkpoint()
    participant.failures = 1
    with pytest.raises(CheckpointFailureError):
        coordinator.trigger_checkpoint()  # 4 never completes
    again = Recording()
    restarted = coordinator_with(tmp_path, again)
    assert again.restored[-1].checkpoint_id == 3
    assert restarted.trigger_checkpoint() == 5  # ids skip 4 for good


def test_a_commit_asked_to_be_retried_later_is_retried_then_confirmed(tmp_path):
    system = MemoryTransactionalSystem()
    sink = MemorySink("out", system)
    coordinator = coordinator_with(tmp_path, sink)
    sink.invoke("x")
    system.fail_next_commits = 2
    cid = coordinator.trigger_checkpoint()
    assert system.visible == ["x"] and system.commit_calls == 3
    assert coordinator.store.is_committed(cid)


def test_unconfirmed_commit_is_recommitted_on_restore(tmp_path):
    system = MemoryTransactionalSystem()
    sink = MemorySink("out", system)
    sink.retry_timeout_s = 0  # one attempt: no retry within the bound
    coordinator = coordinator_with(tmp_path, sink)
    sink.invoke("x")
    system.fail_next_commits = 1
    with pytest.raises(CheckpointCommitError):
        coordinator.trigger_checkpoint()
    assert system.visible == []
    assert not coordinator.store.is_committed(1)
    [stats] = coordinator.stats_for([1])
    assert stats.status is CheckpointStatus.COMPLETED_NOT_COMMITTED
    fresh_sink = MemorySink("out", system)
    coordinator_with(tmp_path, fresh_sink)
    assert system.visible == ["x"]
    assert [h.txn_id for h in fresh_sink.recovered] == ["out-1"]


def test_committed_checkpoint_is_not_recommitted(tmp_path):
    system = MemoryTransactionalSystem()
    sink = MemorySink("out", system)
    coordinator = coordinator_with(tmp_path, sink)
    sink.invoke("x")
    coordinator.trigger_checkpoint()
    fresh_sink = MemorySink("out", system)
    coordinator_with(tmp_path, fresh_sink)
    assert fresh_sink.recovered == []
    assert system.visible == ["x"]


def test_a_commit_not_confirmed_is_made_good_by_the_next_checkpoint(tmp_path):
    system = MemoryTransactionalSystem()
    sink = MemorySink("out", system)
    sink.retry_timeout_s = 0
    coordinator = coordinator_with(tmp_path, sink)
    sink.invoke("a")
    system.fail_next_commits = 1
    with pytest.raises(CheckpointCommitError):
        coordinator.trigger_checkpoint()
    assert sink.pending_checkpoint_ids() == [1] and system.visible == []
    sink.invoke("b")
    coordinator.trigger_checkpoint()
    state_2 = coordinator.store.load(2).state_of("out")
    assert [e["checkpoint_id"] for e in state_2] == [1, 2]  # 1 is carried until confirmed
    assert system.visible == ["a", "b"]
    assert sink.pending_checkpoint_ids() == []


def test_savepoint_survives_checkpoint_cleanup_and_restores(tmp_path):
    import shutil
    system = MemoryTransactionalSystem()
    records = list(range(100))
    source = ListSource(records)
    sink = MemorySink("out", system)
    coordinator = CheckpointCoordinator(FileCheckpointStore(tmp_path / "chk"),
                                        CheckpointConfig(checkpoint_interval=None), clock=ManualClock())
    coordinator.register(source)
    coordinator.register(sink)
    coordinator.restore()
    for value in source.poll(40):
        sink.invoke(value)
    savepoint = coordinator.stop_with_savepoint(tmp_path / "savepoints" / "sp-1")
    assert savepoint.is_savepoint and savepoint.state_of("source") == 40
    with pytest.raises(CheckpointTriggerError, match="stopped"):
        coordinator.trigger_checkpoint()
    assert system.visible == records[:40]
    shutil.rmtree(tmp_path / "chk")

    resumed = CheckpointCoordinator(FileCheckpointStore(tmp_path / "chk2"),
                                    CheckpointConfig(checkpoint_interval=0.5), clock=StepClock(0.1))
    LocalPipeline(resumed, ListSource(records), lambda r: [r], [MemorySink("out", system)]).run(
        savepoint_path=tmp_path / "savepoints" / "sp-1")
    assert system.visible == records
    assert resumed.store.checkpoint_ids()[-1] > savepoint.checkpoint_id


def test_savepoint_restore_refuses_newer_checkpoints(tmp_path):
    participant = Recording()
    coordinator = coordinator_with(tmp_path, participant)
    coordinator.trigger_savepoint(tmp_path / "sp")
    coordinator.trigger_checkpoint()
    again = CheckpointCoordinator(FileCheckpointStore(tmp_path / "chk"), clock=ManualClock())
    again.register(Recording())
    with pytest.raises(ValueError, match="fresh checkpoint directory"):
        again.restore(savepoint_path=tmp_path / "sp")


def test_state_of_unknown_participant_is_refused(tmp_path):
    participant = Recording("a", {"x": 1})
    coordinator = coordinator_with(tmp_path, participant)
    coordinator.trigger_checkpoint()
    other = CheckpointCoordinator(FileCheckpointStore(tmp_path / "chk"), clock=ManualClock())
    other.register(Recording("b"))
    with pytest.raises(ValueError, match="allow_non_restored_state"):
        other.restore()


@pytest.mark.parametrize("knob, value, fragment", [
    ("checkpoint_interval", -1, "checkpoint_interval must be a number > 0"),
    ("checkpoint_interval", 0, "checkpoint_interval"),
    ("min_pause_between_checkpoints", -0.1, "min_pause_between_checkpoints must be a number >= 0"),
    ("tolerable_failed_checkpoints", -1, "tolerable_failed_checkpoints must be an integer >= 0"),
    ("retained_checkpoints", 0, "retained_checkpoints must be an integer >= 1"),
])
def test_bad_knobs_name_the_knob_and_range(knob, value, fragment):
    with pytest.raises(ValueError, match=fragment):
        CheckpointConfig(**{knob: value})


def test_trigger_before_restore_is_refused(tmp_path):
    coordinator = CheckpointCoordinator(FileCheckpointStore(tmp_path))
    with pytest.raises(CheckpointTriggerError, match="restore"):
        coordinator.trigger_checkpoint()


def test_pipeline_can_checkpoint_every_n_records(tmp_path):
    system = MemoryTransactionalSystem()
    coordinator = CheckpointCoordinator(FileCheckpointStore(tmp_path / "chk"),
                                        CheckpointConfig(checkpoint_interval=None), clock=ManualClock())
    LocalPipeline(coordinator, ListSource(list(range(1000))), lambda r: [r], [MemorySink("out", system)],
                  max_poll_records=64, checkpoint_every_records=100).run()
    stats = coordinator.checkpoint_stats()
    assert len(stats) == 11  # ten full hundreds, then the final checkpoint at the end of input
    assert sorted(system.visible) == list(range(1000))
    with pytest.raises(ValueError, match="checkpoint_every_records"):
        LocalPipeline(coordinator, ListSource([]), lambda r: [r], [MemorySink("x", system)],
                      checkpoint_every_records=0)
