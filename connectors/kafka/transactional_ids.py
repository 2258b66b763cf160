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

Because ids repeat, a transaction is told apart by (transactional id, producer id, epoch): every
transaction starts with an InitProducerId that bumps the epoch, so a stored handle whose id was
since taken by a newer transaction fails with PRODUCER_FENCED at commit (``TransactionLostError``),
and can never commit that newer transaction.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Collection

#: Transactional ids per writer slot.
POOL_SIZE = 2


@dataclass(frozen=True)
class TransactionalIdPool:
    """The ids of one sink: ``{prefix}-{slot}-{index}``, ``index < POOL_SIZE`` in steady state."""

    prefix: str

    def __post_init__(self) -> None:
        if not self.prefix or any(c.isspace() for c in self.prefix):
            raise ValueError(f"transactional id prefix must be non-empty without spaces, got {self.prefix!r}")

    def transactional_id(self, slot: int, checkpoint_id: int, in_use: Collection[str] = ()) -> str:
        """The id of ``slot``'s transaction for ``checkpoint_id``.

        ``in_use`` are ids of this slot whose transactions are pre-committed but not yet known
        committed. Spark never has any (a batch is committed before the next one starts); an
        in-process sink whose commit notification was missed does, and then takes the next
        free index: reusing such an id would fence, and so abort, a transaction the coordinator
        still means to commit. The pool grows only while commits are overdue."""
        if slot < 0 or checkpoint_id < 0:
            raise ValueError(f"slot and checkpoint id must be >= 0, got {slot} and {checkpoint_id}")
        index = checkpoint_id % POOL_SIZE
        while (candidate := self.format(slot, index)) in in_use:
            index += 1
        return candidate

    def format(self, slot: int, index: int) -> str:
        return f"{self.prefix}-{slot}-{index}"

    @property
    def pattern(self) -> re.Pattern[str]:
        """Matches only this sink's ids (``job-1`` never claims ``job-10-0-1``). Ids named by
        checkpoint (``{prefix}-{slot}-{checkpoint}``, before the pool) match too, so lingering
        transactions of an older kit version are still found."""
        return re.compile(rf"^{re.escape(self.prefix)}-(\d+)-(\d+)$")

    def slot_of(self, transactional_id: str) -> int | None:
        """The writer slot of one of this sink's ids, or None for any other id."""
        match = self.pattern.match(transactional_id)
        return int(match.group(1)) if match else None

    def pool_ids(self, slots: int) -> list[str]:
        """Every id of the first ``slots`` slots in steady state (for listings and tests)."""
        return [self.format(slot, index) for slot in range(slots) for index in range(POOL_SIZE)]
