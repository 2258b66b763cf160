"""pytest imports test modules by their basename (its default ``prepend`` import mode, with no
``__init__.py`` in the test folders): two test files of one name, in ``tests/`` and
``integration_tests/``, stop a plain ``pytest`` (README command 2, CI) at collection."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_no_two_test_modules_share_a_name():
    by_name: dict[str, list[str]] = defaultdict(list)
    for folder in ("tests", "integration_tests"):
        for path in (ROOT / folder).rglob("*.py"):
            if path.name not in ("__init__.py", "conftest.py"):
                by_name[path.name].append(path.relative_to(ROOT).as_posix())
    shared = {name: paths for name, paths in by_name.items() if len(paths) > 1}
    assert not shared, f"test modules share a name, which pytest cannot collect together: {shared}"
