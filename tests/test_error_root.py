"""Every error the kit raises derives from one root, and each package keeps its errors in its own
errors module (``twophase/errors.py``, ``connectors/kafka/kafka_errors.py``, ...); Spark's wrapped failures are searched for them by the root's class names."""

from __future__ import annotations

import ast
import builtins
import importlib
from pathlib import Path

import pytest

from connectors.kafka.kafka_errors import DataLossError, KafkaConnectorError, TransactionLostError
from twophase.errors import KafkaEosError, UnrecoverableCommitError

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("twophase", "connectors")
ERROR_MODULES = {"twophase/errors.py", "connectors/kafka/kafka_errors.py", "connectors/spark/spark_errors.py",
                 "connectors/monitoring/monitoring_errors.py", "connectors/tools/tool_errors.py", "connectors/servers/server_errors.py"}
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
    assert where in ERROR_MODULES, f"{name} belongs in its package's errors module"


def test_kafka_errors_are_connector_errors():
    assert issubclass(DataLossError, KafkaConnectorError)
    # A checkpoint's lost transactions are one error of the core, whatever the sink.
    import twophase.errors
    assert TransactionLostError is twophase.errors.TransactionLostError
    assert issubclass(TransactionLostError, UnrecoverableCommitError)


def test_kit_error_lines_finds_the_kits_errors_by_class_name():
    from connectors.spark.failures import kit_error_lines

    text = ("Traceback (most recent call last):\n"
            "connectors.spark.spark_errors.LostStateError: the query committed batch 7 that the state dir lacks\n"
            "twophase.errors.CheckpointCommitError: checkpoint 3 is stored but ...\n"
            "somelib.errors.LostStateError: not ours, another library's class of the same name\n"
            "ValueError: not ours either\n")
    assert kit_error_lines(text) == ["the query committed batch 7 that the state dir lacks",
                                     "checkpoint 3 is stored but ..."]


# Raises of builtin exceptions that product code may keep, each with why it is not an error of the
# kit's users: (file, exception).
BUILTIN_RAISES_ALLOWED = {
    # Python's protocol for a module's __getattr__ (lazy exports): hasattr() and `from twophase
    # import x` rely on AttributeError.
    ("twophase/__init__.py", "AttributeError"),
    # Raised and retried inside check_reachable (tenacity's retry_if_exception_type), which turns
    # the exhausted retries into BrokerUnreachableError: never leaves the function.
    ("connectors/servers/broker_discovery.py", "ConnectionError"),
    # After a tenacity loop that re-raises its last error: unreachable.
    ("connectors/tools/verify.py", "AssertionError"),
}
_BUILTIN_EXCEPTIONS = {name for name, value in vars(builtins).items()
                       if isinstance(value, type) and issubclass(value, BaseException)}


def _builtin_raises() -> list[tuple[str, int, str]]:
    """(file, line, exception) of each ``raise X(...)`` / ``raise X`` / ``return X(...)`` of a builtin
    exception in product code (a helper that returns an exception for its caller to raise counts)."""
    found = []
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Raise):
                    value = node.exc
                elif isinstance(node, ast.Return):
                    value = node.value
                else:
                    continue
                name = value.func if isinstance(value, ast.Call) else value
                if isinstance(name, ast.Name) and name.id in _BUILTIN_EXCEPTIONS:
                    found.append((relative, node.lineno, name.id))
    return found


def test_product_code_raises_no_bare_builtin_exception():
    """Every error the kit raises to its users derives from KafkaEosError (twophase.errors has the
    general ones, e.g. InvalidValueError for a ValueError): a bare ValueError or RuntimeError would
    escape `except KafkaEosError` and kit_error_lines()."""
    bare = [f"{where}:{line}: {name}" for where, line, name in _builtin_raises()
            if (where, name) not in BUILTIN_RAISES_ALLOWED]
    assert bare == [], "raise an error of the kit's root instead:\n" + "\n".join(bare)


def test_the_allow_list_of_builtin_raises_is_still_needed():
    present = {(where, name) for where, _, name in _builtin_raises()}
    assert BUILTIN_RAISES_ALLOWED <= present, f"no longer raised, drop: {BUILTIN_RAISES_ALLOWED - present}"


@pytest.mark.parametrize("error, builtin", [
    ("InvalidValueError", ValueError), ("InvalidTypeError", TypeError), ("IllegalStateError", RuntimeError),
    ("MissingExtraError", RuntimeError), ("StateStorageError", OSError),
    ("StateFileExistsError", FileExistsError), ("StateFileNotFoundError", FileNotFoundError),
])
def test_the_general_errors_keep_their_builtin_base(error, builtin):
    import twophase.errors

    assert issubclass(getattr(twophase.errors, error), KafkaEosError)
    assert issubclass(getattr(twophase.errors, error), builtin)


def test_an_option_error_is_an_invalid_value():
    from connectors.spark.spark_errors import KafkaEosOptionError
    from twophase.errors import InvalidValueError

    assert issubclass(KafkaEosOptionError, InvalidValueError) and issubclass(KafkaEosOptionError, ValueError)
