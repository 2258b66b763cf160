"""Per-checkpoint statistics: their versioned format, write-once storage next to the checkpoint,
retention with it, running totals, and that recording them never fails a commit."""

import json

import pytest

from twophase.checkpoint import CompletedCheckpoint
from twophase.errors import CorruptStatisticsError
from twophase.checkpoint_statistics import (
    COMMIT_DURATION_BUCKETS_S,
    STATISTICS_FILE,
    CheckpointOutcome,
    CheckpointStatistics,
    CommitFigures,
    CommitTimings,
    LostTransactionRecord,
    StatisticsTotals,
    decode_statistics,
    encode_statistics,
    read_statistics,
    record_statistics,
    retained_statistics,
)
from twophase.checkpoint_store import FileCheckpointStore
from twophase.storage.state_storage import open_state_storage


def chk(cid: int) -> CompletedCheckpoint:
    return CompletedCheckpoint(cid, 1000 * cid, 1000 * cid + 5, {"sink": []})


SINK = {"transactional_id_prefix": "kafka-eos-abc", "transaction_timeout_ms": 60000, "restart_budget_ms": 5000}


def commit(store: FileCheckpointStore, cid: int, records: int = 10, total_ms: float = 40.0, lost=(), **more):
    store.add(chk(cid))
    store.mark_committed(cid)
    return record_statistics(store, cid, outcome=more.pop("outcome", CheckpointOutcome.COMMITTED),
                             figures=CommitFigures(records, 2, lost=tuple(lost), sink=SINK),
                             timings=CommitTimings(total_ms=total_ms, prepare_ms=1, store_ms=2, commit_ms=30,
                                                   mark_ms=3, sweep_ms=4), **more)


def test_the_format_is_versioned_and_round_trips():
    stats = CheckpointStatistics(
        checkpoint_id=7, written_at_ms=123, outcome=CheckpointOutcome.RECOVERED, records=5, transactions=1,
        timings=CommitTimings(total_ms=12.5, commit_ms=12.5), lingering_aborted=("p-3-1",),
        lost=(LostTransactionRecord("p-0-1", 3, 7, 2, ("out-0",)),),
        sink={"transactional_id_prefix": "p", "transaction_timeout_ms": 900000, "restart_budget_ms": 60000},
        totals=StatisticsTotals(checkpoints=3, records=15, recoveries=1, commit_count=3, commit_seconds_sum=0.1,
                                commit_duration_buckets=(0, 1, 3) + (3,) * (len(COMMIT_DURATION_BUCKETS_S) - 3)))
    data = encode_statistics(stats)
    document = json.loads(data)
    assert document["format_version"] == 3 and document["statistics"]["outcome"] == "recovered"
    assert decode_statistics(data) == stats


def test_a_version_2_record_is_read_with_its_kafka_fields_as_the_sink_section():
    stats = CheckpointStatistics(4, 1, CheckpointOutcome.COMMITTED, 9, 3, timings=CommitTimings(50, commit_ms=20))
    document = json.loads(encode_statistics(stats))
    document["format_version"] = 2
    body = document["statistics"]
    del body["sink"]
    body["timings"]["end_txn_ms"] = body["timings"].pop("commit_ms")
    body.update(transactional_id_prefix="p", transaction_timeout_ms=60000, restart_budget_ms=None)
    old = decode_statistics(json.dumps(document).encode())
    assert old.sink == {"transactional_id_prefix": "p", "transaction_timeout_ms": 60000}
    assert old.timings == CommitTimings(50, commit_ms=20)


def test_a_version_1_record_is_still_read_with_its_lost_ids():
    stats = CheckpointStatistics(3, 1, CheckpointOutcome.LOST, 9, 3)
    document = json.loads(encode_statistics(stats))
    document["format_version"] = 1
    body = document["statistics"]
    del body["lost"], body["sink"]
    body["lost_transactions"] = ["p-0-1", "p-1-1"]
    body["totals"].pop("lost_records")
    old = decode_statistics(json.dumps(document).encode())
    assert old.lost_transactions == ("p-0-1", "p-1-1") and old.lost_records == 0  # counts were not kept
    assert [t.records for t in old.lost] == [None, None]


@pytest.mark.parametrize("mangle", [
    lambda d: d.replace(b'"format_version": 3', b'"format_version": "3"'),
    lambda d: d[: len(d) // 2],
    lambda d: d.replace(b'"records"', b'"recs"'),
    lambda d: b"[]",
])
def test_a_corrupt_or_unknown_document_is_refused(mangle):
    data = encode_statistics(CheckpointStatistics(1, 1, CheckpointOutcome.COMMITTED, 1, 1))
    with pytest.raises(CorruptStatisticsError):
        decode_statistics(mangle(data))


def test_statistics_are_written_once_beside_the_checkpoint_and_retained_with_it(tmp_path):
    store = FileCheckpointStore(tmp_path / "state", retained_checkpoints=2)
    for cid in range(1, 6):
        assert commit(store, cid, records=cid * 10, total_ms=cid * 100.0) is not None
    keys = open_state_storage(tmp_path / "state").list_keys()
    assert sorted(keys) == ["chk-4/_committed", "chk-4/_metadata", "chk-4/_statistics",
                            "chk-5/_committed", "chk-5/_metadata", "chk-5/_statistics"]
    # Another process, from the files alone:
    history = retained_statistics(FileCheckpointStore(tmp_path / "state", check_writable=False))
    assert [s.checkpoint_id for s in history] == [4, 5]
    totals = history[-1].totals
    # Totals span the whole life, not just what retention kept.
    assert (totals.checkpoints, totals.records, totals.transactions) == (5, 150, 10)
    assert totals.commit_count == 5 and totals.commit_seconds_sum == pytest.approx(1.5)
    by_bound = dict(zip(COMMIT_DURATION_BUCKETS_S, totals.commit_duration_buckets))
    assert by_bound[0.1] == 1 and by_bound[0.25] == 2 and by_bound[0.5] == 5 and by_bound[300.0] == 5
    # Written once: a second record of the same checkpoint changes nothing.
    assert record_statistics(store, 5, outcome=CheckpointOutcome.LOST, figures=CommitFigures(0, 0)) is None
    assert read_statistics(store, 5).outcome is CheckpointOutcome.COMMITTED


def test_recoveries_lingering_and_lost_transactions_add_up(tmp_path):
    store = FileCheckpointStore(tmp_path / "state")
    commit(store, 1, lingering_aborted=["p-4-0", "p-5-0"])
    commit(store, 2, outcome=CheckpointOutcome.RECOVERED)
    commit(store, 3, records=10, outcome=CheckpointOutcome.LOST,
           lost=[LostTransactionRecord("p-0-1", 6), LostTransactionRecord("p-1-1", 4)])
    totals = read_statistics(store, 3).totals
    assert (totals.recoveries, totals.lingering_aborted, totals.lost_transactions, totals.lost_records) == (1, 2, 2, 10)
    # Lost transactions are not counted as committed: 2 checkpoints of 10 records and 2 transactions.
    assert (totals.records, totals.transactions) == (20, 4)


def test_a_checkpoint_without_statistics_is_skipped_and_totals_go_on_from_the_newest_earlier_one(tmp_path):
    store = FileCheckpointStore(tmp_path / "state", retained_checkpoints=5)
    commit(store, 1)
    store.add(chk(2))  # crashed after storing: no statistics
    commit(store, 3)
    assert [s.checkpoint_id for s in retained_statistics(store)] == [1, 3]
    assert read_statistics(store, 3).totals.checkpoints == 2


def test_statistics_of_an_unstored_checkpoint_are_not_written(tmp_path):
    store = FileCheckpointStore(tmp_path / "state")
    assert record_statistics(store, 4, outcome=CheckpointOutcome.COMMITTED, figures=CommitFigures(1, 1)) is None
    assert open_state_storage(tmp_path / "state").list_keys() == []


def test_recording_never_raises_and_an_unreadable_file_is_ignored(tmp_path, caplog):
    store = FileCheckpointStore(tmp_path / "state")
    store.add(chk(1))

    def broken(*args, **kwargs):
        raise OSError("disk on fire")

    store.storage.create = broken  # type: ignore[method-assign]
    assert record_statistics(store, 1, outcome=CheckpointOutcome.COMMITTED, figures=CommitFigures(1, 1)) is None
    assert "recording its statistics" in caplog.text and "disk on fire" in caplog.text

    store = FileCheckpointStore(tmp_path / "state")
    store.add_checkpoint_file(1, STATISTICS_FILE, b"{not json")
    assert read_statistics(store, 1) is None and retained_statistics(store) == []


def test_the_store_refuses_to_write_its_own_files_through_the_generic_call(tmp_path):
    store = FileCheckpointStore(tmp_path / "state")
    store.add(chk(1))
    with pytest.raises(ValueError, match="_committed"):
        store.add_checkpoint_file(1, "_committed", b"")
