"""The one loop that ends transactions, and its one rule (``twophase/transaction_endings.py``):
every transaction is attempted whatever becomes of the others, those asked to be retried later are
retried within the bound, then one error for every loss, else the first failure; a crash stops it.
Tested by itself, and at every failpoint of the protocol with a partial commit in the way."""

from collections import Counter

import pytest

from kafka_testkit.memory_system import ListSource, MemorySink, MemoryTransactionalSystem, StepClock
from twophase import failpoints
from twophase.checkpoint_store import FileCheckpointStore
from twophase.coordinator import CheckpointConfig, CheckpointCoordinator
from twophase.errors import CheckpointCommitError, FailpointCrash, LostTransaction, TransactionLostError
from twophase.participants import CommittingParticipant
from twophase.pipeline import LocalPipeline
from twophase.transaction_endings import EndRequest, Ending, EndingOutcome, TransactionCommitter, end_transactions


@pytest.fixture(autouse=True)
def _clean_failpoints():
    failpoints.disable()
    yield
    failpoints.disable()


class Scripted(CommittingParticipant[str], TransactionCommitter[str]):
    """Answers each transaction's attempts from a script: a list of outcomes, the last repeated."""

    name = "scripted"

    def __init__(self, script: dict[str, list[str]], retry_timeout_s: float = 5.0) -> None:
        self.committer = self
        self.script = script
        self.retry_timeout_s = retry_timeout_s
        self.calls: list[list[str]] = []

    def committables(self, checkpoint_id, state):
        return []

    def attempt_endings(self, committables, commit):
        self.calls.append([c for _, c in committables])
        return [self._answer(c) for _, c in committables]

    def _answer(self, txn: str) -> Ending:
        steps = self.script.get(txn, ["ended"])
        step = steps.pop(0) if len(steps) > 1 else steps[0]
        if step == "ended":
            return Ending.ended(txn)
        if step == "retry":
            return Ending.retry_later(txn, ConnectionError(f"{txn}: broker away"))
        if step == "lost":
            return Ending.lost_with(txn, LostTransaction(txn, 1, 0, 3), OSError(f"{txn}: fenced"))
        if step == "crash":
            raise FailpointCrash("mid_commit")
        return Ending.failed(txn, PermissionError(f"{txn}: refused"))

    def lingering_transactions(self, keep):
        return []


def requests(participant, *txns):
    return [EndRequest(participant, 1, t) for t in txns]


def test_each_transaction_gets_one_outcome_and_the_ended_ones_raise_nothing():
    participant = Scripted({})
    endings = end_transactions(requests(participant, "a", "b"), commit=True, checkpoint_id=1)
    assert [e.outcome for e in endings] == [EndingOutcome.ENDED, EndingOutcome.ENDED]
    assert participant.calls == [["a", "b"]]  # one attempt for all, together


def test_retry_later_is_retried_alone_until_it_ends():
    participant = Scripted({"b": ["retry", "retry", "ended"]})
    endings = end_transactions(requests(participant, "a", "b", "c"), commit=True, checkpoint_id=1)
    assert [e.outcome for e in endings] == [EndingOutcome.ENDED] * 3
    assert participant.calls == [["a", "b", "c"], ["b"], ["b"]]


def test_retry_later_past_the_bound_raises_its_error_after_every_other_ended():
    participant = Scripted({"a": ["retry"]}, retry_timeout_s=0.2)
    with pytest.raises(ConnectionError, match="a: broker away"):
        end_transactions(requests(participant, "a", "b"), commit=True, checkpoint_id=1)
    assert participant.calls[0] == ["a", "b"] and all(call == ["a"] for call in participant.calls[1:])


def test_a_failure_stops_nothing_and_the_first_is_raised():
    participant = Scripted({"a": ["failed"], "c": ["failed"]})
    with pytest.raises(PermissionError, match="a: refused"):
        end_transactions(requests(participant, "a", "b", "c"), commit=False, checkpoint_id=1)
    assert participant.calls == [["a", "b", "c"]]  # b ended: a failure is not retried and stops nothing


def test_a_failure_of_a_stored_checkpoints_first_commit_names_its_participant():
    participant = Scripted({"b": ["failed"]})
    with pytest.raises(CheckpointCommitError, match="participant 'scripted'") as failed:
        end_transactions(requests(participant, "a", "b"), commit=True, checkpoint_id=1, first_commit_of_stored=True)
    assert isinstance(failed.value.__cause__, PermissionError) and failed.value.checkpoint_id == 1


def test_every_loss_is_in_one_error_which_counts_the_others_that_ended():
    participant = Scripted({"a": ["lost"], "b": ["failed"], "d": ["lost"]})
    with pytest.raises(TransactionLostError) as lost:
        end_transactions(requests(participant, "a", "b", "c", "d"), commit=True, checkpoint_id=7,
                         first_commit_of_stored=True)
    assert lost.value.transactional_ids == ("a", "d") and lost.value.checkpoint_id == 7
    assert "its other 1 transaction did commit" in str(lost.value)


def test_the_first_is_attempted_alone_then_the_rest():
    participant = Scripted({})
    between = []
    end_transactions(requests(participant, "a", "b", "c"), commit=True, checkpoint_id=1,
                     after_first=lambda: between.append(list(participant.calls)))
    assert between == [[["a"]]] and participant.calls == [["a"], ["b", "c"]]


def test_a_crash_stops_the_loop_where_it_is():
    participant = Scripted({"a": ["crash"]})
    with pytest.raises(FailpointCrash):
        end_transactions(requests(participant, "a", "b"), commit=True, checkpoint_id=1,
                         after_first=lambda: None)
    assert participant.calls == [["a"]]


# -- the rule at every failpoint, with a partial commit in the way --------------------------------

RECORDS = list(range(300))
#: Each failpoint's crash, at a hit the input always reaches (as in test_crash_matrix.py).
CRASHES = {
    "before_pre_commit": {"before_pre_commit": "raise@5"},
    "after_pre_commit": {"after_pre_commit": "raise@5"},
    "after_checkpoint_stored": {"after_checkpoint_stored": "raise@3"},
    "before_commit": {"before_commit": "raise@4"},
    "mid_commit": {"mid_commit": "raise@3"},
    "after_commit": {"after_commit": "raise@3"},
    "during_restore": {"after_pre_commit": "raise@5", "during_restore": "raise@2"},
}


def test_every_failpoint_is_tested_with_a_partial_commit():
    assert set(CRASHES) == set(failpoints.ALL)


@pytest.mark.parametrize("failpoint", sorted(CRASHES))
def test_a_partial_commit_and_a_crash_at_each_failpoint_stay_exactly_once(tmp_path, failpoint):
    """The first commit of a checkpoint refuses one sink's transaction outright: the other sink's
    is committed all the same (a failure stops nothing), the checkpoint fails stored but not
    confirmed, the failover's recovery commits it, and a crash at ``failpoint`` comes on top."""
    for name, action in CRASHES[failpoint].items():
        failpoints.enable(name, action)
    system = MemoryTransactionalSystem()
    refused: list[list[str]] = []
    crashes = []
    for _ in range(6):
        coordinator = CheckpointCoordinator(
            FileCheckpointStore(tmp_path / "chk", retained_checkpoints=2),
            CheckpointConfig(checkpoint_interval=0.5, tolerable_failed_checkpoints=10), clock=StepClock(0.1))
        sinks = [MemorySink("out-0", system), MemorySink("out-1", system)]
        if not refused:
            system.refuse_next_commits = 1  # the next checkpoint's first commit is refused
        before = len(system.commit_attempts)
        try:
            LocalPipeline(coordinator, ListSource(RECORDS), lambda r: [r], sinks, route=lambda v: v % 2,
                          max_poll_records=9).run()
            break
        except FailpointCrash as crash:
            crashes.append(crash.name)
        finally:
            refused.append(system.commit_attempts[before:])
    else:
        raise AssertionError(f"no run finished: {crashes}")
    assert failpoint in crashes
    counts = Counter(system.visible)
    assert {v: n for v, n in counts.items() if n > 1} == {}, "duplicates"
    assert set(counts) == set(RECORDS), "lost records"
    assert all(t.state != "open" for t in system.txns.values()), "a transaction was left open"
    # The refused commit was checkpoint 1's first; its other transaction was attempted right after.
    attempts = [a for life in refused for a in life]
    assert attempts[0].startswith("out-0-") and attempts[1].startswith("out-1-"), attempts[:2]


class Lingering(Scripted):
    """Has ``open`` transactions lingering; its listing fails with ``listing_error`` if given."""

    def __init__(self, name: str, open_ids: list[str], listing_error: Exception | None = None) -> None:
        super().__init__({})
        self.name = name
        self.open_ids = open_ids
        self.listing_error = listing_error

    def lingering_transactions(self, keep):
        if self.listing_error is not None:
            raise self.listing_error
        return [(-1, t) for t in self.open_ids if t not in keep]


def test_a_sweep_whose_listing_fails_for_one_sink_aborts_the_others_then_raises(tmp_path):
    from twophase.lifecycle import CommitLifecycle

    broken, fine = Lingering("a", [], OSError("listing refused")), Lingering("b", ["b-1", "b-2"])
    lifecycle = CommitLifecycle(FileCheckpointStore(tmp_path / "chk"), [broken, fine])
    with pytest.raises(OSError, match="listing refused"):
        lifecycle.recover(None, committed=False)  # the recovery's sweep raises, after the others
    assert fine.calls == [["b-1", "b-2"]]
    assert lifecycle.sweep(None) == []  # the housekeeping sweep logs the failure instead
    assert fine.calls[-1] == ["b-1", "b-2"]
