"""The one loop both Kafka sinks end their transactions with (connectors/kafka/sink/commit_loop.py):
checkpoint by checkpoint, every checkpoint attempted even when one fails, then the first error."""

from __future__ import annotations

import pytest

from connectors.kafka.sink.commit_loop import abort_by_checkpoint, commit_by_checkpoint
from connectors.kafka.sink.committable import KafkaCommittable


class RecordingCommitter:
    def __init__(self, failing: set[int]) -> None:
        self.failing = failing
        self.calls: list[tuple[str, int, list[str]]] = []

    def _end(self, what: str, committables, checkpoint_id: int) -> None:
        self.calls.append((what, checkpoint_id, [c.transactional_id for c in committables]))
        if checkpoint_id in self.failing:
            raise RuntimeError(f"{what} of checkpoint {checkpoint_id} failed")

    def commit_all(self, committables, checkpoint_id: int) -> None:
        self._end("commit", committables, checkpoint_id)

    def abort_all(self, committables, checkpoint_id: int) -> None:
        self._end("abort", committables, checkpoint_id)


def txn(checkpoint_id: int, name: str) -> tuple[int, KafkaCommittable]:
    return checkpoint_id, KafkaCommittable(transactional_id=name, producer_id=1, producer_epoch=0, partitions=(),
                                           record_count=1, checkpoint_id=checkpoint_id, begin_timestamp_ms=0,
                                           transaction_timeout_ms=60_000)


def test_each_checkpoint_is_ended_at_once_in_order_and_a_recovery_reported(caplog):
    committer = RecordingCommitter(failing=set())
    with caplog.at_level("INFO", logger="connectors.kafka.sink.commit_loop"):
        commit_by_checkpoint(committer, [txn(5, "b"), txn(4, "a"), txn(5, "c")], recovering=True)
    assert committer.calls == [("commit", 4, ["a"]), ("commit", 5, ["b", "c"])]
    lines = [r.getMessage() for r in caplog.records]
    assert [line.split(" (")[0] for line in lines] == ["re-committed 1 transaction(s) of checkpoint 4 on restore",
                                                       "re-committed 2 transaction(s) of checkpoint 5 on restore"]


@pytest.mark.parametrize("end", [commit_by_checkpoint, abort_by_checkpoint])
def test_a_failed_checkpoint_leaves_no_later_one_open_and_its_error_is_raised(end):
    committer = RecordingCommitter(failing={4, 6})
    with pytest.raises(RuntimeError, match="checkpoint 4 failed"):
        end(committer, [txn(4, "a"), txn(5, "b"), txn(6, "c")])
    assert [cid for _, cid, _ in committer.calls] == [4, 5, 6]
