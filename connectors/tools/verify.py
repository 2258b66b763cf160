"""``kafka-eos verify``: does an output topic hold every input record exactly once?

Both topics are read to their end through the client seam (``clients_for``), so the same check
runs on the fake cluster in unit tests and on a real cluster: the input with read_committed and
read_uncommitted, the output with read_committed (what downstream consumers see) and
read_uncommitted (everything written, aborted and open transactions included). End offsets of
both isolation levels are taken once, before reading, so the passes see one snapshot.

Records are matched by an id (:class:`IdSpec`: the key, a JSON field of the value, or a header).
Every (id, partition, offset) goes, batch by batch as it is read, into a SQLite file in a
temporary directory (:class:`~connectors.tools.record_store.RecordStore`) rather than into Python
sets: memory stays bounded however many millions of records there are, the ids are kept exactly
(no hash collisions that could hide a lost write), and the checks are a handful of indexed joins
and GROUP BYs, never quadratic.

What is reported, and how each anomaly is detected (Jepsen's Kafka checker names in brackets):

- duplicates [duplicate]: an input id more often in the read_committed output than in the
  read_committed input;
- lost writes [lost-write]: a read_committed input id never in the read_committed output (records
  missing only some of several copies of a non-unique input id count as lost records too);
- aborted reads [aborted-read]: a read_committed output record whose id is in the input only under
  read_uncommitted, i.e. the input record belongs to an aborted (or still open) transaction and
  the pipeline passed it on. This is exact. A consumer cannot tell which transaction a visible
  output record came from, so a leaked record of an aborted *output* transaction shows up
  indirectly: as a duplicate when its id was also committed, or as an unexpected record;
- unexpected records: read_committed output ids that are nowhere in the input;
- inconsistent reads: a read_committed record whose (partition, offset) holds another id, or
  nothing, under read_uncommitted, i.e. the two isolation levels disagree (a client or broker bug);
- order violations [nonmonotonic, per partition; only with ``check_order``]: within one output
  partition, two records from the same input partition whose order is the reverse of the input's.
  Only ids that occur once in the input and once in the output take part, so duplicates are not
  counted twice. A pipeline that writes in parallel (several writers per checkpoint) does not
  promise this order; check it only for pipelines that do.

A stateful query's output (counts, windows, the first of each id, join pairs) is not a copy of
its input: :func:`verify_shape` checks it by its shape's invariant instead
(:mod:`connectors.tools.shape_checks`, ``kafka-eos verify --shape``). It reads the topics with the
same streaming pass (:func:`_scan`) into the same kind of store, and its checks are SQL over it
too, so a shape is verified in the bounded memory of a copy; both report in one
:class:`~connectors.tools.anomaly.AnomalyReport`.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from connectors.kafka.clients import ConsumedRecord, KafkaClients, TopicPartition
from connectors.kafka.kafka_errors import UnknownTopicError
from connectors.tools import shape_checks
from connectors.tools.anomaly import Anomaly, AnomalyReport
from connectors.tools.record_store import RecordStore, show_id
from connectors.servers.broker_discovery import is_transient, retry_transient
from connectors.tools.tool_errors import IdFieldError, IdSpecError, TopicNotFoundError, UsageError

log = logging.getLogger(__name__)

#: ``progress(phase, records_done, records_total_or_None)``; totals are offset spans, an upper
#: bound because control markers and aborted records take offsets too.
ProgressCallback = Callable[[str, int, "int | None"], None]

#: Rows handed to the store at once: what a pass holds in Python, however long the topic.
_BATCH = 10_000
_READ_ATTEMPTS = 3


class _MissingId(Exception):
    """One record has no usable id; the message says why."""


_JSON = json.JSONDecoder()
#: How a JSON id that is not a string is compared: its compact JSON text, keys sorted.
_COMPACT_JSON = json.JSONEncoder(separators=(",", ":"), sort_keys=True)


@dataclass(frozen=True)
class IdSpec:
    """Where a record's id is: ``key``, ``json:<field>`` (dots for nested fields) or
    ``header:<name>``. Ids are compared as bytes: a JSON string as its UTF-8, any other JSON
    value as its compact JSON text (so key ``b"42"`` and JSON ``{"id": 42}`` are the same id)."""

    kind: str
    name: str = ""

    @classmethod
    def parse(cls, spec: str) -> "IdSpec":
        text = (spec or "").strip()
        if text == "key":
            return cls("key")
        kind, sep, name = text.partition(":")
        if sep and kind in ("json", "header") and name.strip():
            if kind == "json" and any(not part for part in name.split(".")):
                raise IdSpecError(f"id field {spec!r}: empty part in the JSON field path {name!r}")
            return cls(kind, name)
        raise IdSpecError(
            f"id field {spec!r} is not valid: use 'key' (the record key), 'json:<field>' (a field "
            "of the JSON value, dots for nested fields, e.g. json:id or json:meta.id) or "
            "'header:<name>' (a record header)"
        )

    def __str__(self) -> str:
        return self.kind if self.kind == "key" else f"{self.kind}:{self.name}"

    def extract(self, record: ConsumedRecord) -> bytes:
        if self.kind == "key":
            if record.key is None:
                raise _MissingId("the record has no key")
            return record.key
        if self.kind == "header":
            for name, value in record.headers:
                if name == self.name:
                    if value is None:
                        raise _MissingId(f"header {self.name!r} has no value")
                    return value
            raise _MissingId(f"no header {self.name!r}")
        return self._from_json(record.value)

    def _from_json(self, value: bytes | None) -> bytes:
        if value is None:
            raise _MissingId("the record has no value")
        try:
            # raw_decode ignores what follows the JSON document, so a suffix a job appends to the
            # value (the example job appends "|copied") does not hide the id.
            document, _end = _JSON.raw_decode(value.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise _MissingId(f"the value does not start with JSON ({exc})") from None
        for part in self.name.split("."):
            if not isinstance(document, dict) or part not in document:
                raise _MissingId(f"the JSON value has no field {self.name!r}")
            document = document[part]
        if document is None:
            raise _MissingId(f"JSON field {self.name!r} is null")
        if isinstance(document, str):
            return document.encode("utf-8")
        if type(document) is int:
            # The common numeric id, as json.dumps writes it, without its per-call encoder: this
            # runs once per record, and millions of records are verified.
            return b"%d" % document
        return _COMPACT_JSON.encode(document).encode("utf-8")


#: A copy's report is the one report of the verifier, without a shape.
VerifyReport = AnomalyReport


@dataclass(frozen=True)
class _Snapshot:
    """End offsets of one topic, both isolation levels, taken once."""

    topic: str
    earliest: dict[TopicPartition, int]
    lso: dict[TopicPartition, int]
    high_watermark: dict[TopicPartition, int]

    def ranges(self, read_committed: bool) -> dict[TopicPartition, tuple[int, int]]:
        ends = self.lso if read_committed else self.high_watermark
        return {tp: (self.earliest[tp], ends[tp]) for tp in ends if ends[tp] > self.earliest[tp]}


def _snapshot(clients: KafkaClients, topic: str) -> _Snapshot:
    admin = clients.admin()
    try:
        try:
            partitions = [TopicPartition(topic, p) for p in admin.partitions(topic)]
        except UnknownTopicError as exc:
            raise TopicNotFoundError(
                f"topic {topic!r} does not exist on {clients.bootstrap_servers} ({exc})") from exc
        earliest = admin.list_offsets(partitions, "earliest", read_committed=True)
        lso = admin.list_offsets(partitions, "latest", read_committed=True)
        high_watermark = admin.list_offsets(partitions, "latest", read_committed=False)
    finally:
        admin.close()
    return _Snapshot(topic, earliest, lso, high_watermark)


def committed_record_count(clients: KafkaClients, topic: str) -> int:
    """How many records a read_committed reader finds in ``topic`` now (markers and aborted
    records take offsets, so the offsets alone overstate it)."""
    ranges = _snapshot(clients, topic).ranges(read_committed=True)
    if not ranges:
        return 0
    reader = clients.reader(read_committed=True)
    try:
        return sum(len(batch) for batch in reader.read_batches(ranges, include_headers=False))
    finally:
        reader.close()


#: The copy check's tables: each topic at each isolation level, ``(id, partition, offset)`` rows.
_COPY_TABLES = ("in_c", "in_u", "out_c", "out_u")

#: What a pass stores of a record: a row of its table (id, partition, offset, then the table's
#: other columns); _MissingId when the record has no usable id (or, for a shape, value).
RowOf = Callable[[ConsumedRecord], tuple[Any, ...]]


@dataclass
class _PassResult:
    records: int = 0
    unidentified: int = 0
    first_unidentified: str | None = None


def _scan(
    clients: KafkaClients,
    snapshot: _Snapshot,
    read_committed: bool,
    row_of: RowOf,
    store: RecordStore,
    table: str,
    progress: ProgressCallback | None,
) -> _PassResult:
    """Read one topic at one isolation level into ``table``, a row per record (``row_of``): the one
    streaming pass of every check, copy and shape. A transient error restarts the pass (bounded),
    so a half-read pass never counts."""
    phase = f"{snapshot.topic} ({'read_committed' if read_committed else 'read_uncommitted'})"
    ranges = snapshot.ranges(read_committed)
    total = sum(end - start for start, end in ranges.values())
    retrying = Retrying(
        retry=retry_if_exception(is_transient),
        stop=stop_after_attempt(_READ_ATTEMPTS),
        wait=wait_exponential(multiplier=0.5, max=5),
        reraise=True,
        before_sleep=lambda state: log.warning(
            "reading %s failed (attempt %d): %r; reading it again", phase, state.attempt_number,
            state.outcome.exception() if state.outcome else None),
    )
    for attempt in retrying:
        with attempt:
            store.clear(table)
            return _scan_once(clients, ranges, read_committed, row_of, store, table, phase, total, progress)
    raise AssertionError("unreachable: tenacity re-raises the last error")


def _scan_once(
    clients: KafkaClients,
    ranges: dict[TopicPartition, tuple[int, int]],
    read_committed: bool,
    row_of: RowOf,
    store: RecordStore,
    table: str,
    phase: str,
    total: int,
    progress: ProgressCallback | None,
) -> _PassResult:
    result = _PassResult()
    if progress:
        progress(phase, 0, total)
    if not ranges:
        if progress:
            progress(phase, total, total)
        return result
    reader = clients.reader(read_committed=read_committed)
    batch = _BATCH
    rows: list[tuple[Any, ...]] = []
    append = rows.append  # this loop runs once per record: locals, not attribute lookups
    records = 0
    try:
        for record in reader.read(ranges):
            records += 1
            try:
                append(row_of(record))
            except _MissingId as missing:
                result.unidentified += 1
                if result.first_unidentified is None:
                    result.first_unidentified = f"{record.topic}-{record.partition}@{record.offset}: {missing}"
            if len(rows) >= batch:
                store.add(table, rows)
                rows.clear()
                if progress:
                    progress(phase, records, total)
        if rows:
            store.add(table, rows)
    finally:
        reader.close()
    result.records = records
    log.info("%s: %d records read, %d without a usable id", phase, result.records, result.unidentified)
    if progress:
        progress(phase, total, total)
    return result


def _ids(spec: IdSpec) -> RowOf:
    """A copy's row of a record: (id, partition, offset)."""
    return lambda record: (spec.extract(record), record.partition, record.offset)


def _snapshots(clients: KafkaClients, topics: list[str], retry_timeout_s: float) -> list[_Snapshot]:
    """End offsets of every topic, taken before any is read, so the passes see one snapshot."""
    return [retry_transient(lambda: _snapshot(clients, topic), f"end offsets of {topic}", max_delay_s=retry_timeout_s)
            for topic in topics]


def _no_id_anywhere(inputs: _PassResult) -> bool:
    """Every input record lacks an id (and there is one): the id option is wrong, not the data."""
    return bool(inputs.records) and inputs.unidentified == inputs.records


def verify(
    clients: KafkaClients,
    input_topic: str,
    output_topic: str,
    *,
    id_spec: IdSpec | str = "key",
    output_id_spec: IdSpec | str | None = None,
    check_order: bool = False,
    max_samples: int = 10,
    work_dir: str | Path | None = None,
    progress: ProgressCallback | None = None,
    retry_timeout_s: float = 30.0,
) -> VerifyReport:
    """Read both topics to their end and report anomalies (see the module docstring).

    Raises TopicNotFoundError for a missing topic and IdFieldError when no input record has an id
    where ``id_spec`` says; Kafka errors of the seam pass through, retriable ones after
    ``retry_timeout_s`` of retries."""
    spec = id_spec if isinstance(id_spec, IdSpec) else IdSpec.parse(id_spec)
    out_spec = spec if output_id_spec is None else (
        output_id_spec if isinstance(output_id_spec, IdSpec) else IdSpec.parse(output_id_spec))
    input_snapshot, output_snapshot = _snapshots(clients, [input_topic, output_topic], retry_timeout_s)
    with RecordStore.scratch(work_dir) as store:
        for table in _COPY_TABLES:
            store.create(table)
        passes = {
            "in_c": _scan(clients, input_snapshot, True, _ids(spec), store, "in_c", progress),
            "in_u": _scan(clients, input_snapshot, False, _ids(spec), store, "in_u", progress),
            "out_c": _scan(clients, output_snapshot, True, _ids(out_spec), store, "out_c", progress),
            "out_u": _scan(clients, output_snapshot, False, _ids(out_spec), store, "out_u", progress),
        }
        if _no_id_anywhere(passes["in_c"]):
            raise IdFieldError(
                f"no record of {input_topic!r} has an id at {spec} (first: "
                f"{passes['in_c'].first_unidentified}); choose --id-field key, json:<field> or "
                "header:<name> to match how your records carry their id"
            )
        if progress:
            progress("matching ids", 0, None)
        _index_copy(store)
        report = _analyse(store, passes, clients.bootstrap_servers, input_snapshot, output_snapshot,
                          spec, out_spec, check_order, max_samples)
        if progress:
            progress("matching ids", 1, 1)
        return report


def _index_copy(store: RecordStore) -> None:
    """Indexes and per-id counts, built once after loading (faster than indexing while inserting)."""
    for table in _COPY_TABLES:
        store.execute(f"CREATE INDEX {table}_by_id ON {table} (id)")
        store.execute(f"CREATE INDEX {table}_by_pos ON {table} (part, off)")
        store.execute(f"CREATE TABLE {table}_n (id BLOB PRIMARY KEY, n INTEGER NOT NULL) WITHOUT ROWID")
        store.execute(f"INSERT INTO {table}_n SELECT id, COUNT(*) FROM {table} GROUP BY id")


def _analyse(
    store: RecordStore,
    passes: dict[str, _PassResult],
    bootstrap: str,
    input_snapshot: _Snapshot,
    output_snapshot: _Snapshot,
    spec: IdSpec,
    out_spec: IdSpec,
    check_order: bool,
    max_samples: int,
) -> VerifyReport:
    s = store
    counts = {
        "input_records": passes["in_c"].records,
        "input_uncommitted_only": max(0, passes["in_u"].records - passes["in_c"].records),
        "input_distinct_ids": s.scalar("SELECT COUNT(*) FROM in_c_n"),
        "input_non_unique_ids": s.scalar("SELECT COUNT(*) FROM in_c_n WHERE n > 1"),
        "input_unidentified": passes["in_c"].unidentified,
        "output_records": passes["out_c"].records,
        "output_uncommitted_only": max(0, passes["out_u"].records - passes["out_c"].records),
        "output_distinct_ids": s.scalar("SELECT COUNT(*) FROM out_c_n"),
        "output_unidentified": passes["out_c"].unidentified,
    }
    anomalies: dict[str, Anomaly] = {}

    anomalies["duplicates"] = s.anomaly(
        "duplicates", "duplicate",
        "an input id more often in the read_committed output than in the read_committed input; records = the "
        "extra copies",
        "FROM out_c_n o JOIN in_c_n i ON i.id = o.id WHERE o.n > i.n", records="o.n - i.n",
        sample="o.id, o.n, i.n", order="o.id", max_samples=max_samples,
        show=lambda raw, copies, inputs: {"id": show_id(raw), "output_copies": copies, "input_copies": inputs})

    anomalies["lost_writes"] = s.anomaly(
        "lost writes", "lost-write",
        "a read_committed input id missing from the read_committed output; 'written_but_not_committed' counts "
        "its copies that only read_uncommitted sees (written in an aborted or still open transaction)",
        "FROM in_c_n i LEFT JOIN out_c_n o ON o.id = i.id WHERE COALESCE(o.n, 0) < i.n",
        records="i.n - COALESCE(o.n, 0)",
        sample="i.id, i.n, COALESCE(o.n, 0), (SELECT COUNT(*) FROM out_u u WHERE u.id = i.id)", order="i.id",
        max_samples=max_samples,
        show=lambda raw, expected, found, written: {"id": show_id(raw), "input_copies": expected,
                                                    "output_copies": found,
                                                    "written_but_not_committed": written - found})
    uncommitted_lost = s.scalar(
        "SELECT COUNT(*) FROM in_c_n i WHERE NOT EXISTS (SELECT 1 FROM out_c_n o WHERE o.id = i.id) "
        "AND EXISTS (SELECT 1 FROM out_u_n u WHERE u.id = i.id)")

    output_copies = {"records": "o.n", "sample": "o.id, o.n", "order": "o.id", "max_samples": max_samples,
                     "show": lambda raw, copies: {"id": show_id(raw), "output_copies": copies}}
    anomalies["aborted_reads"] = s.anomaly(
        "aborted reads", "aborted-read",
        "a read_committed output record whose id the input has only under read_uncommitted: its input record "
        "belongs to an aborted or open transaction. Leaked records of aborted output transactions cannot be "
        "attributed by a consumer; they show up as duplicates or unexpected records",
        "FROM out_c_n o JOIN in_u_n u ON u.id = o.id WHERE NOT EXISTS (SELECT 1 FROM in_c_n i WHERE i.id = o.id)",
        **output_copies)
    anomalies["unexpected"] = s.anomaly(
        "unexpected records", None,
        "a read_committed output id that is nowhere in the input, under either isolation level",
        "FROM out_c_n o WHERE NOT EXISTS (SELECT 1 FROM in_c_n i WHERE i.id = o.id) "
        "AND NOT EXISTS (SELECT 1 FROM in_u_n u WHERE u.id = o.id)",
        **output_copies)

    topics = {"in": input_snapshot.topic, "out": output_snapshot.topic}
    disagreeing = " UNION ALL ".join(
        f"SELECT '{role}' AS role, c.part AS part, c.off AS off, c.id AS c_id, u.id AS u_id FROM {role}_c c "
        f"LEFT JOIN {role}_u u ON u.part = c.part AND u.off = c.off WHERE u.id IS NULL OR u.id != c.id"
        for role in topics)
    anomalies["inconsistent_reads"] = s.anomaly(
        "inconsistent reads", None,
        "a read_committed record whose partition and offset hold another id (or nothing) under read_uncommitted",
        f"FROM ({disagreeing})", records="1", sample="role, part, off, c_id, u_id", order="role, part, off",
        max_samples=max_samples,
        show=lambda role, part, off, c_id, u_id: {
            "topic": topics[role], "partition": part, "offset": off, "read_committed_id": show_id(c_id),
            "read_uncommitted_id": None if u_id is None else show_id(u_id)})

    anomalies["order_violations"] = _order_violations(s, check_order, max_samples)

    warnings = []
    if counts["input_non_unique_ids"]:
        warnings.append(f"{counts['input_non_unique_ids']} input ids occur more than once; duplicates "
                        "and losses are counted per copy")
    if counts["input_unidentified"]:
        warnings.append(f"{counts['input_unidentified']} input records have no id at {spec} "
                        f"(first: {passes['in_c'].first_unidentified}); they cannot be matched")
    if counts["output_unidentified"]:
        warnings.append(f"{counts['output_unidentified']} output records have no id at {out_spec} "
                        f"(first: {passes['out_c'].first_unidentified}); exactly-once cannot be shown")
    if uncommitted_lost:
        warnings.append(f"{uncommitted_lost} lost ids were written to the output in transactions that "
                        "never committed (aborted, timed out, or still open)")
    for snapshot, role in ((input_snapshot, "input"), (output_snapshot, "output")):
        stalled = sorted(str(tp) for tp in snapshot.lso if snapshot.lso[tp] < snapshot.high_watermark[tp])
        if stalled:
            warnings.append(f"{role} partitions {', '.join(stalled)} have an open transaction (last stable "
                            "offset below the high watermark): read_committed readers stop there until "
                            "it ends")
    return VerifyReport(bootstrap, input_snapshot.topic, output_snapshot.topic, str(spec), str(out_spec),
                        counts, anomalies, warnings)


def _order_violations(s: RecordStore, check_order: bool, max_samples: int) -> Anomaly:
    detection = ("within one output partition, a record from the same input partition as the record "
                 "before it but from an earlier input offset (ids unique in input and output only)")
    if not check_order:
        return Anomaly("order violations", "nonmonotonic", 0, 0, detection, checked=False)
    inversions = """
        FROM (SELECT c.part AS out_part, c.off AS out_off, c.id AS id, i.part AS in_part, i.off AS in_off,
                     LAG(i.off) OVER (PARTITION BY c.part, i.part ORDER BY c.off) AS prev_in_off
              FROM out_c c JOIN in_c i ON i.id = c.id
              WHERE c.id IN (SELECT id FROM in_c_n WHERE n = 1) AND c.id IN (SELECT id FROM out_c_n WHERE n = 1))
        WHERE in_off < prev_in_off"""
    return s.anomaly(
        "order violations", "nonmonotonic", detection, inversions, records="1",
        sample="out_part, out_off, id, in_part, in_off, prev_in_off", order="out_part, out_off",
        max_samples=max_samples,
        show=lambda op, oo, raw, ip, io, prev: {"id": show_id(raw), "output_partition": op, "output_offset": oo,
                                                "input_partition": ip, "input_offset": io,
                                                "previous_input_offset": prev})


# -- stateful shapes (``--shape``) ----------------------------------------------------------------

@dataclass(frozen=True)
class EventTimeSpec:
    """Where an input record's event time is: ``timestamp`` (the Kafka record timestamp) or
    ``json:<field>`` (epoch seconds, or ISO-8601 text, in the JSON value)."""

    field_spec: IdSpec | None = None

    @classmethod
    def parse(cls, spec: str) -> "EventTimeSpec":
        text = (spec or "").strip()
        if text == "timestamp":
            return cls(None)
        if text.startswith("json:"):
            return cls(IdSpec.parse(text))
        raise IdSpecError(f"event time field {spec!r} is not valid: use 'timestamp' (the record timestamp) or "
                          "'json:<field>' (epoch seconds or ISO-8601 text in the JSON value, e.g. json:ts)")

    def __str__(self) -> str:
        return "timestamp" if self.field_spec is None else str(self.field_spec)

    def extract(self, record: ConsumedRecord) -> float:
        if self.field_spec is None:
            return record.timestamp_ms / 1000
        text = self.field_spec.extract(record).decode("utf-8")
        try:
            return float(text)
        except ValueError:
            try:
                return datetime.fromisoformat(text).timestamp()
            except ValueError:
                raise _MissingId(f"event time {text!r} is neither epoch seconds nor ISO-8601") from None


def _shape_inputs(spec: IdSpec, times: EventTimeSpec | None) -> RowOf:
    """A shape's input row of a record: (key, partition, offset, event time or None)."""
    if times is None:
        return lambda record: (spec.extract(record), record.partition, record.offset, None)
    return lambda record: (spec.extract(record), record.partition, record.offset, times.extract(record))


def _shape_outputs(spec: IdSpec, shape: str) -> RowOf:
    """A shape's output row of a record: (key, partition, offset, count, window start, window end)."""
    fields = shape_checks.output_fields(shape)

    def row(record: ConsumedRecord) -> tuple[Any, ...]:
        key = spec.extract(record)
        try:
            return (key, record.partition, record.offset, *fields(record.value))
        except (ValueError, TypeError) as exc:
            raise _MissingId(str(exc)) from None
    return row


def check_right_input(shape: str | None, right_input_topic: str | None) -> None:
    """A join's other input goes with ``--shape join``, and only with it."""
    if (shape == "join") != (right_input_topic is not None):
        raise UsageError("--right-input TOPIC goes with --shape join, and only with it (the join's other input)")


def verify_shape(
    clients: KafkaClients,
    input_topic: str,
    output_topic: str,
    shape: str,
    *,
    id_spec: IdSpec | str = "key",
    output_id_spec: IdSpec | str = "key",
    event_time: EventTimeSpec | str = "timestamp",
    right_input_topic: str | None = None,
    max_samples: int = 10,
    retry_timeout_s: float = 30.0,
    work_dir: str | Path | None = None,
    progress: ProgressCallback | None = None,
) -> shape_checks.ShapeReport:
    """Check ``output_topic`` by the invariant of a stateful query's ``shape``
    (:mod:`connectors.tools.shape_checks`): input keys at ``id_spec`` (both inputs of a join),
    output keys at ``output_id_spec``, event times (windowed shapes) at ``event_time``. Every topic
    is read with read_committed by the copy check's streaming pass into a store in ``work_dir``
    (default: the system's temporary directory), and checked there by SQL."""
    shape_checks.check_shape_name(shape)
    check_right_input(shape, right_input_topic)
    spec = id_spec if isinstance(id_spec, IdSpec) else IdSpec.parse(id_spec)
    out_spec = output_id_spec if isinstance(output_id_spec, IdSpec) else IdSpec.parse(output_id_spec)
    times = event_time if isinstance(event_time, EventTimeSpec) else EventTimeSpec.parse(event_time)
    inputs_of = _shape_inputs(spec, times if shape in shape_checks.WINDOWED_SHAPES else None)
    topics = [input_topic, output_topic] + ([right_input_topic] if right_input_topic is not None else [])
    input_snapshot, output_snapshot, *right_snapshot = _snapshots(clients, topics, retry_timeout_s)
    with RecordStore.scratch(work_dir) as store:
        shape_checks.create_tables(store)
        inputs = _scan(clients, input_snapshot, True, inputs_of, store, shape_checks.INPUT, progress)
        right = (_scan(clients, right_snapshot[0], True, _shape_inputs(spec, None), store, shape_checks.RIGHT,
                       progress) if right_snapshot else _PassResult())
        outputs = _scan(clients, output_snapshot, True, _shape_outputs(out_spec, shape), store, shape_checks.OUTPUT,
                        progress)
        if _no_id_anywhere(inputs):
            raise IdFieldError(f"no record of {input_topic!r} has a key at {spec} (first: "
                               f"{inputs.first_unidentified}); choose --id-field key, json:<field> or header:<name> "
                               "to match how your records carry it")
        if progress:
            progress(f"checking the {shape} shape", 0, None)
        result = shape_checks.check(store, shape, max_samples=max_samples)
        input_keys, output_keys = shape_checks.key_counts(store)
        if progress:
            progress(f"checking the {shape} shape", 1, 1)
    counts = {
        "input_records": inputs.records - inputs.unidentified + right.records - right.unidentified,
        "input_keys": input_keys,
        "input_unidentified": inputs.unidentified + right.unidentified,
        "output_records": outputs.records,
        "output_keys": output_keys,
        "output_unidentified": outputs.unidentified,
    }
    warnings = list(result.warnings)
    if inputs.unidentified:
        warnings.append(f"{inputs.unidentified} input records have no key or event time where the options say "
                        f"(first: {inputs.first_unidentified}); they are not counted")
    if outputs.unidentified:
        warnings.append(f"{outputs.unidentified} output records cannot be read as the shape {shape} "
                        f"(first: {outputs.first_unidentified})")
    return shape_checks.ShapeReport(clients.bootstrap_servers, input_topic, output_topic, str(spec), str(out_spec),
                                    counts, result.anomalies, warnings, shape=shape)
