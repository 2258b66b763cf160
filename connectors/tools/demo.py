"""``kafka-eos demo``: the README's first command, end to end.

Find or start a broker (:func:`connectors.servers.broker_discovery.find_broker`), load an input topic with
unique ids (and one aborted transaction), run the example pipeline through a few failure
scenarios with ``replay``, verify each, and write the reports. Topic names carry a run id, so
demos can run again and again against the same cluster.

With no broker to be found, the demo runs the same scenarios on the kit's embedded test cluster
instead (:func:`connectors.servers.broker_discovery.embedded_broker`), so that the first command shows the
kit on any machine with Python and Java. Everything it prints and writes then carries
:data:`connectors.servers.broker_discovery.SIMULATED_NOTICE`: the embedded cluster has Kafka's transaction
semantics, but it is no evidence about a real broker. The broker-restart scenario is skipped
there (there is no broker process), and ``require_broker`` turns the fallback off.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

from connectors.kafka.clients.factory import clients_for
from connectors.servers.broker_discovery import Broker, check_reachable, embedded_broker, find_broker
from connectors.servers.server_errors import NoBrokerError
from connectors.tools.replay_jobs import JobTemplate
from connectors.tools.loader import load_input
from connectors.tools.replay import DEMO_SCENARIOS, Replay, ReplayOptions, ReplayResult
from connectors.tools.report import ReportFiles, write_reports
from connectors.tools.verify import ProgressCallback

log = logging.getLogger(__name__)


@dataclass
class DemoOptions:
    template: JobTemplate
    bootstrap: str | None = None
    records: int = 20_000
    partitions: int = 3
    scenarios: Sequence[str] = DEMO_SCENARIOS
    seed: int = 1
    reports_dir: Path = Path("reports")
    work_dir: Path = Path("reports") / "work"
    checkpoint_interval: float = 0.2
    batch_records: int | None = None
    kills: int = 1
    run_timeout_s: float = 600.0
    #: Exit with NoBrokerError instead of falling back to the embedded cluster.
    require_broker: bool = False
    #: The Kafka started from Maven Central when no other broker is found (None: the environment's).
    kafka_version: str | None = None
    #: Client settings for the cluster at ``bootstrap`` (security): its clients' and the job's.
    client_config: Mapping[str, str] = field(default_factory=dict)
    run_id: str = field(default_factory=lambda: time.strftime("%Y%m%d-%H%M%S"))


@dataclass
class DemoBroker:
    broker: Broker
    #: Why no real broker was used (what was tried), when the demo fell back to the embedded cluster.
    fallback_reason: str | None = None


def demo_broker(options: DemoOptions) -> DemoBroker:
    """The broker of :func:`find_broker`; without one, the embedded cluster (in the demo's work
    directory), unless ``options.require_broker``, which lets NoBrokerError through."""
    log.info("looking for a Kafka broker (KAFKA_BOOTSTRAP_SERVERS, Docker, KAFKA_HOME, Maven Central)")
    try:
        return DemoBroker(find_broker(options.bootstrap, kafka_version=options.kafka_version))
    except NoBrokerError as exc:
        if options.require_broker:
            raise
        folder = options.work_dir / _run_id(options)
        folder.mkdir(parents=True, exist_ok=True)
        tried = next((line for line in str(exc).splitlines() if line.startswith("Tried:")), "")
        return DemoBroker(embedded_broker(folder / "embedded-kafka.db"), tried or "no broker found")


def _run_id(options: DemoOptions) -> str:
    return f"{options.run_id}-s{options.seed}"


def run_demo(options: DemoOptions, found: DemoBroker, *, progress: ProgressCallback | None = None,
             events: Callable[[str], None] | None = None) -> tuple[ReplayResult, ReportFiles]:
    """Load, replay and report on ``found`` (from :func:`demo_broker`), then stop the broker if the
    demo started it."""
    def event(message: str) -> None:
        log.info("%s", message)
        if events:
            events(message)

    run_id = _run_id(options)
    options.work_dir.mkdir(parents=True, exist_ok=True)
    with found.broker as broker:
        where = "" if broker.bootstrap_servers in broker.origin else f" at {broker.bootstrap_servers}"
        event(f"broker: {broker.origin}{where}")
        check_reachable(broker.bootstrap_servers)
        clients = clients_for(broker.bootstrap_servers, options.client_config)
        input_topic = f"eos-demo-{run_id}-in"
        load_input(clients, input_topic, options.records, partitions=options.partitions, progress=progress)
        event(f"loaded {options.records} records (+ one aborted transaction) into {input_topic}")
        replay = Replay(ReplayOptions(
            bootstrap=broker.bootstrap_servers, input_topic=input_topic, template=options.template,
            work_dir=options.work_dir / run_id, scenarios=options.scenarios, seed=options.seed,
            output_prefix=f"eos-demo-{run_id}-out", checkpoint_interval=options.checkpoint_interval,
            batch_records=options.batch_records, kills=options.kills,
            run_timeout_s=options.run_timeout_s, broker=broker, client_config=options.client_config,
        ), progress=progress, events=events)
        result = replay.run()
    result.command = "demo"  # the reports and the console table are titled after it
    files = write_reports(result, options.reports_dir / run_id)
    return result, files
