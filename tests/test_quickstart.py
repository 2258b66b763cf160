"""The README's quick start runs as written: each script of examples/quickstart_*.py that needs no
jars runs on the kit's embedded cluster and its output is exactly-once (Spark's own source cannot
read the embedded cluster; integration_tests/test_quickstart_on_real_kafka.py runs all three on a
real broker). The README shows the scripts' code as it is in the files."""

from __future__ import annotations

from pathlib import Path

import pytest
from quickstart_runs import REPO, SCRIPTS, readme_block, run_quickstart

from connectors.simulated_kafka import FAKE_SCHEME

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("variant", ["kafka-eos", "foreach-batch"])
def test_a_quickstart_script_is_exactly_once_on_simulated_kafka(variant: str, tmp_path: Path) -> None:
    bootstrap = f"{FAKE_SCHEME}{tmp_path / 'kafka.db'}"
    data = run_quickstart(variant, bootstrap, tmp_path, ("orders", "orders-upper"))
    assert data["exactly_once"] is True, data


def test_the_readme_shows_each_quickstart_script_as_it_is() -> None:
    readme = (REPO / "README.md").read_text()
    for variant, script in SCRIPTS.items():
        assert script.name in readme, variant
    # The first variant in full; the others by the lines that differ, and a link.
    assert readme_block(SCRIPTS["kafka-eos"]) in readme
