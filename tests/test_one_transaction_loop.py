"""Ending transactions has one loop and one retry layer (``twophase/transaction_endings.py``):
no other product module ends a sink's transactions in a loop of its own or retries an ending.
Found from the source: every call that ends transactions, and every use of tenacity."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("twophase", "connectors")
ENDING_CALLS = {"end_transactions", "end_transaction"}


def _product_modules():
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), ast.parse(path.read_text())


def _calls(tree, names):
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call)
            and (getattr(node.func, "attr", None) in names or getattr(node.func, "id", None) in names)]


def test_transactions_are_ended_only_through_the_one_loop():
    callers = {where for where, tree in _product_modules() if _calls(tree, ENDING_CALLS)}
    # The embedded cluster is a broker, not a sink: its EndTxn ends what a client asks it to.
    callers.discard("connectors/kafka/clients/embedded_cluster.py")
    assert callers == {
        "twophase/transaction_endings.py",  # the one loop: participants' one attempt each
        "twophase/lifecycle.py",  # commit, recovery, abort and sweep call the loop
        "connectors/kafka/sink/kafka_sink.py",  # the in-process sink delegates its committer side
        "connectors/kafka/sink/committing_participant.py",  # which hands a call to the committer
        "connectors/kafka/sink/committer.py",  # one EndTxn round for a call's transactions
        "connectors/kafka/clients/_kafka_python/transaction_control.py",  # EndTxn of one id, as a round of one
        "connectors/tools/loader.py",  # the load tool ends the one test-data transaction it wrote
    }, sorted(callers)


def test_the_sink_code_retries_nothing_itself():
    retrying = {where for where, tree in _product_modules()
                if any(isinstance(node, (ast.Import, ast.ImportFrom))
                       and "tenacity" in {getattr(node, "module", None), *(a.name for a in node.names)}
                       for node in ast.walk(tree))}
    committing = {w for w in retrying if w.startswith(("connectors/kafka/sink/", "twophase/lifecycle.py",
                                                       "twophase/participants.py", "twophase/coordinator.py",
                                                       "connectors/spark/sink_driver.py"))}
    assert committing == set(), "retries of the commit path belong to twophase/transaction_endings.py"
    assert "twophase/transaction_endings.py" in retrying
