"""The ``kafka-eos`` console script's entry: the command-line tools need the ``tools`` extra
(rich, matplotlib, prometheus-client, testcontainers, docker, javaproperties), which a lean install
(what Spark executors need) leaves out. Without it, ``kafka-eos --help`` still lists the commands
and names the extra they need, ``kafka-eos --version`` still answers, and a command says in one
line how to add the extra instead of failing with a traceback. This module imports only the
standard library.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
from typing import Sequence

#: The distribution whose version ``--version`` prints.
DISTRIBUTION = "pyspark-kafka-eos"
EXTRA = "tools"
INSTALL = f"pip install '{DISTRIBUTION}[{EXTRA}]'"
#: The import names of the extra's packages.
TOOLS_MODULES = ("rich", "matplotlib", "prometheus_client", "testcontainers", "docker", "javaproperties")
#: Each command's one line, for the full parser (``cli.build_parser``) and the lean help alike.
COMMAND_HELP = {
    "verify": "check that an output topic holds every input record exactly once",
    "load": "load a topic with records that carry unique ids",
    "create-topic": "create a topic (e.g. a job's output topic); no error if it exists",
    "replay": "run a job under injected faults, restart it, verify each scenario",
    "demo": "find or start a broker, load, replay a few faults, verify, report",
    "broker": "start Kafka on 127.0.0.1 (Docker, KAFKA_HOME or Maven Central) and keep it until stopped",
    "transactions": "list a sink's transactional ids and open transactions",
    "status": "an exactly-once query's commits, pending checkpoint, open transactions and lag; exit 1 when it "
              "needs attention",
    "jvm-class-archive": "record a class archive that halves the Spark driver JVM's start",
}


def version() -> str:
    """The installed distribution's version (importlib.metadata)."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


def version_line() -> str:
    return f"kafka-eos {version()} ({DISTRIBUTION})"


def missing_tools_modules() -> list[str]:
    return [name for name in TOOLS_MODULES if importlib.util.find_spec(name) is None]


def lean_help(missing: Sequence[str]) -> str:
    """``kafka-eos --help`` without the tools extra: the commands, and the extra they need."""
    width = max(map(len, COMMAND_HELP))
    lines = ["usage: kafka-eos [-h] [--version] [--log-level LEVEL] COMMAND ...", "",
             "Prove exactly-once Kafka-to-Kafka delivery on your own cluster.", "", "commands:"]
    lines += [f"  {name:<{width}}  {text}" for name, text in COMMAND_HELP.items()]
    lines += ["", f"Every command needs the '{EXTRA}' extra, which is not installed ({', '.join(missing)} missing):",
              f"  {INSTALL}"]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    command = next((word for word in args if not word.startswith("-")), None)
    if "--version" in args[:args.index(command) if command in args else len(args)]:
        print(version_line())
        return 0
    missing = missing_tools_modules()
    if missing:
        if command is None:
            asked = any(word in ("-h", "--help") for word in args)
            print(lean_help(missing), file=sys.stdout if asked else sys.stderr)
            return 0 if asked else 2
        needs = f"kafka-eos {command}" if command in COMMAND_HELP else "kafka-eos"
        print(f"{needs}: the command-line tools need the '{EXTRA}' extra ({', '.join(missing)} not installed): "
              f"{INSTALL}", file=sys.stderr)
        return 2
    from connectors.tools.cli import main as cli_main

    return cli_main(args)


if __name__ == "__main__":
    sys.exit(main())
