"""Writes a small state directory with the kit's code of whichever version is first on
``sys.path``: how the fixtures beside this file were made, each by the version that wrote that
format (see README.md here). It only calls that version's own API (store, owner, encoders), so it
probes for what exists: the first versions had no owner record, no statistics, no Kafka sink.

    git worktree add /tmp/old-<sha> <sha>
    PYTHONPATH=/tmp/old-<sha> python tests/twophase/state_fixtures/write_fixture.py <out-dir>
"""

from __future__ import annotations

import dataclasses
import importlib
import sys

# An editable install of the current kit answers for modules the old version lacks: drop it, so
# that only the version on PYTHONPATH is imported.
sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in getattr(f, "__module__", "")
                    and "__editable__" not in type(f).__module__]


def _optional(module: str):
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


def _committable_module():
    return _optional("connectors.kafka.sink.committable") or _optional("connectors.kafka.committable")


def _handles(checkpoint_id: int) -> list[dict]:
    module = _committable_module()
    if module is None:
        return []
    tp = _topic_partition()
    return [module.KafkaCommittable(transactional_id=f"kafka-eos-{slot}-{checkpoint_id % 2}", producer_id=1000 + slot,
                                    producer_epoch=3, partitions=(tp("orders-out", slot),), record_count=100 + slot,
                                    checkpoint_id=checkpoint_id, begin_timestamp_ms=1_764_000_000_000,
                                    transaction_timeout_ms=900_000).to_json() for slot in range(2)]


def _topic_partition():
    for module in ("connectors.kafka.clients", "connectors.kafka.clients.types", "connectors.kafka.client"):
        found = _optional(module)
        if found is not None and hasattr(found, "TopicPartition"):
            return found.TopicPartition
    raise ImportError("no TopicPartition in this version")


def _statistics(store, checkpoint_id: int, outcome: str) -> None:
    module = _optional("twophase.checkpoint_statistics")
    if module is None:
        return
    fields = {f.name for f in dataclasses.fields(module.CheckpointStatistics)}
    values = dict(checkpoint_id=checkpoint_id, written_at_ms=1_764_000_000_500 + checkpoint_id,
                  outcome=module.CheckpointOutcome(outcome), records=201, transactions=2,
                  timings=module.CommitTimings(total_ms=42.0, store_ms=3.0, mark_ms=1.0),
                  oldest_transaction_age_ms=480, transactional_id_prefix="kafka-eos-",
                  transaction_timeout_ms=900_000, restart_budget_ms=60_000,
                  sink={"transactional_id_prefix": "kafka-eos-", "transaction_timeout_ms": 900_000,
                        "restart_budget_ms": 60_000},
                  totals=module.StatisticsTotals(checkpoints=checkpoint_id, records=201 * checkpoint_id,
                                                 transactions=2 * checkpoint_id, recoveries=1))
    stats = module.CheckpointStatistics(**{k: v for k, v in values.items() if k in fields})
    data = module.encode_statistics(stats)
    if hasattr(store, "add_checkpoint_file"):
        store.add_checkpoint_file(checkpoint_id, module.STATISTICS_FILE, data)
    else:
        store.storage.create(f"chk-{checkpoint_id}/{module.STATISTICS_FILE}", data)


def main(out: str) -> None:
    from twophase.checkpoint import CompletedCheckpoint
    from twophase.checkpoint_store import FileCheckpointStore

    store = FileCheckpointStore(out)
    owner = _optional("twophase.state_owner")
    if owner is not None:
        store.claim_owner(owner.StateOwner(kind="spark-streaming-query",
                                           owner_id="5f1c2d3e-0000-4000-8000-000000000001",
                                           description="checkpointLocation file:/tmp/chk/orders",
                                           created_ms=1_764_000_000_000))
    for checkpoint_id in (1, 2):
        store.reserve_checkpoint_id(checkpoint_id)
        handles = _handles(checkpoint_id)
        states = {"kafka-sink": handles} if handles else {"source": {"orders-0": 100 * checkpoint_id}, "sink": []}
        store.add(CompletedCheckpoint(checkpoint_id, 1_764_000_000_000 + checkpoint_id,
                                      1_764_000_000_100 + checkpoint_id, states))
    store.mark_committed(1)  # checkpoint 2: stored, its commit not confirmed (a crash after the decision)
    _statistics(store, 1, "committed")


if __name__ == "__main__":
    main(sys.argv[1])
