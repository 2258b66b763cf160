"""The checkpoint store is judged in one place across the product (every module of ``twophase/``
and ``connectors/``): the commit lifecycle (``twophase/lifecycle.py``) writes the decision (stores a
checkpoint, marks it committed) and reads its parts (which checkpoints are stored, the newest, whether
it is committed) through its read-only view (``twophase/stored_checkpoints.py``), which it lends
those that only look. Nothing else calls those reads or writes on the store."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("twophase", "connectors")
#: The store's reads that make up a decision.
DECISION_READS = {"latest", "is_committed", "checkpoint_ids"}
#: The store's writes of a decision (``add`` only on a receiver named for the store: sets have one).
DECISION_WRITES = {"mark_committed", "add"}
#: Where the calls may stand, and why.
ALLOWED = {
    # The store itself: its own methods call each other.
    "twophase/checkpoint_store.py": "the store",
    # The read-only view the lifecycle owns: the one reader of the decision's parts.
    "twophase/stored_checkpoints.py": "the lifecycle's read-only view",
    # The lifecycle: the one writer of the decision.
    "twophase/lifecycle.py": "the lifecycle",
    # `kafka-eos status` shows what the store holds; it decides nothing (display only).
    "connectors/monitoring/status.py": "display only",
}


def _receiver(node: ast.Attribute) -> str:
    return ast.unparse(node.value)


def _calls(path: Path) -> list[str]:
    text = path.read_text()
    # ``add`` is the checkpoint store's only in a module that knows that store (the verifier's
    # record store has an ``add`` too).
    knows_the_store = "checkpoint_store" in text or "FileCheckpointStore" in text
    found = []
    for node in ast.walk(ast.parse(text)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        name, receiver = node.func.attr, _receiver(node.func)
        if receiver.endswith("stored") or receiver.startswith("StoredCheckpoints("):
            continue  # the lifecycle's read-only view, which anyone may ask
        if name in DECISION_READS and not receiver.endswith("OffsetSpec"):  # Kafka's OffsetSpec.latest()
            found.append(f"{path.relative_to(ROOT).as_posix()}:{node.lineno} {receiver}.{name}")
        elif name in DECISION_WRITES and (name != "add" or (knows_the_store and "store" in receiver.lower())):
            found.append(f"{path.relative_to(ROOT).as_posix()}:{node.lineno} {receiver}.{name}")
    return found


def _product_modules() -> list[Path]:
    return sorted(path for package in PRODUCT for path in (ROOT / package).rglob("*.py"))


def test_nothing_but_the_lifecycle_and_its_view_reads_or_writes_the_stores_decision():
    found = [call for path in _product_modules() if path.relative_to(ROOT).as_posix() not in ALLOWED
             for call in _calls(path)]
    assert found == [], "ask the commit lifecycle (twophase/lifecycle.py) or its view (twophase/stored_checkpoints.py)"


def test_the_scan_sees_the_calls_it_forbids():
    # The scan is not blind: the allowed modules hold each kind of call it looks for.
    view = {call.split(".")[-1] for call in _calls(ROOT / "twophase" / "stored_checkpoints.py")}
    lifecycle = {call.split(".")[-1] for call in _calls(ROOT / "twophase" / "lifecycle.py")}
    assert view == DECISION_READS
    assert lifecycle == DECISION_WRITES
    assert len(_product_modules()) > 100


def test_no_placeholder_lifecycle_is_built():
    # A lifecycle without participants, built only to read the store, is the view's job.
    found = [f"{path.relative_to(ROOT).as_posix()}:{node.lineno}" for path in _product_modules()
             for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("CommitLifecycle")
             and len(node.args) > 1 and isinstance(node.args[1], (ast.Tuple, ast.List)) and not node.args[1].elts]
    assert found == []
