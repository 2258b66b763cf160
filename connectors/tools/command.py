"""The ``kafka-eos`` console script's entry: the command-line tools need the ``tools`` extra
(rich, matplotlib, prometheus-client, testcontainers, docker, javaproperties), which a lean install
(what Spark executors need) leaves out. Without it, ``kafka-eos`` says in one line how to add it instead of
failing with a traceback. This module imports only the standard library."""

from __future__ import annotations

import importlib.util
import sys
from typing import Sequence

EXTRA = "tools"
INSTALL = f"pip install 'pyspark-kafka-eos[{EXTRA}]'"
#: The import names of the extra's packages.
TOOLS_MODULES = ("rich", "matplotlib", "prometheus_client", "testcontainers", "docker", "javaproperties")


def missing_tools_modules() -> list[str]:
    return [name for name in TOOLS_MODULES if importlib.util.find_spec(name) is None]


def main(argv: Sequence[str] | None = None) -> int:
    missing = missing_tools_modules()
    if missing:
        print(f"kafka-eos: the command-line tools need the '{EXTRA}' extra ({', '.join(missing)} not installed): "
              f"{INSTALL}", file=sys.stderr)
        return 2
    from connectors.tools.cli import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
