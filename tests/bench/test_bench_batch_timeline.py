"""bench/batch_timeline.py: records are put into the batch that made them visible, GC pauses and
process starts into the batch they happened in, and the slowest 1 % are the batches with the
slowest records."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import batch_timeline  # noqa: E402

BASE_MS = 1_795_000_000_000


def iso(ms: int) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def test_records_pauses_and_processes_go_to_their_batch(tmp_path):
    metrics = tmp_path / "m.jsonl"
    # Three batches of 200 ms triggers; the second takes 900 ms.
    batches = [(0, 0, 100), (1, 200, 900), (2, 1100, 100)]
    metrics.write_text("".join(json.dumps({"batchId": b, "timestamp": iso(BASE_MS + start), "numInputRows": 10,
                                           "durationMs": {"addBatch": d - 20, "triggerExecution": d}}) + "\n"
                               for b, start, d in batches))
    stderr = tmp_path / "err"
    stderr.write_text("2026-11-27 01:00:00,000 7 INFO connectors.spark.sink_driver: batch 1 committed: 1 transactions, "
                      "10 records, 30 ms (prepare 1, store 9, EndTxn 15, mark 5)\n")
    gc_log = tmp_path / "gc.log"
    gc_log.write_text(f"[{iso(BASE_MS + 500).replace('Z', '+0000')}] GC(1) Pause Young (Normal) (G1 Evacuation Pause) "
                      "10M->2M(64M) 412.5ms\n")
    samples = [(BASE_MS - 50, 120),        # visible at 70: batch 0
               (BASE_MS + 150, 900),       # visible at 1050: batch 1 (ends 1100)
               (BASE_MS + 1000, 170)]      # visible at 1170: batch 2 (ends 1200)
    starts = [(BASE_MS + 300, "python -m pyspark.daemon")]
    timelines = batch_timeline.build(metrics, stderr, gc_log, samples, starts, 200, (BASE_MS - 1000, BASE_MS + 2000))
    by_batch = {t.batch: t for t in timelines}
    assert [t.batch for t in timelines] == [0, 1, 2]
    assert by_batch[1].max_latency_ms == 900 and by_batch[1].gc_pauses_ms == [412.5]
    assert by_batch[1].processes_started == ["python -m pyspark.daemon"]
    assert by_batch[1].commit_ms == {"ms": 30, "prepare": 1, "store": 9, "end_txn": 15, "mark": 5}
    assert by_batch[2].queued_ms == 0 and by_batch[0].gc_pauses_ms == []
    summary = batch_timeline.report(timelines)
    assert summary["slowest_1pct"][0]["batch"] == 1
    assert "| 1 | 900 |" in batch_timeline.render(summary)
