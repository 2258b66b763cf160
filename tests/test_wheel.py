"""The wheel is the product (issue 36): built from the project as a user's ``pip install`` builds
it, it holds the product packages and their jobs, launchers and simulated Kafka, nothing only
the tests import (the test kit), and every entry point resolves to a module inside it."""

from __future__ import annotations

import ast
import configparser
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path, PurePosixPath

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: The product packages, the only top-level names in the wheel besides its metadata.
PRODUCT = {"twophase", "connectors"}
#: What the wheel must hold for every command to work from an install: the jobs of demo and
#: replay, the launchers of their broker, the simulated Kafka.
SHIPPED = (
    "connectors/tools/jobs/spark_pipeline.py",
    "connectors/tools/jobs/copy_pipeline.py",
    "connectors/tools/jobs/job_hold.py",
    "connectors/tools/jobs/task_failures.py",
    "connectors/servers/local_broker.py",
    "connectors/servers/local_cluster.py",
    "connectors/servers/kafka_distribution.py",
    "connectors/servers/maven_artifacts.py",
    "connectors/simulated_kafka/__init__.py",
    "connectors/simulated_kafka/fake_kafka.py",
    "connectors/simulated_kafka/clients.py",
    "connectors/simulated_kafka/transactions.py",
    "connectors/simulated_kafka/logs.py",
    "connectors/simulated_kafka/store.py",
    "connectors/simulated_kafka/records.py",
    # The JVM provider of format("kafka-eos") in update mode, compiled by setup.py (never committed).
    "connectors/spark/jvm/kafka-eos-spark-provider.jar",
    # The aligned write's SQL functions, compiled by setup.py for Java 8 (never committed).
    "connectors/spark/jvm/kafka-eos-spark-functions.jar",
)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    """The wheel ``pip wheel`` builds from a copy of the checkout (so the build leaves nothing in
    it); the copy holds the test kit, the tests and the examples too, which the wheel must not."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"
    source.mkdir()
    for name in ("twophase", "connectors", "kafka_testkit", "examples", "bench", "integration_tests", "tests"):
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / name, source / name)
    out = work / "dist"
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "--disable-pip-version-check", "-w", str(out),
             str(source)]
    built = subprocess.run(build, capture_output=True, text=True, timeout=600)
    if built.returncode != 0:  # no index to fetch the build backend from: this environment's setuptools
        built = subprocess.run([*build[:4], "--no-build-isolation", *build[4:]], capture_output=True, text=True,
                               timeout=600)
    assert built.returncode == 0, built.stderr[-2000:]
    (found,) = out.glob("pyspark_kafka_eos-*.whl")
    return zipfile.ZipFile(found)


def _modules(wheel: zipfile.ZipFile) -> dict[str, str]:
    """Module name -> source, for every .py file in the wheel."""
    found = {}
    for name in wheel.namelist():
        if name.endswith(".py"):
            module = PurePosixPath(name).with_suffix("").as_posix().replace("/", ".").removesuffix(".__init__")
            found[module] = wheel.read(name).decode()
    return found


def _dist_info(wheel: zipfile.ZipFile, file: str) -> str:
    (name,) = [n for n in wheel.namelist() if n.endswith(f".dist-info/{file}")]
    return wheel.read(name).decode()


def _top_level_names(source: str) -> set[str]:
    names = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {target.id for target in node.targets if isinstance(target, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def test_the_wheel_holds_the_product_packages_only(wheel):
    tops = {name.split("/")[0] for name in wheel.namelist()}
    assert {top for top in tops if not top.endswith(".dist-info")} == PRODUCT
    assert not [name for name in wheel.namelist() if "kafka_testkit" in name or name.startswith(("tests/", "examples/"))]


def test_the_wheel_holds_the_jobs_the_launchers_and_simulated_kafka(wheel):
    names = set(wheel.namelist())
    assert [path for path in SHIPPED if path not in names] == []


def test_every_import_of_the_kit_in_the_wheel_resolves_inside_it(wheel):
    """No module of the wheel reaches the test kit, or a kit module the wheel lacks."""
    modules = _modules(wheel)
    unresolved = []
    for module, source in modules.items():
        for node in ast.walk(ast.parse(source)):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import) else
                     [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
                     if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else [])
            for name in names:
                top = name.split(".")[0]
                if top == "kafka_testkit":
                    unresolved.append(f"{module} imports the test kit ({name})")
                elif top in PRODUCT and name not in modules and name.rpartition(".")[0] not in modules:
                    unresolved.append(f"{module} imports {name}, which the wheel lacks")
    assert unresolved == []


def test_every_entry_point_resolves_to_a_module_inside_the_wheel(wheel):
    modules = _modules(wheel)
    entry_points = configparser.ConfigParser()
    entry_points.optionxform = str  # keep the names' case
    entry_points.read_string(_dist_info(wheel, "entry_points.txt"))
    groups = set(entry_points.sections())
    assert {"console_scripts", "pyspark_kafka_eos.kafka_clients", "pyspark_kafka_eos.kafka_launchers"} <= groups
    for group in groups:
        for name, value in entry_points[group].items():
            module, _, attribute = value.partition(":")
            assert module in modules, f"{group} {name} = {value}: no module {module} in the wheel"
            defined = _top_level_names(modules[module])
            assert attribute.split(".")[0] in defined, f"{group} {name} = {value}: {module} defines no {attribute}"


def test_the_wheel_holds_the_jvm_provider_compiled_from_its_source(wheel):
    """The jar that register() puts into the driver: the provider's classes, Java 17 bytecode (the
    lowest JDK Spark 4 runs on), and the service file by which Spark finds it."""
    import io

    from connectors.spark.jvm_provider import PROVIDER_CLASS

    with zipfile.ZipFile(io.BytesIO(wheel.read("connectors/spark/jvm/kafka-eos-spark-provider.jar"))) as jar:
        names = set(jar.namelist())
        service = jar.read("META-INF/services/org.apache.spark.sql.sources.DataSourceRegister").decode().split()
        main_class = jar.read(PROVIDER_CLASS.replace(".", "/") + ".class")
    assert service == [PROVIDER_CLASS]
    assert int.from_bytes(main_class[6:8], "big") == 61  # class file major version 61: Java 17
    assert {name for name in names if name.endswith(".class")} >= {
        "kafkaeos/spark/KafkaEosTableProvider.class", "kafkaeos/spark/KafkaEosTableProvider$UpdatableTable.class",
        "kafkaeos/spark/KafkaEosTableProvider$UpdatableWriteBuilder.class"}


def test_the_wheel_holds_the_aligned_writes_functions_for_java_8(wheel):
    """The jar of the functions the foreachBatch sink repartitions by (aligned_write.py): Java 8
    bytecode, the oldest Java that Spark 3.5 runs on, since the functions run on executors of every line."""
    import io

    from connectors.spark.aligned_write import FUNCTION_CLASSES

    with zipfile.ZipFile(io.BytesIO(wheel.read("connectors/spark/jvm/kafka-eos-spark-functions.jar"))) as jar:
        for class_name in FUNCTION_CLASSES.values():
            code = jar.read(class_name.replace(".", "/") + ".class")
            assert int.from_bytes(code[6:8], "big") == 52, class_name  # class file major version 52: Java 8
