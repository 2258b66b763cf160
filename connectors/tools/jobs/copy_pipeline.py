"""Exactly-once Kafka -> Kafka copy job without Spark: KafkaSource -> transform -> KafkaSink(s),
checkpointed by the twophase coordinator in one Python process.

    python -m connectors.tools.jobs.copy_pipeline --bootstrap localhost:9092 --input in --output out \
        --checkpoint-dir /tmp/chk --bounded [--failpoint after_pre_commit:exit@3] \
        [--metrics-file /tmp/metrics.jsonl] [--hold-until /tmp/release]

(or ``python examples/copy_pipeline.py ...`` in a checkout, which runs this module).

Each input value is written to the output with a suffix (``--suffix``), keyed like the input, so
a verifier can match output to input by key. With ``--bounded`` the job stops once it has copied
everything that was in the input when it started; a restarted job resumes from its checkpoint.
With ``--hold-until FILE`` it then waits until FILE exists before it exits, so that a fault timed
by ``kafka-eos replay`` always finds it running (see ``job_hold.py``).

Expected failures (a missing topic, an unreachable broker, a transaction the broker aborted) end
the job with exit status 1 and one error line naming the error type, e.g. ``TransactionLostError``,
which is what ``kafka-eos replay`` looks for.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import zlib

from connectors.kafka.sink.config import (
    DEFAULT_CHECKPOINT_TIMEOUT_MS,
    DEFAULT_RESTART_BUDGET_MS,
    DeliveryGuarantee,
    KafkaSinkConfig,
)
from connectors.kafka.kafka_errors import KafkaConnectorError
from connectors.kafka.sink.kafka_sink import KafkaSink
from connectors.kafka.source import KafkaSource, KafkaSourceConfig
from connectors.kafka.sink.writer import ProducerRecord
from connectors.tools.job_metrics import CheckpointMetrics
from twophase import failpoints
from twophase.checkpoint_store import FileCheckpointStore
from twophase.coordinator import CheckpointConfig, CheckpointCoordinator
from twophase.pipeline import LocalPipeline

from connectors.tools.jobs.job_hold import hold_until

log = logging.getLogger("copy_pipeline")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers")
    parser.add_argument("--input", required=True, help="input topic")
    parser.add_argument("--output", required=True, help="output topic")
    parser.add_argument("--checkpoint-dir", required=True)
    parser.add_argument("--transactional-id-prefix", default=None,
                        help="default: derived from the checkpoint directory and output topic")
    parser.add_argument("--writers", type=int, default=2, help="parallel sink writers (transactions per checkpoint)")
    parser.add_argument("--checkpoint-interval", type=float, default=0.5, help="seconds")
    parser.add_argument("--checkpoint-every-records", type=int, default=None,
                        help="also checkpoint after this many input records (reproducible crash points)")
    parser.add_argument("--max-poll-records", type=int, default=5000)
    parser.add_argument("--delivery-guarantee", default="exactly_once",
                        choices=[g.value for g in DeliveryGuarantee])
    parser.add_argument("--transaction-timeout-ms", type=int, default=15 * 60 * 1000)
    parser.add_argument("--checkpoint-timeout-ms", type=int, default=DEFAULT_CHECKPOINT_TIMEOUT_MS,
                        help="a checkpoint not acknowledged within this is aborted (default: %(default)s)")
    parser.add_argument("--restart-budget-ms", type=int, default=DEFAULT_RESTART_BUDGET_MS,
                        help="the longest a restart may take before recovery commits (default: %(default)s); "
                             "with --checkpoint-timeout-ms it must fit in --transaction-timeout-ms")
    parser.add_argument("--metrics-file", default=None,
                        help="append one JSON line per committed checkpoint here (for kafka-eos replay)")
    parser.add_argument("--bounded", action="store_true", help="stop at the input's end offsets at start")
    parser.add_argument("--hold-until", default=None, metavar="FILE",
                        help="once the input is processed, wait until FILE exists before exiting "
                             "(kafka-eos replay uses it to land timed faults on a running job)")
    parser.add_argument("--suffix", default="|copied")
    parser.add_argument("--failpoint", action="append", default=[],
                        help=f"NAME:ACTION[@HIT], NAME in {', '.join(failpoints.ALL)}; may repeat")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    if args.writers < 1:
        parser.error("--writers must be >= 1")
    return args


def run(args: argparse.Namespace) -> int:
    for spec in args.failpoint:
        for name, action in failpoints.parse(spec).items():
            failpoints.enable(name, action)
    job_id = os.path.abspath(args.checkpoint_dir)
    source = KafkaSource(KafkaSourceConfig(
        bootstrap_servers=args.bootstrap,
        subscribe=[args.input],
        starting_offsets="earliest",
        ending_offsets="latest" if args.bounded else None,
    ))
    sink_config = KafkaSinkConfig(
        bootstrap_servers=args.bootstrap,
        topic=args.output,
        delivery_guarantee=DeliveryGuarantee.parse(args.delivery_guarantee),
        transactional_id_prefix=args.transactional_id_prefix,
        transaction_timeout_ms=args.transaction_timeout_ms,
        checkpoint_timeout_ms=args.checkpoint_timeout_ms,
        restart_budget_ms=args.restart_budget_ms,
    )
    sinks = [KafkaSink(sink_config, name=f"sink-{i}", slot=i, job_id=f"{job_id}|{args.output}")
             for i in range(args.writers)]
    coordinator = CheckpointCoordinator(
        FileCheckpointStore(args.checkpoint_dir),
        CheckpointConfig(checkpoint_interval=args.checkpoint_interval, tolerable_failed_checkpoints=3),
    )
    suffix = args.suffix.encode()
    writers = args.writers
    copied = [0]

    def transform(record):  # type: ignore[no-untyped-def]
        copied[0] += 1
        yield ProducerRecord(value=(record.value or b"") + suffix, key=record.key)

    def route(value: ProducerRecord) -> int:
        return zlib.crc32(value.key or b"") % writers

    pipeline = LocalPipeline(coordinator, source, transform, sinks, route=route,
                             max_poll_records=args.max_poll_records,
                             checkpoint_every_records=args.checkpoint_every_records)
    # Registered after the sinks, so it hears of a checkpoint once every sink has committed it.
    # Always registered, file or not: checkpoints name it, and restoring them needs it.
    coordinator.register(CheckpointMetrics(coordinator, args.metrics_file, lambda: copied[0]))
    if not args.bounded:
        log.info("running unbounded; stop with Ctrl-C")
    result = pipeline.run()
    log.info("done: %d records in, %d out, %d restarts, last checkpoint %s",
             result.records_in, result.records_out, result.restarts, result.last_checkpoint_id)
    hold_until(args.hold_until, args.metrics_file)
    for participant in [source, *sinks]:
        participant.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s")
    try:
        return run(args)
    except (KafkaConnectorError, ValueError) as exc:
        # Expected conditions (a missing topic, an unreachable broker, a lost transaction, a
        # configuration the guardrails refuse) get one clear line, not a traceback.
        log.error("%s: %s", type(exc).__name__, exc)
        return 1


if __name__ == "__main__":
    sys.exit(main())
