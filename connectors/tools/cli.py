"""The ``kafka-eos`` console script: ``verify``, ``load``, ``create-topic``, ``replay``, ``demo``,
``broker``, ``transactions``, ``status`` and ``jvm-class-archive`` (one line each:
:data:`connectors.tools.command.COMMAND_HELP`).

Exit status: 0 when everything checked is exactly-once (or, for the transaction-timeout
scenario, the loss was detected and reported); 1 when an anomaly or a failed scenario was found;
2 for a usage or environment problem (for ``status``: what it must read cannot be read) (no broker, unreachable broker, unknown topic, bad id field,
missing permissions), which gets one clear message and no traceback; 130 when interrupted.

``demo`` without a broker runs on the kit's embedded test cluster instead of exiting 2 (unless
``--require-broker``); the simulated-Kafka notice is then the first and the last thing it prints.
``replay`` and ``verify`` use the embedded cluster only when given its ``fake-kafka://`` address.

Every command that talks to Kafka takes ``--command-config FILE`` (a Java client properties file,
as Kafka's own tools take it) and ``--client-config KEY=VALUE``, which overrides the file's; see
:mod:`connectors.tools.client_settings`. ``replay`` and ``demo`` take them only for a cluster the
user names (``--bootstrap``, ``KAFKA_BOOTSTRAP_SERVERS``), and pass them on to the Spark job in a
private file.

``broker`` starts Kafka as ``demo`` does when it finds none and keeps it running until Ctrl-C or
SIGTERM, for the quick start and for CI; it prints the bootstrap address (and writes it to
``--bootstrap-file``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Sequence

from rich.console import Console
from rich.logging import RichHandler
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from connectors.kafka.clients.factory import clients_for
from connectors.kafka.kafka_errors import BrokerUnavailableError, KafkaConnectorError, UnknownTopicError
from connectors.servers.broker_discovery import (
    KAFKA_VERSION_ENV,
    REAL_BROKER_HELP,
    SIMULATED_NOTICE,
    check_reachable,
    cluster_broker,
    find_broker,
)
from connectors.servers.server_errors import BrokerUnreachableError, NoBrokerError
from connectors.monitoring.monitoring_errors import StatusUnavailableError
from connectors.tools.tool_errors import (
    IdFieldError,
    IdSpecError,
    JobTemplateError,
    TopicNotFoundError,
    UsageError,
)
from connectors.tools.client_settings import ClientSettings, add_client_options, from_args
from connectors.tools.command import COMMAND_HELP, version_line
from connectors.tools.demo import DemoOptions, demo_broker, run_demo
from connectors.tools.replay_jobs import ENGINES, JobTemplate
from connectors.tools.loader import load_input
from connectors.tools.replay import (
    DEMO_SCENARIOS,
    INCONCLUSIVE,
    PASSED,
    SKIPPED,
    Replay,
    ReplayOptions,
    ReplayResult,
    parse_scenarios,
)
from connectors.tools.report import COLUMNS, ReportFiles, overall, table_rows, title, write_reports
from connectors.monitoring.status import QueryStatus, attention_reasons, read_status
from connectors.tools.transactions import sink_footprint
from connectors.tools.shape_checks import SHAPE_HELP, ShapeReport, check_shape_name
from connectors.tools.verify import (
    EventTimeSpec,
    IdSpec,
    ProgressCallback,
    VerifyReport,
    check_right_input,
    verify,
    verify_shape,
)

log = logging.getLogger("kafka-eos")

EXIT_OK, EXIT_ANOMALY, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130

# Wide when not a terminal (CI logs, files): the report table would be folded into 80 columns.
out = Console(width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 200, log_path=False)


# -- argument types ------------------------------------------------------------------------------

def _id_spec(text: str) -> str:
    try:
        IdSpec.parse(text)
    except IdSpecError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _scenarios(text: str) -> list[str]:
    try:
        return parse_scenarios(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _count(text: str, minimum: int = 0) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"{text} must be >= {minimum}")
    return value


def _positive_int(text: str) -> int:
    """An integer >= 0 (a count where none is meaningful: aborted records, samples)."""
    return _count(text, 0)


def _at_least_one(text: str) -> int:
    """An integer >= 1: records to load and replay (none would make an empty PASSED), a batch size."""
    return _count(text, 1)


def _partitions(text: str) -> int:
    return _count(text, 1)


def _kafka_version(text: str) -> str:
    value = text.strip()
    if not value or not all(part.isdigit() for part in value.split(".")) or value.count(".") > 2:
        raise argparse.ArgumentTypeError(f"{text!r} is not a Kafka version: use 4 (the newest 4.x), 3.9 (the newest "
                                         "3.9.x) or an exact one such as 4.1.0")
    return value


def _rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text} must be between 0 and 1")
    return value


# -- the parser ----------------------------------------------------------------------------------

def _add_id_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--id-field", type=_id_spec, default="key",
                        help="where a record's id is: key, json:<field> or header:<name> (default: key)")
    parser.add_argument("--output-id-field", type=_id_spec, default=None,
                        help="where an output record's id is, if not where the input's is")
    parser.add_argument("--check-order", action="store_true",
                        help="also report per-partition order violations (for pipelines that keep order)")


def _shape(text: str) -> str:
    try:
        return check_shape_name(text)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _event_time(text: str) -> str:
    try:
        EventTimeSpec.parse(text)
    except IdSpecError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _add_shape_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--shape", type=_shape, default=None,
                        help=f"check the output of a stateful query by its shape's invariant instead of record by "
                             f"record: {SHAPE_HELP} (docs/exactly-once.md); the input's key is at --id-field, the "
                             "output's at --output-id-field (default: key)")
    parser.add_argument("--event-time-field", type=_event_time, default="timestamp",
                        help="with a windowed --shape: where an input record's event time is, timestamp (the record "
                             "timestamp) or json:<field> (epoch seconds or ISO-8601); default: timestamp")


def _add_kafka_version(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kafka-version", type=_kafka_version, default=None, metavar="VERSION",
                        help=f"the Kafka the kit starts from Maven Central when it finds no broker: 4 (the newest "
                             f"4.x), 3.9, or an exact version; default: ${KAFKA_VERSION_ENV}, else 4")


def _add_job_options(parser: argparse.ArgumentParser, kills: int) -> None:
    job = parser.add_mutually_exclusive_group()
    job.add_argument("--engine", choices=sorted(ENGINES), default="spark",
                     help="which of the kit's jobs to run: spark (default, the Spark pipeline, "
                          "connectors/tools/jobs/spark_pipeline.py) or inprocess (copy_pipeline.py there, no Spark, "
                          "much faster to start)")
    job.add_argument("--job-command", default=None, metavar="TEMPLATE",
                     help="your own job, e.g. 'spark-submit my_job.py --bootstrap {bootstrap} --input {input} "
                          "--output {output} --checkpoint-dir {checkpoint_dir}' ({metrics_file} optional)")
    parser.add_argument("--scenarios", type=_scenarios, default=None,
                        help="all, demo, or a comma-separated list of scenario names")
    parser.add_argument("--seed", type=int, default=1, help="seed of every random choice (default: 1)")
    parser.add_argument("--kills", type=_positive_int, default=kills,
                        help=f"kill -9s in the kill9 scenario, one per run (default: {kills})")
    parser.add_argument("--checkpoint-interval", type=float, default=0.2,
                        help="seconds between time-triggered checkpoints of the in-process job (which also "
                             "checkpoints after every --batch-records records), {checkpoint_interval} of a "
                             "job command (default: 0.2)")
    parser.add_argument("--batch-records", type=_at_least_one, default=None,
                        help="records per poll and per checkpoint (in-process) or per micro-batch (Spark), "
                             "{batch_records} of a job command (default: 500 in-process, 2000 Spark); "
                             "failpoint hits are planned from it")
    parser.add_argument("--run-timeout", type=float, default=600.0,
                        help="seconds one run of the job may take before it is killed (default: 600)")
    parser.add_argument("--reports-dir", type=Path, default=Path("reports"),
                        help="where report.md, report.json and commit-latency.png go (default: ./reports)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kafka-eos", description="Prove exactly-once Kafka-to-Kafka delivery on your own cluster.")
    parser.add_argument("--version", action="version", version=version_line())
    parser.add_argument("--log-level", default="WARNING", type=str.upper,
                        choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="library log level (default: WARNING)")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    v = commands.add_parser("verify", help=COMMAND_HELP["verify"],
                            description="Exit 0 only when the output is exactly-once.")
    v.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers (host:port[,host:port])")
    v.add_argument("--input", required=True, help="input topic")
    v.add_argument("--output", required=True, help="output topic")
    _add_id_options(v)
    _add_shape_options(v)
    v.add_argument("--right-input", default=None, metavar="TOPIC", help="with --shape join: the join's other input")
    v.add_argument("--json-report", type=Path, default=None, help="also write the JSON report here")
    v.add_argument("--json", action="store_true", help="print the JSON report instead of the summary")
    v.add_argument("--max-samples", type=_positive_int, default=10, help="example ids per anomaly")
    v.add_argument("--retry-timeout", type=float, default=30.0, metavar="SECONDS",
                   help="how long to retry a broker that answers with transient errors (default: 30)")
    add_client_options(v)

    load = commands.add_parser("load", help=COMMAND_HELP["load"])
    load.add_argument("--bootstrap", required=True)
    load.add_argument("--topic", required=True)
    load.add_argument("--records", type=_positive_int, default=20_000)
    load.add_argument("--partitions", type=_partitions, default=3)
    load.add_argument("--aborted", type=_positive_int, default=50, help="records in one aborted transaction")
    add_client_options(load)

    create = commands.add_parser("create-topic", help=COMMAND_HELP["create-topic"])
    create.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers (host:port[,host:port])")
    create.add_argument("--topic", required=True)
    create.add_argument("--partitions", type=_partitions, default=3)
    add_client_options(create)

    r = commands.add_parser("replay", help=COMMAND_HELP["replay"])
    r.add_argument("--bootstrap", default=None,
                   help="Kafka bootstrap servers; default: KAFKA_BOOTSTRAP_SERVERS, Docker, KAFKA_HOME, or Kafka "
                        "from Maven Central")
    r.add_argument("--cluster", action="store_true",
                   help="run against a 3-node cluster: KAFKA_EOS_CLUSTER_BOOTSTRAP_SERVERS, or three nodes started "
                        "from KAFKA_HOME or Maven Central (which scenario rolling_restart bounces one at a time)")
    _add_kafka_version(r)
    r.add_argument("--input", required=True, help="input topic (created and loaded with --load)")
    r.add_argument("--load", type=_at_least_one, default=None, metavar="N",
                   help="first load N records with unique ids into --input")
    r.add_argument("--partitions", type=_partitions, default=3, help="partitions of a topic --load creates")
    r.add_argument("--output-prefix", default=None, help="output topics are PREFIX-<scenario>")
    _add_id_options(r)
    _add_shape_options(r)
    _add_job_options(r, kills=3)
    add_client_options(r)

    t = commands.add_parser("transactions", help=COMMAND_HELP["transactions"],
                            description="What a sink costs the broker: its transactional ids in any state "
                                        "(each kept until transactional.id.expiration.ms) and its open "
                                        "transactions (each holding back read_committed consumers).")
    t.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers (host:port[,host:port])")
    t.add_argument("--prefix", required=True,
                   help="transactional id prefix (eos.transactionalIdPrefix; a trailing '-' is added)")
    t.add_argument("--json", action="store_true", help="print JSON instead of the summary")
    add_client_options(t)

    s = commands.add_parser("status", help=COMMAND_HELP["status"],
                            description="Reads the query's checkpoint, the sink's state and the broker. Exit 0: "
                                        "healthy; 1: needs attention (one reason per line); 2: cannot read what "
                                        "it needs.")
    s.add_argument("--checkpoint-location", required=True, metavar="LOC",
                   help="the query's checkpointLocation (a path or a URI: s3://, abfss://, gs://, hdfs://, ...)")
    s.add_argument("--state-dir", default=None, metavar="URI",
                   help="the sink's eos.stateDir, when set (default: <checkpoint-location>/kafka-eos)")
    s.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers (host:port[,host:port])")
    add_client_options(s)
    shape = s.add_mutually_exclusive_group()
    shape.add_argument("--json", action="store_true", help="print JSON instead of the tables")
    shape.add_argument("--prometheus", action="store_true",
                       help="print Prometheus metrics (text format) instead of the tables, for node-exporter's "
                            "textfile collector or a push gateway")
    s.add_argument("--plot", type=Path, default=None, metavar="FILE.png",
                   help="also draw the retained history (commit time and its parts, records, open "
                        "transactions' age) into this PNG")

    j = commands.add_parser("jvm-class-archive", help=COMMAND_HELP["jvm-class-archive"],
                            description="Runs a small Spark job in a JVM of its own and records the classes it "
                                        "loaded into PATH; give the driver "
                                        "spark.driver.extraJavaOptions=-XX:SharedArchiveFile=PATH "
                                        "-XX:+VerifySharedSpaces (printed at the end). Make it again after a "
                                        "JDK or Spark upgrade: an archive of another JDK or classpath is ignored.")
    j.add_argument("path", type=Path, help="where to write the archive (about 160 MB)")
    j.add_argument("--master", default="local[2]", help="the Spark master of the recording job (default: local[2])")

    b = commands.add_parser("broker", help=COMMAND_HELP["broker"],
                            description="Starts Apache Kafka on 127.0.0.1 as demo and replay do when they find no "
                                        "broker (a Docker container, KAFKA_HOME, or the official jars from Maven "
                                        "Central), prints its bootstrap address, and keeps it running until Ctrl-C "
                                        "or SIGTERM, which stop it. KAFKA_BOOTSTRAP_SERVERS is ignored.")
    _add_kafka_version(b)
    b.add_argument("--bootstrap-file", type=Path, default=None, metavar="FILE",
                   help="also write the bootstrap address to FILE once the broker answers (for scripts)")

    d = commands.add_parser("demo", help=COMMAND_HELP["demo"])
    d.add_argument("--bootstrap", default=None,
                   help="Kafka bootstrap servers; default: KAFKA_BOOTSTRAP_SERVERS, Docker, KAFKA_HOME, or Kafka "
                        "from Maven Central")
    d.add_argument("--records", type=_at_least_one, default=20_000, help="input records, >= 1 (default: 20000)")
    d.add_argument("--partitions", type=_partitions, default=3)
    d.add_argument("--require-broker", action="store_true",
                   help="exit with status 2 when no broker is found, instead of running on the kit's "
                        "embedded test cluster (simulated Kafka)")
    _add_kafka_version(d)
    # One kill: each one costs the Spark example a restart, and one shows the recovery.
    _add_job_options(d, kills=1)
    add_client_options(d)
    return parser


# -- progress and output -------------------------------------------------------------------------

@contextmanager
def _progress() -> Iterator[Progress]:
    progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), console=err, transient=False, disable=not err.is_terminal)
    with progress:
        yield progress


def _progress_callback(progress: Progress) -> ProgressCallback:
    tasks: dict[str, int] = {}

    def update(phase: str, done: int, total: int | None) -> None:
        if phase not in tasks:
            tasks[phase] = progress.add_task(phase, total=total)
        progress.update(tasks[phase], completed=done, total=total)

    return update


def _event_callback(progress: Progress) -> Callable[[str], None]:
    def event(message: str) -> None:
        progress.console.log(message, markup=False, highlight=False)
    return event


def _print_verify(report: VerifyReport | ShapeReport) -> None:
    lines = report.summary_lines()
    out.print(lines[0], style="bold green" if report.exactly_once else "bold red", markup=False,
              highlight=False)
    for line in lines[1:]:
        out.print(line, markup=False, highlight=False)


def _print_table(result: ReplayResult) -> None:
    table = Table(title=f"{title(result)}: {result.engine} engine, seed {result.seed}", show_lines=False)
    for column in COLUMNS:
        table.add_column(column, overflow="fold")
    for scenario, row in zip(result.scenarios, table_rows(result)):
        # By status, not wording: an intended, reported loss is green, an inconclusive one yellow.
        style = {PASSED: "green", SKIPPED: "yellow", INCONCLUSIVE: "yellow"}.get(scenario.status, "red")
        # Text, not markup: a topic name or an error message may contain brackets.
        table.add_row(*(Text(cell) for cell in row[:-1]), Text(row[-1], style=style))
    out.print(table)
    word, why = overall(result)
    line = Text(word, style="bold green" if result.passed else "bold red")
    if why:
        line.append(f": {why}")
    out.print(line, soft_wrap=True)


def _print_simulated_notice(detail: str | None = None) -> None:
    """The embedded cluster's label, loud; the first and the last thing a simulated run prints."""
    out.print(SIMULATED_NOTICE, style="bold yellow", markup=False, highlight=False)
    if detail:
        out.print(detail, markup=False, highlight=False)


def _settings(args: argparse.Namespace) -> ClientSettings:
    """The command's client settings: --command-config's, overridden by --client-config's."""
    return from_args(args)


def _settings_for_found_broker(args: argparse.Namespace, template: JobTemplate) -> ClientSettings:
    """replay's and demo's settings, which are for a cluster the user names: a broker the kit
    finds or starts itself (Docker, KAFKA_HOME, Maven Central, the embedded cluster) takes none;
    nor does the in-process example (checked here too, before anything is started or loaded)."""
    settings = _settings(args)
    if not settings:
        return settings
    if template.engine == "inprocess":
        raise UsageError(f"{' and '.join(settings.sources)} are not for --engine inprocess: "
                         "the in-process copy_pipeline takes no client settings; use --engine spark (the default), "
                         "or --job-command with a job that takes its own settings")
    named = (os.environ.get("KAFKA_EOS_CLUSTER_BOOTSTRAP_SERVERS", "").strip() if getattr(args, "cluster", False)
             else args.bootstrap or os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip())
    if not named:
        raise UsageError(f"{' and '.join(settings.sources)} need --bootstrap: client settings are for a cluster you "
                         "name, while a broker the kit starts (Docker, KAFKA_HOME, Maven Central) takes none")
    return settings


def _template(args: argparse.Namespace) -> JobTemplate:
    if args.job_command:
        return JobTemplate.custom(args.job_command)
    return JobTemplate.for_engine(args.engine)


# -- commands ------------------------------------------------------------------------------------

def cmd_verify(args: argparse.Namespace) -> int:
    check_reachable(args.bootstrap)
    clients = clients_for(args.bootstrap, _settings(args).values)
    report: VerifyReport | ShapeReport
    check_right_input(args.shape, args.right_input)
    if args.shape and args.check_order:
        raise UsageError("--check-order is for copy jobs: with --shape the output is read per partition in offset "
                         "order already, and its shape's invariant is what is checked")
    with _progress() as progress:
        if args.shape:
            report = verify_shape(clients, args.input, args.output, args.shape, id_spec=args.id_field,
                                  output_id_spec=args.output_id_field or "key", event_time=args.event_time_field,
                                  right_input_topic=args.right_input, max_samples=args.max_samples,
                                  progress=_progress_callback(progress), retry_timeout_s=args.retry_timeout)
        else:
            report = verify(clients, args.input, args.output, id_spec=args.id_field,
                            output_id_spec=args.output_id_field, check_order=args.check_order,
                            max_samples=args.max_samples, progress=_progress_callback(progress),
                            retry_timeout_s=args.retry_timeout)
    data = report.to_json()
    if args.json_report:
        args.json_report.parent.mkdir(parents=True, exist_ok=True)
        args.json_report.write_text(json.dumps(data, indent=1), encoding="utf-8")
    if args.json:
        out.print_json(json.dumps(data))
    else:
        _print_verify(report)
    return EXIT_OK if report.exactly_once else EXIT_ANOMALY


def cmd_load(args: argparse.Namespace) -> int:
    check_reachable(args.bootstrap)
    clients = clients_for(args.bootstrap, _settings(args).values)
    with _progress() as progress:
        result = load_input(clients, args.topic, args.records, partitions=args.partitions,
                            aborted=args.aborted, progress=_progress_callback(progress))
    out.print(f"loaded {result.committed} committed records and {result.aborted} aborted ones into "
              f"{result.topic} ({result.partitions} partitions)")
    return EXIT_OK


def cmd_create_topic(args: argparse.Namespace) -> int:
    check_reachable(args.bootstrap)
    admin = clients_for(args.bootstrap, _settings(args).values).admin()
    try:
        admin.create_topic(args.topic, args.partitions)
        partitions = len(admin.partitions(args.topic))
    finally:
        admin.close()
    out.print(f"topic {args.topic} has {partitions} partitions", markup=False, highlight=False)
    return EXIT_OK


def cmd_replay(args: argparse.Namespace) -> int:
    template = _template(args)
    settings = _settings_for_found_broker(args, template)
    # Every replay gets fresh output topics and checkpoint directories: a rerun must not resume
    # an earlier run's checkpoints or count its records.
    run_id = time.strftime("%Y%m%d-%H%M%S") + f"-s{args.seed}"
    work_dir = args.reports_dir / "work" / run_id
    work_dir.mkdir(parents=True, exist_ok=True)
    if args.cluster and args.bootstrap:
        raise UsageError("--cluster and --bootstrap exclude each other: --cluster finds or starts a 3-node cluster")
    with (cluster_broker(work_dir=str(work_dir / "cluster"), kafka_version=args.kafka_version) if args.cluster
          else find_broker(args.bootstrap, kafka_version=args.kafka_version)) as broker:
        if broker.simulated:
            _print_simulated_notice(REAL_BROKER_HELP)
        err.print(f"Kafka: {broker.origin} at {broker.bootstrap_servers}", highlight=False)
        check_reachable(broker.bootstrap_servers)
        clients = clients_for(broker.bootstrap_servers, settings.values)
        with _progress() as progress:
            if args.load is not None:
                load_input(clients, args.input, args.load, partitions=args.partitions,
                           progress=_progress_callback(progress))
            admin = clients.admin()
            try:
                admin.partitions(args.input)
            except UnknownTopicError:
                raise UsageError(f"input topic {args.input!r} does not exist on {broker.bootstrap_servers}; "
                                 "create and fill it, or pass --load N to load N records into it") from None
            finally:
                admin.close()
            replay = Replay(ReplayOptions(
                bootstrap=broker.bootstrap_servers, input_topic=args.input, template=template,
                work_dir=work_dir,
                scenarios=args.scenarios or parse_scenarios("all"), seed=args.seed,
                id_field=args.id_field, output_id_field=args.output_id_field, check_order=args.check_order,
                shape=args.shape, event_time_field=args.event_time_field,
                output_prefix=args.output_prefix or f"{args.input}-eos-{run_id}",
                checkpoint_interval=args.checkpoint_interval, batch_records=args.batch_records,
                kills=args.kills, run_timeout_s=args.run_timeout,
                broker=broker, client_config=settings.values,
            ), progress=_progress_callback(progress), events=_event_callback(progress))
            result = replay.run()
    files = write_reports(result, args.reports_dir / run_id)
    _print_results(result, files)
    return EXIT_OK if result.passed else EXIT_ANOMALY


def _print_results(result: ReplayResult, files: ReportFiles) -> None:
    _print_table(result)
    out.print(f"reports: {files.markdown}, {files.json}" + (f", {files.plot}" if files.plot else ""))
    if result.simulated:
        _print_simulated_notice()


def cmd_transactions(args: argparse.Namespace) -> int:
    check_reachable(args.bootstrap)
    prefix = args.prefix if args.prefix.endswith("-") else f"{args.prefix}-"
    footprint = sink_footprint(clients_for(args.bootstrap, _settings(args).values), prefix)
    if args.json:
        out.print_json(json.dumps(footprint.to_json()))
    else:
        for line in footprint.summary_lines():
            out.print(line, markup=False, highlight=False)
    return EXIT_OK


def _ms_ago(now_ms: int, then_ms: int | None) -> str:
    return "-" if then_ms is None else f"{max(0, now_ms - then_ms) / 1000:.1f} s ago"


def _print_status(status: QueryStatus, reasons: list[str]) -> None:
    now = status.observed_at_ms
    summary = Table(title=f"kafka-eos status: query {status.query_id}", show_header=False)
    summary.add_column("what")
    summary.add_column("value", overflow="fold")
    latest = ("none" if status.latest_checkpoint_id is None else
              f"{status.latest_checkpoint_id}, stored {_ms_ago(now, status.latest_checkpoint_stored_at_ms)}, "
              + ("committed" if status.latest_checkpoint_committed else "NOT committed"))
    pending = ("none" if status.pending is None else
               f"checkpoint {status.pending.id}, stored {status.pending.age_ms / 1000:.1f} s ago")
    oldest = max((t.age_ms for t in status.open_transactions), default=None)
    totals = status.newest_statistics.totals if status.newest_statistics else None
    for what, value in (
        ("last committed batch (Spark)", "none" if status.last_committed_batch is None else str(status.last_committed_batch)),
        ("latest checkpoint (sink)", latest),
        ("pending checkpoint", pending),
        ("open transactions", f"{len(status.open_transactions)}" + (f", oldest {oldest / 1000:.1f} s" if oldest is not None else "")),
        ("source lag (records)", str(sum(p.lag for p in status.lag)) if status.lag else "-"),
        ("transactional id prefix", f"{status.transactional_id_prefix or 'unknown'} (from {status.settings_from})"),
        ("transaction timeout", f"{status.transaction_timeout_ms / 1000:.0f} s"),
        ("since the state began", "-" if totals is None else
         f"{totals.checkpoints} checkpoints, {totals.records} records, {totals.recoveries} recoveries, "
         f"{totals.lingering_aborted} lingering aborted, "
         f"{totals.lost_transactions} transactions lost ({totals.lost_records:,} records)"),
        ("state", status.state_dir),
    ):
        summary.add_row(what, Text(value))
    out.print(summary)
    if status.open_transactions:
        table = Table(title="open transactions")
        for column in ("transactional id", "producer id", "age", "timeout", "partitions"):
            table.add_column(column, overflow="fold")
        for t in status.open_transactions:
            table.add_row(Text(t.transactional_id), str(t.producer_id), f"{t.age_ms / 1000:.1f} s",
                          f"{t.timeout_ms / 1000:.0f} s", Text(", ".join(t.partitions)))
        out.print(table)
    if status.lag:
        table = Table(title="source lag")
        for column in ("topic", "partition", "committed offset", "end offset", "lag"):
            table.add_column(column)
        for p in status.lag:
            table.add_row(Text(p.topic), str(p.partition), str(p.committed_offset), str(p.end_offset), str(p.lag))
        out.print(table)
    if status.history:
        table = Table(title="retained checkpoints")
        for column in ("checkpoint", "outcome", "records", "txns", "commit ms", "prepare", "store", "EndTxn",
                       "mark", "sweep", "lingering aborted", "lost txns (records)"):
            table.add_column(column)
        for st in status.history:
            t = st.timings
            parts = ([f"{v:.0f}" for v in (t.total_ms, t.prepare_ms, t.store_ms, t.commit_ms, t.mark_ms, t.sweep_ms)]
                     if t else ["-"] * 6)
            table.add_row(str(st.checkpoint_id), st.outcome.value, str(st.records), str(st.transactions), *parts,
                          str(len(st.lingering_aborted)),
                          f"{len(st.lost)} ({st.lost_records:,})" if st.lost else "0")
        out.print(table)
    if reasons:
        for reason in reasons:
            out.print(f"ATTENTION: {reason}", style="bold red", markup=False, highlight=False, soft_wrap=True)
    else:
        out.print("healthy", style="bold green")


def cmd_status(args: argparse.Namespace) -> int:
    check_reachable(args.bootstrap)
    clients = clients_for(args.bootstrap, _settings(args).values)
    try:
        status = read_status(args.checkpoint_location, clients, state_dir=args.state_dir)
    except StatusUnavailableError as exc:
        raise UsageError(str(exc)) from None
    reasons = attention_reasons(status)
    if args.plot is not None:
        from connectors.monitoring.status_plot import plot_status

        err.print(f"plot: {plot_status(status, args.plot)}", markup=False, highlight=False)
    if args.json:
        print(json.dumps(status.to_json(), indent=1))
    elif args.prometheus:
        from connectors.monitoring.prometheus_metrics import exposition

        sys.stdout.write(exposition(status))
    else:
        _print_status(status, reasons)
    if args.json or args.prometheus:
        for reason in reasons:  # the one-line reasons go to stderr, the document stays parseable
            err.print(f"ATTENTION: {reason}", markup=False, highlight=False, soft_wrap=True)
    return EXIT_ANOMALY if reasons else EXIT_OK


def cmd_jvm_class_archive(args: argparse.Namespace) -> int:
    from connectors.spark.jvm_class_archive import create, java_options
    from connectors.spark.spark_errors import ClassArchiveError

    try:
        archive = create(args.path, master=args.master)
    except ClassArchiveError as exc:
        err.print(f"error: {exc}", markup=False, highlight=False)
        return EXIT_ANOMALY
    out.print(f"spark.driver.extraJavaOptions={java_options(archive)}", markup=False, highlight=False)
    return EXIT_OK


class _Stopped(Exception):
    """SIGTERM reached ``kafka-eos broker``."""


def _stop_on_sigterm(signum: int, frame: object) -> None:
    raise _Stopped()


def cmd_broker(args: argparse.Namespace) -> int:
    environ = {key: value for key, value in os.environ.items() if key != "KAFKA_BOOTSTRAP_SERVERS"}
    previous = signal.signal(signal.SIGTERM, _stop_on_sigterm)
    try:
        with find_broker(environ=environ, kafka_version=args.kafka_version) as broker:
            check_reachable(broker.bootstrap_servers)
            out.print(f"Kafka at {broker.bootstrap_servers}: {broker.origin}", markup=False, highlight=False)
            out.print("running until Ctrl-C or SIGTERM, which stop it", markup=False, highlight=False)
            sys.stdout.flush()
            # The file last: whoever waits for it (a script, CI) may stop the broker at once, and the
            # lines above are then already out.
            if args.bootstrap_file is not None:
                written = args.bootstrap_file.with_name(args.bootstrap_file.name + ".part")
                written.write_text(broker.bootstrap_servers + "\n", encoding="utf-8")
                written.replace(args.bootstrap_file)  # whole, or not there
            while True:
                time.sleep(3600)
    except (_Stopped, KeyboardInterrupt):
        err.print("broker stopped", markup=False, highlight=False)
        return EXIT_OK
    finally:
        signal.signal(signal.SIGTERM, previous)


def cmd_demo(args: argparse.Namespace) -> int:
    template = _template(args)
    settings = _settings_for_found_broker(args, template)
    options = DemoOptions(
        template=template, bootstrap=args.bootstrap, records=args.records, partitions=args.partitions,
        client_config=settings.values,
        scenarios=args.scenarios or list(DEMO_SCENARIOS), seed=args.seed, reports_dir=args.reports_dir,
        work_dir=args.reports_dir / "work", checkpoint_interval=args.checkpoint_interval,
        batch_records=args.batch_records, kills=args.kills,
        run_timeout_s=args.run_timeout, require_broker=args.require_broker, kafka_version=args.kafka_version,
    )
    found = demo_broker(options)
    if found.broker.simulated:
        why = (f"No Kafka broker was found ({found.fallback_reason}).\nThe demo runs on the embedded "
               "cluster instead; the broker-restart scenario needs a real broker and is skipped.\n"
               if found.fallback_reason else "")
        _print_simulated_notice(f"{why}{REAL_BROKER_HELP}\nWith --require-broker the demo exits (status 2) "
                                "instead of falling back.")
    with _progress() as progress:
        result, files = run_demo(options, found, progress=_progress_callback(progress),
                                 events=_event_callback(progress))
    _print_results(result, files)
    return EXIT_OK if result.passed else EXIT_ANOMALY


COMMANDS = {"verify": cmd_verify, "load": cmd_load, "create-topic": cmd_create_topic, "replay": cmd_replay,
            "demo": cmd_demo, "broker": cmd_broker,
            "transactions": cmd_transactions, "status": cmd_status, "jvm-class-archive": cmd_jvm_class_archive}


def _kafka_message(exc: KafkaConnectorError) -> str:
    text = str(exc)
    if "AUTHORIZATION_FAILED" in text.upper() or "NOT AUTHORIZED" in text.upper():
        return (f"permission denied by Kafka: {text}\nThe principal needs Describe and Read on the "
                "topics it reads, Write and Create on the topics it writes, Describe/Write on the "
                "transactional ids of a job (see the README's \"Secured clusters\" for the exact ACLs); pass credentials "
                "with --command-config FILE (a Java client properties file) or --client-config (e.g. "
                "sasl.username=...).")
    if isinstance(exc, BrokerUnavailableError):
        return f"Kafka did not answer: {text}"
    return f"Kafka error: {text}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(name)s: %(message)s",
                        handlers=[RichHandler(console=err, show_path=False)])
    if logging.getLogger().level >= logging.WARNING:
        # librdkafka's warnings here are transient states it retries by itself (coordinator
        # loading, reconnects); a user who asked for no details should not see them as problems.
        logging.getLogger("connectors.kafka.clients._confluent.librdkafka").setLevel(logging.ERROR)
    try:
        return COMMANDS[args.command](args)
    except KeyboardInterrupt:
        err.print("interrupted")
        return EXIT_INTERRUPTED
    except NoBrokerError as exc:
        err.print(str(exc), markup=False, highlight=False)
        return EXIT_USAGE
    except (UsageError, BrokerUnreachableError, TopicNotFoundError, IdFieldError, JobTemplateError) as exc:
        err.print(f"error: {exc}", markup=False, highlight=False)
        return EXIT_USAGE
    except UnknownTopicError as exc:
        err.print(f"error: a topic does not exist: {exc}", markup=False, highlight=False)
        return EXIT_USAGE
    except KafkaConnectorError as exc:
        err.print(f"error: {_kafka_message(exc)}", markup=False, highlight=False)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
