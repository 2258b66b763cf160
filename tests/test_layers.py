"""No import runs from a lower package to a higher one, lazy imports inside functions included:
``twophase`` (the protocol core) imports no other package of the kit, the Kafka connector only
the core, the Spark adapter, the servers (``connectors.servers``: what finds or starts a Kafka)
and the simulated Kafka (``connectors.simulated_kafka``) those two and not each other (two
packages of one layer may not import each other), monitoring those below it, and the CLI any of
them. No product module imports the test kit (the CLI finds its launchers by entry point), and
the test kit (``kafka_testkit/`` and ``integration_tests/conftest.py``)
imports nothing of the CLI: it starts its brokers and servers with ``connectors.servers``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: Each package of the kit, from the bottom up.
LAYERS = {
    "twophase": 0,
    "connectors.worker_python": 0,  # runs before pyspark is importable: imports nothing of the kit
    "connectors.kafka": 1,
    "connectors.spark": 2,
    "connectors.servers": 2,  # brokers, clusters, child processes; the CLI, the test kit and bench/ use it
    # fake-kafka://: implements connectors.kafka's client seam, so above it; no product module
    # imports it (the client factory and the CLI find it by entry point), so the lowest layer above
    # connectors.kafka, where the Spark adapter and the servers may not import it nor it them.
    "connectors.simulated_kafka": 2,
    "connectors.monitoring": 3,
    "connectors.tools": 4,
}


def _package(module: str) -> str | None:
    """The layer ``module`` belongs to, or None for a module outside the kit."""
    for name in sorted(LAYERS, key=len, reverse=True):
        if module == name or module.startswith(name + "."):
            return name
    return None


def _imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # "from connectors import worker_python" imports the module named by both parts.
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def _modules() -> list[Path]:
    return sorted(p for package in ("twophase", "connectors") for p in (ROOT / package).rglob("*.py"))


def violations(module: str, path: Path) -> list[str]:
    """What in ``path`` (the source of ``module``) imports up a layer or the test kit."""
    own = _package(module)
    if own is None:
        # Only the namespace's own __init__ is in no layer; it may import nothing of the kit.
        assert module == "connectors", f"{module} is in no layer: add its package to LAYERS"
        return [f"{module}:{line} imports {imported}" for line, imported in _imports(path)
                if _package(imported) or imported.startswith("kafka_testkit")]
    found = []
    for line, imported in _imports(path):
        target = _package(imported)
        if imported.startswith("kafka_testkit"):
            found.append(f"{module}:{line} imports the test kit ({imported})")
        elif target is not None and target != own and LAYERS[target] >= LAYERS[own]:
            found.append(f"{module}:{line} imports {imported}, from {own} (layer {LAYERS[own]}) up to {target} "
                         f"(layer {LAYERS[target]})")
    return found


@pytest.mark.parametrize("path", _modules(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_import_runs_up_a_layer_or_into_the_test_kit(path: Path) -> None:
    module = path.relative_to(ROOT).with_suffix("").as_posix().replace("/", ".").removesuffix(".__init__")
    assert violations(module, path) == []


def test_the_check_sees_an_import_that_runs_up(tmp_path: Path) -> None:
    source = tmp_path / "failures.py"
    source.write_text("import connectors.kafka.kafka_errors\n\n\ndef f():\n    from connectors.tools import tool_errors\n"
                      "    import kafka_testkit.memory_system\n")
    found = violations("connectors.spark.failures", source)
    assert found == [
        "connectors.spark.failures:5 imports connectors.tools.tool_errors, from connectors.spark (layer 2) up to "
        "connectors.tools (layer 4)",
        "connectors.spark.failures:6 imports the test kit (kafka_testkit.memory_system)",
    ]
    assert _package("connectors.kafkaesque") is None


def test_two_packages_of_one_layer_may_not_import_each_other(tmp_path: Path) -> None:
    source = tmp_path / "spark_module.py"
    source.write_text("from connectors.servers.broker_discovery import find_broker\nimport connectors.spark.failures\n")
    assert LAYERS["connectors.spark"] == LAYERS["connectors.servers"]
    assert violations("connectors.spark.spark_module", source) == [
        "connectors.spark.spark_module:1 imports connectors.servers.broker_discovery.find_broker, from "
        "connectors.spark (layer 2) up to connectors.servers (layer 2)",
    ]


#: The test kit: it builds on the product's servers, never on the CLI, which is a product under test.
#: The integration tests' other helpers (spark_job.py, stateful_runs.py, kafka_io.py, ...) run the
#: CLI's own jobs, loader and verify as the thing they test, and may import them.
TEST_KIT = sorted([*(ROOT / "kafka_testkit").rglob("*.py"), ROOT / "integration_tests" / "conftest.py"])


@pytest.mark.parametrize("path", TEST_KIT, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_the_test_kit_imports_nothing_of_the_cli(path: Path) -> None:
    cli = [f"{path.relative_to(ROOT).as_posix()}:{line} imports {imported}" for line, imported in _imports(path)
           if _package(imported) == "connectors.tools"]
    assert cli == [], "start brokers and servers with connectors.servers, not the CLI"
