"""The checkpoint store is judged in one place: the commit lifecycle (``twophase/lifecycle.py``)
reads it to decide commit, replay and abort, and neither the Spark adapter nor the Kafka sink reads
the decision's parts (the newest checkpoint, whether it is committed, which are stored) itself.
(The Kafka clients' ``OffsetSpec.latest()`` is no store read: they are not scanned.)"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The store's reads that make up a decision.
DECISION_READS = {"latest", "is_committed", "checkpoint_ids"}


def _reads(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    return [f"{path.relative_to(ROOT).as_posix()}:{node.lineno} {node.func.attr}" for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in DECISION_READS]


def test_neither_the_spark_adapter_nor_the_kafka_sink_reads_the_stores_decision():
    found = [read for package in ("connectors/spark", "connectors/kafka/sink")
             for path in sorted((ROOT / package).rglob("*.py")) for read in _reads(path)]
    assert found == [], "ask the commit lifecycle (twophase/lifecycle.py), which judges the store"


def test_the_lifecycle_reads_them():
    assert {read.split()[-1] for read in _reads(ROOT / "twophase" / "lifecycle.py")} == DECISION_READS
