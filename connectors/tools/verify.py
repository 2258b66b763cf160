"""``kafka-eos verify``: does an output topic hold every input record exactly once?

Both topics are read to their end through the client seam (``clients_for``), so the same check
runs on the fake cluster in unit tests and on a real cluster: the input with read_committed and
read_uncommitted, the output with read_committed (what downstream consumers see) and
read_uncommitted (everything written, aborted and open transactions included). End offsets of
both isolation levels are taken once, before reading, so the passes see one snapshot.

Records are matched by an id (:class:`IdSpec`: the key, a JSON field of the value, or a header).
Every (id, partition, offset) goes into a SQLite file in a temporary directory rather than into
Python sets: memory stays bounded (SQLite's page cache is capped) however many millions of
records there are, the ids are kept exactly (no hash collisions that could hide a lost write),
and the checks are a handful of indexed joins and GROUP BYs, never quadratic.

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
(:mod:`connectors.tools.shape_checks`, ``kafka-eos verify --shape``).
"""

from __future__ import annotations

import json
import logging
import sqlite3
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from connectors.kafka.clients import ConsumedRecord, KafkaClients, TopicPartition
from connectors.kafka.kafka_errors import UnknownTopicError
from connectors.tools import shape_checks
from connectors.tools.anomaly import Anomaly, AnomalyReport
from connectors.servers.broker_discovery import is_transient, retry_transient
from connectors.tools.tool_errors import IdFieldError, IdSpecError, TopicNotFoundError, UsageError

log = logging.getLogger(__name__)

#: ``progress(phase, records_done, records_total_or_None)``; totals are offset spans, an upper
#: bound because control markers and aborted records take offsets too.
ProgressCallback = Callable[[str, int, "int | None"], None]

_BATCH = 10_000
_READ_ATTEMPTS = 3
# SQLite's page cache, negative = KiB: what bounds memory however large the topics are.
_CACHE_KIB = 64 * 1024


class _MissingId(Exception):
    """One record has no usable id; the message says why."""


_JSON = json.JSONDecoder()


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
        return json.dumps(document, separators=(",", ":"), sort_keys=True).encode("utf-8")


@dataclass
class VerifyReport(AnomalyReport):
    """The report of a copy: every input id once in the output."""

    def summary_lines(self) -> list[str]:
        """A human summary, one line per fact; the verdict first."""
        c = self.counts
        lines = [
            ("EXACTLY-ONCE" if self.exactly_once else "NOT EXACTLY-ONCE")
            + f": {self.input_topic} -> {self.output_topic} on {self.bootstrap_servers}, ids by "
            + (self.id_field if self.id_field == self.output_id_field
               else f"{self.id_field} (input) / {self.output_id_field} (output)"),
            f"input: {c['input_records']} committed records ({c['input_distinct_ids']} distinct ids), "
            f"{c['input_uncommitted_only']} more only under read_uncommitted (aborted or open)",
            f"output: {c['output_records']} committed records ({c['output_distinct_ids']} distinct ids), "
            f"{c['output_uncommitted_only']} more only under read_uncommitted (aborted or open)",
        ]
        for anomaly in self.anomalies.values():
            if not anomaly.checked:
                lines.append(f"{anomaly.name}: not checked")
                continue
            label = anomaly.name + (f" [{anomaly.jepsen_name}]" if anomaly.jepsen_name else "")
            lines.append(f"{label}: {anomaly.ids} ids, {anomaly.records} records")
            for sample in anomaly.samples[:3]:
                lines.append(f"    e.g. {json.dumps(sample, sort_keys=True)}")
        if c["output_unidentified"]:
            lines.append(f"output records without an id: {c['output_unidentified']}")
        lines.extend(f"warning: {w}" for w in self.warnings)
        return lines


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


class _IdStore:
    """The (id, partition, offset) rows of the four passes, in a SQLite file."""

    TABLES = ("in_c", "in_u", "out_c", "out_u")

    def __init__(self, directory: Path) -> None:
        self.path = directory / "verify.sqlite"
        self.db = sqlite3.connect(self.path, isolation_level=None)
        # A scratch database: nothing to protect against a crash, so no journal and no fsync.
        self.db.execute("PRAGMA journal_mode = OFF")
        self.db.execute("PRAGMA synchronous = OFF")
        self.db.execute(f"PRAGMA cache_size = -{_CACHE_KIB}")
        self.db.execute("PRAGMA temp_store = FILE")
        for table in self.TABLES:
            self.db.execute(f"CREATE TABLE {table} (id BLOB NOT NULL, part INTEGER NOT NULL, off INTEGER NOT NULL)")

    def clear(self, table: str) -> None:
        self.db.execute(f"DELETE FROM {table}")

    def add(self, table: str, rows: list[tuple[bytes, int, int]]) -> None:
        self.db.execute("BEGIN")
        self.db.executemany(f"INSERT INTO {table} (id, part, off) VALUES (?, ?, ?)", rows)
        self.db.execute("COMMIT")

    def index(self) -> None:
        """Indexes and per-id counts, built once after loading (faster than indexing while
        inserting)."""
        for table in self.TABLES:
            self.db.execute(f"CREATE INDEX {table}_by_id ON {table} (id)")
            self.db.execute(f"CREATE INDEX {table}_by_pos ON {table} (part, off)")
            self.db.execute(f"CREATE TABLE {table}_n (id BLOB PRIMARY KEY, n INTEGER NOT NULL) WITHOUT ROWID")
            self.db.execute(f"INSERT INTO {table}_n SELECT id, COUNT(*) FROM {table} GROUP BY id")

    def scalar(self, sql: str) -> int:
        (value,) = self.db.execute(sql).fetchone()
        return int(value or 0)

    def rows(self, sql: str, limit: int) -> list[tuple[Any, ...]]:
        return self.db.execute(f"{sql} LIMIT {int(limit)}").fetchall()

    def close(self) -> None:
        self.db.close()


def _show_id(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return "0x" + raw.hex()


@dataclass
class _PassResult:
    records: int = 0
    unidentified: int = 0
    first_unidentified: str | None = None


def _scan(
    clients: KafkaClients,
    snapshot: _Snapshot,
    read_committed: bool,
    spec: IdSpec,
    store: _IdStore,
    table: str,
    progress: ProgressCallback | None,
) -> _PassResult:
    """Read one topic at one isolation level into ``table``; a transient error restarts the pass
    (bounded), so a half-read pass never counts."""
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
            return _scan_once(clients, ranges, read_committed, spec, store, table, phase, total, progress)
    raise AssertionError("unreachable: tenacity re-raises the last error")


def _scan_once(
    clients: KafkaClients,
    ranges: dict[TopicPartition, tuple[int, int]],
    read_committed: bool,
    spec: IdSpec,
    store: _IdStore,
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
    try:
        rows: list[tuple[bytes, int, int]] = []
        for record in reader.read(ranges):
            result.records += 1
            try:
                rows.append((spec.extract(record), record.partition, record.offset))
            except _MissingId as missing:
                result.unidentified += 1
                if result.first_unidentified is None:
                    result.first_unidentified = f"{record.topic}-{record.partition}@{record.offset}: {missing}"
            if len(rows) >= _BATCH:
                store.add(table, rows)
                rows = []
                if progress:
                    progress(phase, result.records, total)
        if rows:
            store.add(table, rows)
    finally:
        reader.close()
    if progress:
        progress(phase, total, total)
    return result


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
    input_snapshot = retry_transient(lambda: _snapshot(clients, input_topic), f"end offsets of {input_topic}",
                                     max_delay_s=retry_timeout_s)
    output_snapshot = retry_transient(lambda: _snapshot(clients, output_topic), f"end offsets of {output_topic}",
                                      max_delay_s=retry_timeout_s)
    with tempfile.TemporaryDirectory(prefix="kafka-eos-verify-", dir=work_dir) as scratch:
        store = _IdStore(Path(scratch))
        try:
            passes = {
                "in_c": _scan(clients, input_snapshot, True, spec, store, "in_c", progress),
                "in_u": _scan(clients, input_snapshot, False, spec, store, "in_u", progress),
                "out_c": _scan(clients, output_snapshot, True, out_spec, store, "out_c", progress),
                "out_u": _scan(clients, output_snapshot, False, out_spec, store, "out_u", progress),
            }
            if passes["in_c"].records and passes["in_c"].unidentified == passes["in_c"].records:
                raise IdFieldError(
                    f"no record of {input_topic!r} has an id at {spec} (first: "
                    f"{passes['in_c'].first_unidentified}); choose --id-field key, json:<field> or "
                    "header:<name> to match how your records carry their id"
                )
            if progress:
                progress("matching ids", 0, None)
            store.index()
            report = _analyse(store, passes, clients.bootstrap_servers, input_snapshot, output_snapshot,
                              spec, out_spec, check_order, max_samples)
            if progress:
                progress("matching ids", 1, 1)
            return report
        finally:
            store.close()


def _analyse(
    store: _IdStore,
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

    dup_from = "FROM out_c_n o JOIN in_c_n i ON i.id = o.id WHERE o.n > i.n"
    anomalies["duplicates"] = Anomaly(
        "duplicates", "duplicate",
        ids=s.scalar(f"SELECT COUNT(*) {dup_from}"),
        records=s.scalar(f"SELECT SUM(o.n - i.n) {dup_from}"),
        detection="an input id more often in the read_committed output than in the read_committed "
                  "input; records = the extra copies",
        samples=[{"id": _show_id(i), "output_copies": o, "input_copies": n}
                 for i, o, n in s.rows(f"SELECT o.id, o.n, i.n {dup_from} ORDER BY o.id", max_samples)],
    )

    lost_from = "FROM in_c_n i LEFT JOIN out_c_n o ON o.id = i.id WHERE COALESCE(o.n, 0) < i.n"
    lost_samples = []
    for raw, expected, found in s.rows(f"SELECT i.id, i.n, COALESCE(o.n, 0) {lost_from} ORDER BY i.id", max_samples):
        (written,) = s.db.execute("SELECT COUNT(*) FROM out_u WHERE id = ?", (raw,)).fetchone()
        lost_samples.append({"id": _show_id(raw), "input_copies": expected, "output_copies": found,
                             "written_but_not_committed": written - found})
    never = "FROM in_c_n i WHERE NOT EXISTS (SELECT 1 FROM out_c_n o WHERE o.id = i.id)"
    anomalies["lost_writes"] = Anomaly(
        "lost writes", "lost-write",
        ids=s.scalar(f"SELECT COUNT(*) {lost_from}"),
        records=s.scalar(f"SELECT SUM(i.n - COALESCE(o.n, 0)) {lost_from}"),
        detection="a read_committed input id missing from the read_committed output; "
                  "'written_but_not_committed' counts its copies that only read_uncommitted sees "
                  "(written in an aborted or still open transaction)",
        samples=lost_samples,
    )
    uncommitted_lost = s.scalar(
        f"SELECT COUNT(*) {never} AND EXISTS (SELECT 1 FROM out_u_n u WHERE u.id = i.id)")

    aborted_from = ("FROM out_c_n o JOIN in_u_n u ON u.id = o.id "
                    "WHERE NOT EXISTS (SELECT 1 FROM in_c_n i WHERE i.id = o.id)")
    anomalies["aborted_reads"] = Anomaly(
        "aborted reads", "aborted-read",
        ids=s.scalar(f"SELECT COUNT(*) {aborted_from}"),
        records=s.scalar(f"SELECT SUM(o.n) {aborted_from}"),
        detection="a read_committed output record whose id the input has only under "
                  "read_uncommitted: its input record belongs to an aborted or open transaction. "
                  "Leaked records of aborted output transactions cannot be attributed by a consumer; "
                  "they show up as duplicates or unexpected records",
        samples=[{"id": _show_id(i), "output_copies": n}
                 for i, n in s.rows(f"SELECT o.id, o.n {aborted_from} ORDER BY o.id", max_samples)],
    )

    unexpected_from = ("FROM out_c_n o WHERE NOT EXISTS (SELECT 1 FROM in_c_n i WHERE i.id = o.id) "
                       "AND NOT EXISTS (SELECT 1 FROM in_u_n u WHERE u.id = o.id)")
    anomalies["unexpected"] = Anomaly(
        "unexpected records", None,
        ids=s.scalar(f"SELECT COUNT(*) {unexpected_from}"),
        records=s.scalar(f"SELECT SUM(o.n) {unexpected_from}"),
        detection="a read_committed output id that is nowhere in the input, under either isolation level",
        samples=[{"id": _show_id(i), "output_copies": n}
                 for i, n in s.rows(f"SELECT o.id, o.n {unexpected_from} ORDER BY o.id", max_samples)],
    )

    inconsistent = []
    inconsistent_total = 0
    for role, topic in (("in", input_snapshot.topic), ("out", output_snapshot.topic)):
        from_ = (f"FROM {role}_c c LEFT JOIN {role}_u u ON u.part = c.part AND u.off = c.off "
                 "WHERE u.id IS NULL OR u.id != c.id")
        inconsistent_total += s.scalar(f"SELECT COUNT(*) {from_}")
        inconsistent += [{"topic": topic, "partition": p, "offset": o, "read_committed_id": _show_id(c),
                          "read_uncommitted_id": None if u is None else _show_id(u)}
                         for p, o, c, u in s.rows(f"SELECT c.part, c.off, c.id, u.id {from_}", max_samples)]
    anomalies["inconsistent_reads"] = Anomaly(
        "inconsistent reads", None, ids=inconsistent_total, records=inconsistent_total,
        detection="a read_committed record whose partition and offset hold another id (or nothing) "
                  "under read_uncommitted",
        samples=inconsistent[:max_samples],
    )

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


def _order_violations(s: _IdStore, check_order: bool, max_samples: int) -> Anomaly:
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
    count = s.scalar(f"SELECT COUNT(*) {inversions}")
    samples = [{"id": _show_id(i), "output_partition": op, "output_offset": oo, "input_partition": ip,
                "input_offset": io, "previous_input_offset": prev}
               for op, oo, i, ip, io, prev in s.rows(
                   f"SELECT out_part, out_off, id, in_part, in_off, prev_in_off {inversions} "
                   "ORDER BY out_part, out_off", max_samples)]
    return Anomaly("order violations", "nonmonotonic", count, count, detection, samples)


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
            from datetime import datetime

            try:
                return datetime.fromisoformat(text).timestamp()
            except ValueError:
                raise _MissingId(f"event time {text!r} is neither epoch seconds nor ISO-8601") from None


def _read_committed(clients: KafkaClients, topic: str, retry_timeout_s: float) -> list[ConsumedRecord]:
    snapshot = retry_transient(lambda: _snapshot(clients, topic), f"end offsets of {topic}",
                               max_delay_s=retry_timeout_s)
    ranges = snapshot.ranges(read_committed=True)
    if not ranges:
        return []

    def read() -> list[ConsumedRecord]:
        reader = clients.reader(read_committed=True)
        try:
            return list(reader.read(ranges))
        finally:
            reader.close()

    return retry_transient(read, f"reading {topic}", max_delay_s=retry_timeout_s)


def _shape_inputs(records: list[ConsumedRecord], spec: IdSpec, times: EventTimeSpec | None,
                  ) -> tuple[list[shape_checks.InputRecord], int, str | None]:
    inputs, unidentified, first = [], 0, None
    for record in records:
        try:
            key = _show_id(spec.extract(record))
            inputs.append(shape_checks.InputRecord(key, times.extract(record) if times else None))
        except _MissingId as missing:
            unidentified += 1
            first = first or f"{record.topic}-{record.partition}@{record.offset}: {missing}"
    return inputs, unidentified, first


def _shape_outputs(records: list[ConsumedRecord], spec: IdSpec, shape: str,
                   ) -> tuple[list[shape_checks.OutputRecord], int, str | None]:
    outputs, unidentified, first = [], 0, None
    counted = shape not in ("dedup", "join")
    windowed = shape.startswith("windowed")
    for record in records:
        try:
            key = _show_id(spec.extract(record))
            value = json.loads(record.value) if counted or windowed else None
            output = shape_checks.OutputRecord(record.partition, record.offset, key, value)
            if counted:
                shape_checks.count_of(output)
            if windowed:
                shape_checks.window_of(output)
            outputs.append(output)
        except (_MissingId, ValueError, TypeError) as exc:
            unidentified += 1
            first = first or f"{record.topic}-{record.partition}@{record.offset}: {exc}"
    return outputs, unidentified, first


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
) -> shape_checks.ShapeReport:
    """Check ``output_topic`` by the invariant of a stateful query's ``shape``
    (:mod:`connectors.tools.shape_checks`): input keys at ``id_spec`` (both inputs of a join),
    output keys at ``output_id_spec``, event times (windowed shapes) at ``event_time``. Both
    topics are read with read_committed into memory: a key's records, not a batch of them, is
    what a shape is checked on."""
    shape_checks.check_shape_name(shape)
    check_right_input(shape, right_input_topic)
    spec = id_spec if isinstance(id_spec, IdSpec) else IdSpec.parse(id_spec)
    out_spec = output_id_spec if isinstance(output_id_spec, IdSpec) else IdSpec.parse(output_id_spec)
    times = event_time if isinstance(event_time, EventTimeSpec) else EventTimeSpec.parse(event_time)
    inputs, in_unidentified, in_first = _shape_inputs(
        _read_committed(clients, input_topic, retry_timeout_s), spec, times if shape.startswith("windowed") else None)
    right: list[shape_checks.InputRecord] = []
    right_unidentified = 0
    if right_input_topic is not None:
        right, right_unidentified, _ = _shape_inputs(_read_committed(clients, right_input_topic, retry_timeout_s),
                                                     spec, None)
    outputs, out_unidentified, out_first = _shape_outputs(
        _read_committed(clients, output_topic, retry_timeout_s), out_spec, shape)
    if inputs == [] and in_unidentified:
        raise IdFieldError(f"no record of {input_topic!r} has a key at {spec} (first: {in_first}); choose "
                           "--id-field key, json:<field> or header:<name> to match how your records carry it")
    if shape in ("running-count", "complete-count"):
        result = shape_checks.running_counts(inputs, outputs, strictly=shape == "running-count",
                                             max_samples=max_samples)
    elif shape == "windowed-count":
        result = shape_checks.windowed_counts(inputs, outputs, max_samples=max_samples)
    elif shape == "windowed-running-count":
        result = shape_checks.windowed_running_counts(inputs, outputs, max_samples=max_samples)
    elif shape == "dedup":
        result = shape_checks.deduplicated(inputs, outputs, max_samples=max_samples)
    else:
        result = shape_checks.joined(inputs, right, outputs, max_samples=max_samples)
    counts = {
        "input_records": len(inputs) + len(right),
        "input_keys": len({r.key for r in inputs} | {r.key for r in right}),
        "input_unidentified": in_unidentified + right_unidentified,
        "output_records": len(outputs) + out_unidentified,
        "output_keys": len({r.key for r in outputs}),
        "output_unidentified": out_unidentified,
    }
    warnings = list(result.warnings)
    if in_unidentified:
        warnings.append(f"{in_unidentified} input records have no key or event time where the options say "
                        f"(first: {in_first}); they are not counted")
    if out_unidentified:
        warnings.append(f"{out_unidentified} output records cannot be read as the shape {shape} "
                        f"(first: {out_first})")
    return shape_checks.ShapeReport(clients.bootstrap_servers, input_topic, output_topic, str(spec), str(out_spec),
                                    counts, result.anomalies, warnings, shape=shape)
