"""``kafka-eos demo``: the README's first command, end to end.

Find or start a broker (:func:`connectors.tools.broker.find_broker`), load an input topic with
unique ids (and one aborted transaction), run the example pipeline through a few failure
scenarios with ``replay``, verify each, and write the reports. Topic names carry a run id, so
demos can run again and again against the same cluster.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from connectors.kafka.client_factory import clients_for
from connectors.tools.broker import check_reachable, find_broker
from connectors.tools.jobs import JobTemplate
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
    kills: int = 3
    run_timeout_s: float = 600.0


def run_demo(options: DemoOptions, *, progress: ProgressCallback | None = None,
             events: Callable[[str], None] | None = None) -> tuple[ReplayResult, ReportFiles]:
    """Raises NoBrokerError (saying what to provide) when no broker can be had."""
    def event(message: str) -> None:
        log.info("%s", message)
        if events:
            events(message)

    run_id = time.strftime("%Y%m%d-%H%M%S") + f"-s{options.seed}"
    options.work_dir.mkdir(parents=True, exist_ok=True)
    event("looking for a Kafka broker (KAFKA_BOOTSTRAP_SERVERS, Docker, KAFKA_HOME)")
    with find_broker(options.bootstrap) as broker:
        event(f"using {broker.origin} at {broker.bootstrap_servers}")
        check_reachable(broker.bootstrap_servers)
        clients = clients_for(broker.bootstrap_servers)
        input_topic = f"eos-demo-{run_id}-in"
        load_input(clients, input_topic, options.records, partitions=options.partitions, progress=progress)
        event(f"loaded {options.records} records (+ one aborted transaction) into {input_topic}")
        replay = Replay(ReplayOptions(
            bootstrap=broker.bootstrap_servers, input_topic=input_topic, template=options.template,
            work_dir=options.work_dir / run_id, scenarios=options.scenarios, seed=options.seed,
            output_prefix=f"eos-demo-{run_id}-out", checkpoint_interval=options.checkpoint_interval,
            batch_records=options.batch_records, kills=options.kills,
            run_timeout_s=options.run_timeout_s, broker=broker,
        ), progress=progress, events=events)
        result = replay.run()
    files = write_reports(result, options.reports_dir / run_id)
    return result, files
