"""An in-memory transactional external system, a source over a list, and a 2PC sink into it.

The system outlives the "process" under test (a test builds fresh coordinators, sources and sinks
over the same system after a simulated crash), as a broker outlives a crashed job. It models what
read_committed readers see: only values of committed transactions, in commit order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from twophase.participants import ResettableSource, TwoPhaseCommitSink


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


class MemorySink(TwoPhaseCommitSink[MemoryTxn, Handle]):
    def __init__(self, name: str, system: MemoryTransactionalSystem) -> None:
        super().__init__(name)
        self.system = system
        self.recovered: list[Handle] = []

    def begin_transaction(self, checkpoint_id: int) -> MemoryTxn:
        return self.system.begin(f"{self.name}-{checkpoint_id}")

    def write(self, txn: MemoryTxn, value: Any) -> None:
        self.system.write(txn, value)

    def pre_commit(self, txn: MemoryTxn) -> Handle:
        return Handle(txn.txn_id, txn.epoch)

    def commit(self, committable: Handle, checkpoint_id: int) -> None:
        self.system.commit(committable.txn_id, committable.epoch)

    def abort(self, committable: Handle, checkpoint_id: int) -> None:
        self.system.abort(committable.txn_id, committable.epoch)

    def recover_and_commit(self, committable: Handle, checkpoint_id: int) -> None:
        self.recovered.append(committable)
        self.system.recommitted.append(committable.txn_id)
        self.commit(committable, checkpoint_id)

    def recover_and_abort(self, keep: Sequence[Handle], restored_checkpoint_id: int | None) -> None:
        kept = {h.txn_id for h in keep}
        for txn_id in self.system.open_txn_ids(f"{self.name}-"):
            if txn_id not in kept:
                txn = self.system.txns[txn_id]
                self.system.abort(txn_id, txn.epoch)

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
