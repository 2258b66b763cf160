"""An in-memory transactional external system, a source over a list, and a 2PC sink into it.

The system outlives the "process" under test (a test builds fresh coordinators, sources and sinks
over the same system after a simulated crash), as a broker outlives a crashed job. It models what
read_committed readers see: only values of committed transactions, in commit order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from twophase.errors import LostTransaction
from twophase.participants import ResettableSource, TwoPhaseCommitSink
from twophase.transaction_endings import Ending, TransactionCommitter


class Fenced(Exception):
    pass


@dataclass
class MemoryTxn:
    txn_id: str
    epoch: int
    values: list[Any] = field(default_factory=list)
    state: str = "open"  # open | committed | aborted


class MemoryTransactionalSystem:
    def __init__(self) -> None:
        self.txns: dict[str, MemoryTxn] = {}
        self.visible: list[Any] = []
        self.aborted_values: list[Any] = []
        self.commit_calls = 0
        self.fail_next_commits = 0
        #: Commits refused outright (not retriable), counted down like ``fail_next_commits``.
        self.refuse_next_commits = 0
        self.commit_attempts: list[str] = []
        self.recommitted: list[str] = []  # transactions committed again by a restore

    def begin(self, txn_id: str) -> MemoryTxn:
        """Like init_transactions + begin: fences and aborts an older open txn of the same id."""
        previous = self.txns.get(txn_id)
        epoch = 0
        if previous is not None:
            epoch = previous.epoch + 1
            if previous.state == "open":
                self._abort(previous)
        txn = MemoryTxn(txn_id, epoch)
        self.txns[txn_id] = txn
        return txn

    def write(self, txn: MemoryTxn, value: Any) -> None:
        self._check_current(txn.txn_id, txn.epoch)
        if txn.state != "open":
            raise RuntimeError(f"write into {txn.state} transaction {txn.txn_id}")
        txn.values.append(value)

    def commit(self, txn_id: str, epoch: int) -> None:
        self.commit_calls += 1
        self.commit_attempts.append(txn_id)
        if self.refuse_next_commits:
            self.refuse_next_commits -= 1
            raise PermissionError(f"injected refusal of the commit of {txn_id}")
        if self.fail_next_commits:
            self.fail_next_commits -= 1
            raise ConnectionError("injected commit failure")
        txn = self._check_current(txn_id, epoch)
        if txn.state == "committed":
            return  # idempotent retry
        if txn.state == "aborted":
            raise RuntimeError(f"commit of aborted transaction {txn_id}: its data is lost")
        txn.state = "committed"
        self.visible.extend(txn.values)

    def abort(self, txn_id: str, epoch: int) -> None:
        txn = self._check_current(txn_id, epoch)
        if txn.state == "committed":
            raise RuntimeError(f"abort of committed transaction {txn_id}")
        self._abort(txn)

    def open_txn_ids(self, prefix: str) -> list[str]:
        return [t.txn_id for t in self.txns.values() if t.state == "open" and t.txn_id.startswith(prefix)]

    def _abort(self, txn: MemoryTxn) -> None:
        if txn.state == "open":
            txn.state = "aborted"
            self.aborted_values.extend(txn.values)

    def _check_current(self, txn_id: str, epoch: int) -> MemoryTxn:
        txn = self.txns.get(txn_id)
        if txn is None or txn.epoch != epoch:
            raise Fenced(f"{txn_id} epoch {epoch} is fenced")
        return txn


@dataclass(frozen=True)
class Handle:
    txn_id: str
    epoch: int


class MemorySink(TwoPhaseCommitSink[MemoryTxn, Handle], TransactionCommitter[Handle]):
    """A sink that is its own committer: a test double needs no second object."""

    #: A dropped connection is retried this long (the one retry layer's bound).
    retry_timeout_s = 5.0

    def __init__(self, name: str, system: MemoryTransactionalSystem) -> None:
        super().__init__(name)
        self.committer = self
        self.system = system
        self.recovered: list[Handle] = []

    def begin_transaction(self, checkpoint_id: int) -> MemoryTxn:
        return self.system.begin(f"{self.name}-{checkpoint_id}")

    def write(self, txn: MemoryTxn, value: Any) -> None:
        self.system.write(txn, value)

    def pre_commit(self, txn: MemoryTxn) -> Handle:
        return Handle(txn.txn_id, txn.epoch)

    def attempt_endings(self, committables: Sequence[tuple[int, Handle]], commit: bool) -> list[Ending]:
        if commit:
            # Handles this process did not pre-commit come from a restored checkpoint.
            own = set(self.pending_committables())
            restored = [h for _, h in committables if h not in own]
            self.recovered.extend(restored)
            self.system.recommitted.extend(h.txn_id for h in restored)
        return [self._end(handle, commit) for _, handle in committables]

    def _end(self, handle: Handle, commit: bool) -> Ending:
        """One attempt, its outcome: a dropped connection is retried later; a fenced or aborted
        transaction is lost to a commit, and already ended for an abort; anything else failed."""
        try:
            (self.system.commit if commit else self.system.abort)(handle.txn_id, handle.epoch)
        except ConnectionError as exc:
            return Ending.retry_later(handle.txn_id, exc)
        except (Fenced, RuntimeError) as exc:
            if not commit:
                return Ending.ended(handle.txn_id)
            return Ending.lost_with(handle.txn_id, LostTransaction(handle.txn_id, 0, handle.epoch, -1,
                                                                   reason=str(exc)), exc)
        except Exception as exc:
            return Ending.failed(handle.txn_id, exc)
        return Ending.ended(handle.txn_id)

    def lingering_transactions(self, keep: Sequence[Handle]) -> list[tuple[int, Handle]]:
        kept = {h.txn_id for h in keep}
        return [(-1, Handle(txn_id, self.system.txns[txn_id].epoch))
                for txn_id in self.system.open_txn_ids(f"{self.name}-") if txn_id not in kept]

    def serialize_committable(self, committable: Handle) -> Any:
        return {"txn_id": committable.txn_id, "epoch": committable.epoch}

    def deserialize_committable(self, data: Any) -> Handle:
        return Handle(data["txn_id"], data["epoch"])


class ListSource(ResettableSource[int]):
    """Records of a list; the offset is the index of the next record."""

    def __init__(self, records: Sequence[Any], name: str = "source") -> None:
        self.name = name
        self.records = list(records)
        self.position = 0

    def snapshot_state(self, checkpoint_id: int) -> int:
        return self.position

    def restore_state(self, offsets: int | None) -> None:
        self.position = offsets or 0

    def poll(self, max_records: int) -> Sequence[Any]:
        batch = self.records[self.position:self.position + max_records]
        self.position += len(batch)
        return batch

    def end_reached(self) -> bool:
        return self.position >= len(self.records)


class StepClock:
    """A clock that advances by ``step`` seconds each time it is read."""

    def __init__(self, step: float = 0.1) -> None:
        self.now = 0.0
        self.step = step

    def __call__(self) -> float:
        self.now += self.step
        return self.now
