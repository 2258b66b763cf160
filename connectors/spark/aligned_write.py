"""The foreachBatch sink's aligned write: the rows of one Kafka partition go to one write task.

Each write task writes in one transaction, and a transaction's commit writes one marker on every
partition it touched. A batch whose tasks each write rows of every output partition costs
``tasks x partitions`` markers (64 tasks into 64 partitions: 4,096 marker writes, each replicated);
aligned, it costs one per output partition it wrote, at any number of tasks, and each task's
transaction stays its own, so Spark may still retry a task alone.

Each batch is repartitioned into its write tasks by the partition that Java's default partitioner
gives each row (the murmur2 of its key, modulo its topic's partition count), computed on the
executors by the kit's JVM function ``kafka_eos_partition`` (``jvm/functions-src``, compiled by the
project's build for Java 8, so for every Spark line from 3.5 on). Partition ``p`` of the output goes
to task ``p % tasks`` (``kafka_eos_write_task_key``: the shuffle key Spark's hash places there).

- A keyed row keeps Java's partitioning: the producer still picks its partition, the same one.
- A row without a key, which Java's default partitioner may put anywhere, is given the partition of
  the murmur2 of its value, which its task writes anyway (deterministic, so a recomputed shuffle
  places it again where it was).
- A row with its own ``partition`` keeps it, and goes to that partition's task.
- With per-row topics, the topics the brokers list when the run starts are numbered one after the
  other; the rows of a topic created later go to one task together, which keeps the bound too.
- A topic's partition count is looked up again after ``metadata.max.age.ms`` (Java's producer
  refreshes then too). A stale count only weakens the alignment: keyed rows are still placed by
  the producer, and a count never shrinks, so a partition computed from it exists.
- Partitioners other than Java's default (``murmur2_random``) and librdkafka's ``murmur2`` place
  rows by another rule or at random: the batch is then written as before, coalesced, and one INFO
  line says so.

Per key, the order holds: a hash shuffle keeps each input partition's rows in their order, and a
key's rows meet in one task.

The shuffle has a cost, the markers it saves another; ``bench/`` measures both.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import IntegerType

from connectors.kafka.clients.factory import clients_for
from connectors.kafka.clients.java_client_settings import DEFAULT_PARTITIONER
from connectors.spark.options import SinkOptions

log = logging.getLogger(__name__)

#: The jar of the functions, built by setup.py beside the provider's (never committed).
FUNCTIONS_JAR = Path(__file__).resolve().parent / "jvm" / "kafka-eos-spark-functions.jar"
#: SQL name -> the JVM class of each function.
FUNCTION_CLASSES: Mapping[str, str] = {
    "kafka_eos_partition": "kafkaeos.spark.functions.KafkaPartition",
    "kafka_eos_write_task_key": "kafkaeos.spark.functions.WriteTaskKey",
}
#: The partitioners whose placement of a keyed row is murmur2 of the key (librdkafka's names, as
#: the sink's settings hold them; Java's DefaultPartitioner is murmur2_random), and whether a row
#: without a key is placed by its value: murmur2_random places it anywhere (so at its value's
#: murmur2), murmur2 hashes the empty key.
ALIGNED_PARTITIONERS: Mapping[str, bool] = {"murmur2_random": True, "murmur2": False}
#: Java's producer refreshes its metadata this often by default (metadata.max.age.ms).
DEFAULT_METADATA_MAX_AGE_MS = 300_000
#: More topics than this (per-row topics only): the map of their partitions would weigh on every
#: batch's plan; such a sink is written coalesced.
MAX_TOPICS = 1_000

# Columns of the plan between the shuffle and the write tasks, dropped before the tasks run.
_PARTITION = "__kafka_eos_partition"
_TASK_KEY = "__kafka_eos_write_task_key"

_jar_added = False
_jar_lock = threading.Lock()


@dataclass(frozen=True)
class OutputPartitions:
    """The output's partition counts: ``topic`` -> count; ``first_slot``: the number of the
    topic's partition 0 among all the output's partitions (0 for the topic option)."""

    counts: Mapping[str, int]
    first_slot: Mapping[str, int]
    looked_up_at: float

    @classmethod
    def of(cls, counts: Mapping[str, int]) -> "OutputPartitions":
        first, slot = {}, 0
        for topic in sorted(counts):
            first[topic] = slot
            slot += counts[topic]
        return cls(dict(counts), first, time.monotonic())


class AlignedWrite:
    """What the foreachBatch sink does to each batch before its write tasks: repartition it by
    output partition (the module doc), or, where that cannot be done, coalesce it to ``tasks``."""

    def __init__(self, options: SinkOptions, tasks: int | None) -> None:
        self.options = options
        self.tasks = tasks
        config = options.config
        self.partitioner = str(config.client_config.get("partitioner", DEFAULT_PARTITIONER)).strip().lower()
        self.max_age_s = int(config.client_config.get("metadata.max.age.ms", DEFAULT_METADATA_MAX_AGE_MS)) / 1000
        self._partitions: OutputPartitions | None = None
        #: Why this run writes unaligned, once found (a partitioner, functions that did not load).
        self._unaligned: str | None = None
        if self.partitioner not in ALIGNED_PARTITIONERS:
            self._unaligned = (f"partitioner {self.partitioner} places rows by its own rule; "
                               f"{' and '.join(ALIGNED_PARTITIONERS)} align")
            log.info("the foreachBatch sink writes unaligned (%s): each of its write tasks may write every output "
                     "partition, one transaction marker each", self._unaligned)

    def arrange(self, df: DataFrame, checkpoint_id: int) -> DataFrame:
        """``df`` as its write tasks should take it."""
        coalesced = df if self.tasks is None else df.coalesce(self.tasks)
        if not self.options.config.exactly_once or self.tasks is None or self._unaligned is not None:
            return coalesced  # no transaction (so no marker), no task count, or no way to align
        # Each batch: foreachBatch hands each batch a session object of its own (the jar is added
        # once per process, the functions once per session).
        failure = register_functions(df.sparkSession)
        if failure is not None:
            self._unaligned = failure
            log.warning("checkpoint %d: the foreachBatch sink writes unaligned from now on (%s): each of up to %d "
                        "write tasks may write every output partition, one transaction marker each",
                        checkpoint_id, failure, self.tasks)
            return coalesced
        partitions = self._output_partitions(checkpoint_id)
        if partitions is None:
            return coalesced
        # Coalesced first, so that the stage before the shuffle (behind a stateful operator, its
        # spark.sql.shuffle.partitions state partitions) runs in as many tasks as the write, one
        # partition after another, as the unaligned write runs it: 200 tasks of state store work on
        # a few slots cost more than the shuffle itself (bench/HISTORY.md, issue 54). The projection
        # aligned() adds stands between the two, so Spark's CollapseRepartition keeps both.
        return aligned(coalesced, self.tasks, partitions, ALIGNED_PARTITIONERS[self.partitioner],
                       self.options.config.topic)

    def _output_partitions(self, checkpoint_id: int) -> OutputPartitions | None:
        known = self._partitions
        if known is not None and time.monotonic() - known.looked_up_at < self.max_age_s:
            return known
        config = self.options.config
        admin = clients_for(config.bootstrap_servers, config.client_config).admin()
        try:
            topics = [config.topic] if config.topic else admin.list_topics()
            if len(topics) > MAX_TOPICS:
                # Decided once: listing the topics again at every batch would only say it again.
                self._unaligned = f"the brokers list {len(topics)} topics, more than the {MAX_TOPICS} it numbers"
                log.info("checkpoint %d: the foreachBatch sink writes unaligned from now on (%s)", checkpoint_id,
                         self._unaligned)
                return None
            self._partitions = OutputPartitions.of({topic: len(admin.partitions(topic)) for topic in topics})
        except Exception as exc:  # only the alignment is lost, never the batch
            log.warning("checkpoint %d: the output's partitions could not be looked up (%s); this batch is "
                        "written unaligned", checkpoint_id, _first_line(exc))
            return known
        finally:
            admin.close()
        log.info("checkpoint %d: aligned write into %s", checkpoint_id,
                 ", ".join(f"{t} ({n} partitions)" for t, n in sorted(self._partitions.counts.items())[:5])
                 + (", ..." if len(self._partitions.counts) > 5 else ""))
        return self._partitions


def aligned(df: DataFrame, tasks: int, partitions: OutputPartitions, null_keys_by_value: bool,
            topic_option: str | None) -> DataFrame:
    """``df`` repartitioned into ``tasks`` by output partition (the module doc). SQL strings only:
    the Python process of a Spark Connect server that runs a foreachBatch function has a Connect
    session without Spark Connect's mode switched on, where ``pyspark.sql.functions`` would build
    classic columns."""
    columns = df.columns
    has_key, own_partition = "key" in columns, "partition" in columns
    hashed = (["CAST(`key` AS BINARY)"] if has_key else []) + (["CAST(`value` AS BINARY)"] if null_keys_by_value else [])
    bytes_expr = "coalesce(" + ", ".join([*hashed, "X''"]) + ")"
    if topic_option is not None:
        count = str(partitions.counts[topic_option])
        first_slot = "0"
    else:
        count = _topic_map(partitions.counts)
        first_slot = _topic_map(partitions.first_slot)
    computed = f"kafka_eos_partition({bytes_expr}, {count})"
    partition = f"coalesce(`partition`, {computed})" if own_partition else computed
    # A row without a key gets its computed partition; a keyed row keeps the producer's choice
    # (the same partition); a row's own partition is kept.
    if has_key:
        written = f"CASE WHEN `key` IS NULL THEN {_PARTITION} ELSE {'`partition`' if own_partition else 'CAST(NULL AS INT)'} END"
    else:
        written = _PARTITION
    others = [_quoted(name) for name in columns if name != "partition"]
    return (df.selectExpr(*[_quoted(name) for name in columns], f"{partition} AS {_PARTITION}")
            .selectExpr(*others, f"{written} AS `partition`",
                        f"kafka_eos_write_task_key({first_slot} + {_PARTITION}, {tasks}) AS {_TASK_KEY}")
            .repartition(tasks, _TASK_KEY)
            .drop(_TASK_KEY))


def _topic_map(values: Mapping[str, int]) -> str:
    """``try_element_at(map(...), topic)``: null for a topic not in ``values`` (its rows then go to
    one task together)."""
    pairs = ", ".join(f"{_string_literal(topic)}, {value}" for topic, value in sorted(values.items()))
    return f"try_element_at(map({pairs}), `topic`)" if pairs else "CAST(NULL AS INT)"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else repr(exc)


def _string_literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def register_functions(spark: SparkSession) -> str | None:
    """Put the functions' jar into the session's driver and executors (``ADD JAR``, once per
    process: its driver or, on Spark Connect, the server's Python process that runs a foreachBatch
    function) and register the functions in ``spark``. None when done; else why not, in a few words.

    Spark Connect 3.5 resolves a Java function with the session's own class loader, which neither
    ``ADD JAR`` nor the session's artifacts reach there: its foreachBatch sink writes unaligned,
    after one WARNING (docs/exactly-once.md, "Transaction markers per batch")."""
    global _jar_added
    if not FUNCTIONS_JAR.is_file():
        return f"its functions' jar {FUNCTIONS_JAR} is missing: reinstall the kit"
    try:
        with _jar_lock:
            if not _jar_added:
                spark.sql(f"ADD JAR {_string_literal(str(FUNCTIONS_JAR))}")
                _jar_added = True
        # Registered once per session: Spark warns at every registration that replaces one.
        # foreachBatch hands each batch a session object of its own for the same session.
        if not all(spark.catalog.functionExists(name) for name in FUNCTION_CLASSES):
            for name, class_name in FUNCTION_CLASSES.items():
                spark.udf.registerJavaFunction(name, class_name, IntegerType())
    except Exception as exc:  # a Spark that refuses them loses the alignment, not the batch
        return f"its JVM functions could not be loaded: {_first_line(exc)}"
    return None
