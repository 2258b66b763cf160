"""Ending transactions has one loop and one retry layer (``twophase/transaction_endings.py``):
no other product module ends a sink's transactions in a loop of its own or retries an ending.
Each layer has a name of its own: the loop (``end_transactions``), a committer's attempt
(``attempt_endings``), an EndTxn round (``end_txn_round``) and one client call (``end_txn``).
Found from the source: every call of each layer, and every use of tenacity."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("twophase", "connectors")
LOOP = {"end_transactions"}
ATTEMPT = {"attempt_endings"}
END_TXN = {"end_txn_round", "end_txn"}


def _product_modules():
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), ast.parse(path.read_text())


def _calls(tree, names):
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call)
            and (getattr(node.func, "attr", None) in names or getattr(node.func, "id", None) in names)]


def _callers(names):
    # The simulated Kafka is a broker, not a sink: its EndTxn ends what a client asks it to.
    return {where for where, tree in _product_modules() if _calls(tree, names)
            and not where.startswith("connectors/simulated_kafka/")}


def test_transactions_are_ended_only_through_the_one_loop():
    assert _callers(LOOP) == {
        "twophase/lifecycle.py",  # commit, recovery, abort and sweep call the loop
    }, sorted(_callers(LOOP))
    assert _callers(ATTEMPT) == {
        "twophase/transaction_endings.py",  # the loop: a committer's one attempt at each transaction
    }, sorted(_callers(ATTEMPT))
    assert _callers(END_TXN) == {
        "connectors/kafka/sink/committer.py",  # an attempt: one EndTxn round per id's turn
        "connectors/kafka/clients/_kafka_python/transaction_control.py",  # EndTxn of one id, as a round of one
        "connectors/tools/loader.py",  # the load tool ends the one test-data transaction it wrote
    }, sorted(_callers(END_TXN))


def test_each_layer_has_one_name():
    """No product function is named after another layer's verb: the loop's name is the loop's."""
    defined: dict[str, set[str]] = {}
    for where, tree in _product_modules():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in LOOP | ATTEMPT | END_TXN:
                defined.setdefault(node.name, set()).add(where.split("/")[0] + "/" + where.split("/")[1])
    assert defined["end_transactions"] == {"twophase/transaction_endings.py"}
    assert defined["attempt_endings"] == {"twophase/transaction_endings.py", "connectors/kafka"}
    assert all(where.startswith("connectors/") for name in END_TXN for where in defined[name])


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
