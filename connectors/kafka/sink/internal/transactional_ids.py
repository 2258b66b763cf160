"""Which transactional id a writer uses: a small fixed pool per writer slot, reused checkpoint
after checkpoint (Flink 2's pooled naming strategy).

An id is ``{prefix}-{slot}-{index}``. ``slot`` is the writer: a Spark write task's partition id, or
an in-process sink's writer number. ``index`` is ``checkpoint_id % POOL_SIZE``, so consecutive
checkpoints of one slot alternate between two ids. The broker keeps every transactional id's
state (in memory and in ``__transaction_state``) until ``transactional.id.expiration.ms``, 7 days
by default; a fresh id per checkpoint grows that state with every batch, for as long as a query
runs. A pool bounds it by ``POOL_SIZE`` times the largest number of slots the sink ever had.

Why two ids per slot and not one, and why that is enough, is argued in
``design/exactly-once-protocol.md`` ("Transactional ids: a bounded pool"). In short: a slot's
id is reused only after the checkpoint that used it last was committed, and a zombie attempt of
the previous checkpoint writes under the other id, so it can never fence the current one.

A retried task attempt (Spark's attempt number above 0: a retry, or a speculative copy) writes
under an id of its own, ``{prefix}-{slot}-{index}-t{task attempt id}`` (Spark's task attempt id is
unique in the application), never reused: the attempt it replaces may still be running, and an
initialisation of the shared id landing after the retry's would fence, and so abort, the retry's
pre-committed transaction. What an earlier attempt left open is aborted by the commit's sweep.
Retries are rare, so these ids add little to the broker's state, and expire like any other.

Because ids repeat, a transaction is told apart by (transactional id, producer id, epoch): every
transaction starts with an InitProducerId that bumps the epoch, so a stored handle whose id was
since taken by a newer transaction fails with PRODUCER_FENCED at commit (``TransactionLostError``),
and can never commit that newer transaction.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Collection
from twophase.errors import InvalidValueError

#: Transactional ids per writer slot.
POOL_SIZE = 2

# What follows the prefix: -{slot}-{index}, and -t{task attempt id} for a retried attempt. The
# letter keeps a retry's id from reading as the id of a longer prefix ("job-1-0-1" is job-1's).
_SUFFIX = r"-(\d+)-(\d+)(?:-t\d+)?$"
_ANY_POOL_ID = re.compile(rf"^(?P<prefix>.+?){_SUFFIX}")


@dataclass(frozen=True)
class TransactionalIdPool:
    """The ids of one sink: ``{prefix}-{slot}-{index}``, ``index < POOL_SIZE`` in steady state."""

    prefix: str

    def __post_init__(self) -> None:
        if not self.prefix or any(c.isspace() for c in self.prefix):
            raise InvalidValueError(f"transactional id prefix must be non-empty without spaces, got {self.prefix!r}")

    def transactional_id(self, slot: int, checkpoint_id: int, in_use: Collection[str] = (),
                         task_attempt: int | None = None) -> str:
        """The id of ``slot``'s transaction for ``checkpoint_id``; ``task_attempt`` (Spark's task
        attempt id) for an attempt that is not a task's first, which gets an id of its own.

        ``in_use`` are ids of this slot whose transactions are pre-committed but not yet known
        committed. Spark never has any (a batch is committed before the next one starts); an
        in-process sink whose commit notification was missed does, and then takes the next
        free index: reusing such an id would fence, and so abort, a transaction the coordinator
        still means to commit. The pool grows only while commits are overdue."""
        if slot < 0 or checkpoint_id < 0:
            raise InvalidValueError(f"slot and checkpoint id must be >= 0, got {slot} and {checkpoint_id}")
        index = checkpoint_id % POOL_SIZE
        while (candidate := self.format(slot, index)) in in_use:
            index += 1
        if task_attempt is not None:
            if task_attempt < 0:
                raise InvalidValueError(f"task attempt id must be >= 0, got {task_attempt}")
            return f"{candidate}-t{task_attempt}"
        return candidate

    def format(self, slot: int, index: int) -> str:
        return f"{self.prefix}-{slot}-{index}"

    @property
    def pattern(self) -> re.Pattern[str]:
        """Matches only this sink's ids (``job`` never claims ``job-1-0-1``), a retried attempt's
        included. Ids named by checkpoint (``{prefix}-{slot}-{checkpoint}``, before the pool) match
        too, so lingering transactions of an older kit version are still found."""
        return re.compile(rf"^{re.escape(self.prefix)}{_SUFFIX}")

    def slot_of(self, transactional_id: str) -> int | None:
        """The writer slot of one of this sink's ids, or None for any other id."""
        match = self.pattern.match(transactional_id)
        return int(match.group(1)) if match else None

    @staticmethod
    def prefix_of(transactional_id: str) -> str | None:
        """The prefix of an id made by a sink's pool (None for any other id)."""
        match = _ANY_POOL_ID.match(transactional_id)
        return match.group("prefix") if match else None

    def pool_ids(self, slots: int) -> list[str]:
        """Every id of the first ``slots`` slots in steady state (for listings and tests)."""
        return [self.format(slot, index) for slot in range(slots) for index in range(POOL_SIZE)]
