"""Every error the kit raises derives from one root, and each package keeps its errors in its own
``errors.py``; Spark's wrapped failures are searched for them by the root's class names."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from connectors.kafka.errors import DataLossError, KafkaConnectorError, TransactionLostError
from twophase.errors import KafkaEosError, UnrecoverableCommitError

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("twophase", "connectors")
ERROR_MODULES = {"twophase/errors.py", "connectors/kafka/errors.py", "connectors/spark/errors.py",
                 "connectors/tools/errors.py"}
# Test fault injection, not an error of the kit (it leaves the product path with the executor's
# write task).
NOT_THE_KITS = {"InjectedTaskFailure"}


def _exception_classes() -> list[tuple[str, str]]:
    """(file, class name) of every public exception class the product packages define."""
    found = []
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            module = importlib.import_module(relative[:-3].replace("/", ".").removesuffix(".__init__"))
            for node in ast.parse(path.read_text()).body:
                if isinstance(node, ast.ClassDef) and not node.name.startswith("_") and node.name not in NOT_THE_KITS:
                    defined = getattr(module, node.name)
                    if isinstance(defined, type) and issubclass(defined, BaseException):
                        found.append((relative, node.name))
    return found


@pytest.mark.parametrize("where, name", _exception_classes())
def test_every_exception_of_the_kit_is_under_the_root_and_in_an_errors_module(where, name):
    module = importlib.import_module(where[:-3].replace("/", "."))
    assert issubclass(getattr(module, name), KafkaEosError)
    assert where in ERROR_MODULES, f"{name} belongs in its package's errors.py"


def test_kafka_errors_are_connector_errors():
    assert issubclass(DataLossError, KafkaConnectorError)
    assert issubclass(TransactionLostError, KafkaConnectorError)
    assert issubclass(TransactionLostError, UnrecoverableCommitError)


def test_kit_error_lines_finds_the_kits_errors_by_class_name():
    from connectors.spark.failures import kit_error_lines

    text = ("Traceback (most recent call last):\n"
            "connectors.spark.errors.LostStateError: the query committed batch 7 that the state dir lacks\n"
            "twophase.errors.CheckpointCommitError: checkpoint 3 is stored but ...\n"
            "somelib.errors.LostStateError: not ours, another library's class of the same name\n"
            "ValueError: not ours either\n")
    assert kit_error_lines(text) == ["the query committed batch 7 that the state dir lacks",
                                     "checkpoint 3 is stored but ..."]
