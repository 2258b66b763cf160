"""The invariants of a stateful query's output, by its shape (``kafka-eos verify --shape``).

A copy job's output is checked record by record (``verify.py``): each input id once. A stateful
query's output is not the input: it is counts, windows, the first of each id, pairs. A batch
written twice, or state restored to the wrong batch, shows in those as a count that repeats, a
(key, window) written twice, a final count that is not the number of inputs. These checks read
the output as a read_committed consumer does, per partition in offset order (records of one key
share a partition, so their order is the order they were written in):

- ``running-count`` (update mode): per key, the counts rise strictly and the last is the key's
  number of input records;
- ``complete-count`` (complete mode, every batch writes every key): per key the counts never
  fall and the last is the key's number of input records;
- ``windowed-count`` (append mode with a watermark): each (key, window) once, with the count of
  input records of that key whose event time is in the window; every input (key, window) that
  ends no later than the last window written is there (the windows after it may still be open);
- ``windowed-running-count`` (update mode): per (key, window), counts rise strictly and the last
  is the input count;
- ``dedup``: each input key once, and no other;
- ``join`` (inner, on the key): each key ``left records x right records`` times, and no other.

Output values are JSON: ``count`` for the counts, ``window.start`` and ``window.end`` (epoch
seconds, or ISO-8601 text) for windows; a record's key is where ``--output-id-field`` says
(default: the record key). Tumbling windows are assumed aligned to the epoch, as Spark's
``window(col, length)`` are; their length is read from the output.

The checks are SQL over the tables of a :class:`~connectors.tools.record_store.RecordStore` that
``verify.verify_shape`` streams the topics into (:data:`INPUT`, :data:`RIGHT`, :data:`OUTPUT`):
per-key counts are GROUP BYs, a key's counts in offset order are a window function (LAG) over
``(partition, offset)``, and each anomaly is read out the way a copy's are
(``RecordStore.anomaly``). So a shape is checked in the memory of a copy, however many records
and keys there are. The functions over Python iterables (:func:`running_counts` and the rest) load
them into such a store and run the same SQL.
"""

from __future__ import annotations

import json
import logging
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Iterable, Iterator

from connectors.tools.anomaly import Anomaly, AnomalyReport
from connectors.tools.record_store import RecordStore, show_id
from connectors.tools.tool_errors import UsageError
from twophase.errors import InvalidValueError

log = logging.getLogger(__name__)

SHAPES = ("running-count", "complete-count", "windowed-count", "windowed-running-count", "dedup", "join")
#: One line naming the valid values, for every place that takes a shape.
SHAPE_HELP = f"one of {', '.join(SHAPES)}"
#: Shapes whose output values carry a ``count``; of these, the windowed ones also a ``window``.
COUNTED_SHAPES = frozenset(SHAPES) - {"dedup", "join"}
WINDOWED_SHAPES = frozenset({"windowed-count", "windowed-running-count"})

#: The store's tables of a shape: the input (with its event time, windowed shapes only), a join's
#: other input, and the output (with its count and window, where the shape has them).
INPUT, RIGHT, OUTPUT = "shape_in", "shape_right", "shape_out"
_INPUT_COLUMNS = ("t REAL",)
_OUTPUT_COLUMNS = ("n INTEGER", "ws REAL", "we REAL")

#: A report of a shape is the one report of the verifier, with its ``shape`` set.
ShapeReport = AnomalyReport


def check_shape_name(shape: str) -> str:
    """``shape`` if it is one; else UsageError with one line naming the valid values."""
    if shape not in SHAPES:
        raise UsageError(f"{shape!r} is not a shape: use {SHAPE_HELP}")
    return shape


@dataclass(frozen=True)
class InputRecord:
    key: str
    #: Event time in epoch seconds (windowed shapes only).
    time: float | None = None


@dataclass(frozen=True)
class OutputRecord:
    partition: int
    offset: int
    key: str
    value: Any


@dataclass
class ShapeResult:
    """What a check found: its anomalies, and the warnings it adds."""

    anomalies: dict[str, Anomaly]
    warnings: list[str] = field(default_factory=list)


# -- output values -------------------------------------------------------------------------------

def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or value is None:
        raise InvalidValueError(f"{what} is {value!r}, not a number")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value).timestamp()
        except ValueError:
            pass
        try:
            return float(value)
        except ValueError:
            raise InvalidValueError(f"{what} is {value!r}, neither a number nor ISO-8601") from None
    raise InvalidValueError(f"{what} is {value!r}, not a number")


def _count_in(value: Any) -> int:
    if not isinstance(value, dict) or "count" not in value:
        raise InvalidValueError("the value has no count field")
    count = value["count"]
    if isinstance(count, bool) or not isinstance(count, int):
        raise InvalidValueError(f"count is {count!r}, not an integer")
    return count


def _window_in(value: Any) -> tuple[float, float]:
    window = value.get("window") if isinstance(value, dict) else None
    if not isinstance(window, dict) or "start" not in window or "end" not in window:
        raise InvalidValueError("the value has no window.start and window.end")
    return _number(window["start"], "window.start"), _number(window["end"], "window.end")


def count_of(record: OutputRecord) -> int:
    """The ``count`` of an output value; InvalidValueError when it has none."""
    return _count_in(record.value)


def window_of(record: OutputRecord) -> tuple[float, float]:
    """(start, end) of an output value's ``window``, epoch seconds; InvalidValueError when it has none."""
    return _window_in(record.value)


OutputFields = tuple[int | None, float | None, float | None]


def _fields(value: Any, shape: str) -> OutputFields:
    """The store's columns of an output value (count, window start, window end): None where the
    shape has none; InvalidValueError when the value lacks what the shape has."""
    if shape not in COUNTED_SHAPES:
        return None, None, None
    count = _count_in(value)
    start, end = _window_in(value) if shape in WINDOWED_SHAPES else (None, None)
    return count, start, end


def output_fields(shape: str) -> Callable[[bytes | None], OutputFields]:
    """How a topic's output value of ``shape`` (JSON bytes) becomes the store's columns: ValueError
    or TypeError when it cannot (not JSON, no value, no count or window)."""
    if shape not in COUNTED_SHAPES:
        return lambda value: (None, None, None)
    return lambda value: _fields(json.loads(value), shape)  # type: ignore[arg-type]


# -- the store's tables --------------------------------------------------------------------------

def create_tables(store: RecordStore) -> None:
    """The tables a shape's records are streamed into: :data:`INPUT` and :data:`RIGHT` rows are
    ``(key, partition, offset, event time or NULL)``, :data:`OUTPUT` rows ``(key, partition, offset,
    count, window start, window end)`` (NULL where the shape has none)."""
    store.create(INPUT, _INPUT_COLUMNS)
    store.create(RIGHT, _INPUT_COLUMNS)
    store.create(OUTPUT, _OUTPUT_COLUMNS)


def key_counts(store: RecordStore) -> tuple[int, int]:
    """(distinct input keys, both inputs of a join together; distinct output keys)."""
    # Off the indexes check() built: no sort of either topic again.
    only_right = (f"SELECT COUNT(*) FROM (SELECT DISTINCT id FROM {RIGHT}) r "
                  f"WHERE NOT EXISTS (SELECT 1 FROM {INPUT} i WHERE i.id = r.id)")
    return (store.scalar(f"SELECT COUNT(DISTINCT id) FROM {INPUT}") + store.scalar(only_right),
            store.scalar(f"SELECT COUNT(DISTINCT id) FROM {OUTPUT}"))


@contextmanager
def _loaded(inputs: Iterable[InputRecord], outputs: Iterable[OutputRecord], shape: str,
            right: Iterable[InputRecord] = (), key_of: Callable[[InputRecord], str] | None = None,
            ) -> Iterator[RecordStore]:
    """A scratch store holding Python records, for the functions below: the same tables the
    topics are streamed into (inputs at partition 0, in their order)."""
    key = key_of or (lambda r: r.key)
    with RecordStore.scratch() as store:
        create_tables(store)
        store.add_all(INPUT, ((key(r).encode(), 0, i, r.time) for i, r in enumerate(inputs)))
        store.add_all(RIGHT, ((r.key.encode(), 0, i, r.time) for i, r in enumerate(right)))
        store.add_all(OUTPUT, ((r.key.encode(), r.partition, r.offset, *_fields(r.value, shape)) for r in outputs))
        yield store


# -- the checks ----------------------------------------------------------------------------------

def check(store: RecordStore, shape: str, *, max_samples: int = 10) -> ShapeResult:
    """The anomalies of ``shape`` in the store's tables (:func:`create_tables`, filled)."""
    columns = _WINDOW_KEY if shape in WINDOWED_SHAPES else _KEY
    _index(store, columns)
    if shape in ("running-count", "complete-count"):
        return _rising(store, columns, strictly=shape == "running-count", max_samples=max_samples, what="a key")
    if shape == "windowed-count":
        return _windowed_counts(store, max_samples)
    if shape == "windowed-running-count":
        length = _window_length(store)
        if length is None:
            return ShapeResult({}, ["no window was written"])
        return _rising(store, columns, strictly=True, max_samples=max_samples, what="a (key, window)",
                       length=length)
    if shape == "dedup":
        return _keys_check(store, f"SELECT DISTINCT id, 1 AS n FROM {INPUT}", max_samples, "a key")
    return _keys_check(store, f"SELECT l.id AS id, l.n * r.n AS n FROM (SELECT id, COUNT(*) AS n FROM {INPUT} "
                              f"GROUP BY id) l JOIN (SELECT id, COUNT(*) AS n FROM {RIGHT} GROUP BY id) r ON r.id = l.id",
                       max_samples, "a key's pair")


def running_counts(inputs: Iterable[InputRecord], outputs: Iterable[OutputRecord], *, strictly: bool = True,
                   max_samples: int = 10, key_of: Callable[[InputRecord], str] | None = None) -> ShapeResult:
    """``running-count`` (``strictly``) and ``complete-count``: see the module docstring. ``key_of``
    maps an input record to the output's key (default: its key)."""
    with _loaded(inputs, outputs, "running-count", key_of=key_of) as store:
        return check(store, "running-count" if strictly else "complete-count", max_samples=max_samples)


def windowed_counts(inputs: Iterable[InputRecord], outputs: Iterable[OutputRecord], *,
                    max_samples: int = 10) -> ShapeResult:
    """``windowed-count``: see the module docstring."""
    with _loaded(inputs, outputs, "windowed-count") as store:
        return check(store, "windowed-count", max_samples=max_samples)


def windowed_running_counts(inputs: Iterable[InputRecord], outputs: Iterable[OutputRecord], *,
                            max_samples: int = 10) -> ShapeResult:
    """``windowed-running-count``: see the module docstring."""
    with _loaded(inputs, outputs, "windowed-running-count") as store:
        return check(store, "windowed-running-count", max_samples=max_samples)


def deduplicated(inputs: Iterable[InputRecord], outputs: Iterable[OutputRecord], *,
                 max_samples: int = 10) -> ShapeResult:
    """``dedup``: each input key once in the output."""
    with _loaded(inputs, outputs, "dedup") as store:
        return check(store, "dedup", max_samples=max_samples)


def joined(left: Iterable[InputRecord], right: Iterable[InputRecord], outputs: Iterable[OutputRecord], *,
           max_samples: int = 10) -> ShapeResult:
    """``join``: each key as many times as it has pairs of left and right records."""
    with _loaded(left, outputs, "join", right=right) as store:
        return check(store, "join", max_samples=max_samples)


# What a count is checked per: the key, or the key and the window.
_KEY = ("id",)
_WINDOW_KEY = ("id", "ws", "we")


def _same(columns: tuple[str, ...], left: str, right: str) -> str:
    return " AND ".join(f"{left}.{c} = {right}.{c}" for c in columns)


def _shown(columns: tuple[str, ...], row: tuple[Any, ...]) -> Any:
    """A key as a sample shows it: its text, or [key, window start, window end]."""
    return show_id(row[0]) if len(columns) == 1 else [show_id(row[0]), *row[1:]]


def _series_sample(store: RecordStore, columns: tuple[str, ...], row: tuple[Any, ...],
                  strictly: bool | None = None) -> dict[str, Any]:
    """A sample of one key's output counts, in offset order: the first 20, and with ``strictly``
    (True or False) the partition and offset of the first count that does not rise (strictly, or
    at all). The key's records are read off the index one at a time and not held."""
    where = " AND ".join(f"{c} = ?" for c in columns)
    sample: dict[str, Any] = {"key": _shown(columns, row), "counts": []}
    previous: int | None = None
    looking = strictly is not None
    for count, part, off in store.execute(f"SELECT n, part, off FROM {OUTPUT} WHERE {where} ORDER BY part, off",
                                          row[:len(columns)]):
        if len(sample["counts"]) < 20:
            sample["counts"].append(count)
        if looking and previous is not None and (count <= previous if strictly else count < previous):
            sample["partition"], sample["offset"] = part, off
            looking = False
        if not looking and len(sample["counts"]) >= 20:
            break
        previous = count
    return sample


def _window_length(store: RecordStore) -> float | None:
    lengths = [length for (length,) in store.execute(f"SELECT DISTINCT we - ws FROM {OUTPUT} ORDER BY 1 LIMIT 11")]
    if len(lengths) > 1:
        more = " ..." if len(lengths) > 10 else ""
        raise InvalidValueError(f"windows of several lengths {lengths[:10]}{more}: the windowed shapes take tumbling "
                                "windows")
    return lengths[0] if lengths else None


def _per_key_table(store: RecordStore, name: str, columns: tuple[str, ...], values: str) -> None:
    """A table of one row per key (``columns``), keyed by it (filled in key order, it is appended
    to, and looked up by key without another index); ``values`` are its other columns."""
    keys = ", ".join(f"{c} {t} NOT NULL" for c, t in zip(columns, ("BLOB", "REAL", "REAL")))
    store.execute(f"CREATE TABLE {name} ({keys}, {values}, PRIMARY KEY ({', '.join(columns)})) WITHOUT ROWID")


def _expected(store: RecordStore, columns: tuple[str, ...], length: float | None) -> None:
    """Table ``expected``: per key (or per key and window, for ``length``), its input records."""
    _per_key_table(store, "expected", columns, "n INTEGER NOT NULL")
    if length is None:
        store.execute(f"INSERT INTO expected SELECT id, COUNT(*) FROM {INPUT} GROUP BY id")
        return
    untimed = store.execute(f"SELECT id FROM {INPUT} WHERE t IS NULL LIMIT 1").fetchone()
    if untimed is not None:
        raise InvalidValueError(f"input record of key {show_id(untimed[0])!r} has no event time")
    # Python's floor division, as Spark's epoch-aligned tumbling windows: the same window bounds
    # (bit for bit) as the output's, which are compared for equality.
    store.db.create_function("window_start", 2, lambda t, size: (t // size) * size, deterministic=True)
    store.execute(f"INSERT INTO expected SELECT id, ws, ws + ?, COUNT(*) FROM "
                  f"(SELECT id, window_start(t, ?) AS ws FROM {INPUT}) GROUP BY id, ws", (length, length))


def _index(store: RecordStore, columns: tuple[str, ...]) -> None:
    """Built once, after loading (faster than indexing while inserting): the inputs by key, for
    the per-key input counts and the distinct keys; the output by key (``columns``) and offset,
    covering, so a key's counts in offset order are read off the index alone, by every check and
    sample, in key order (no sort of the whole output)."""
    for table in (INPUT, RIGHT):
        store.execute(f"CREATE INDEX {table}_by_id ON {table} (id)")
    store.execute(f"CREATE INDEX {OUTPUT}_by_key ON {OUTPUT} ({', '.join(columns)}, part, off, n)")


def _rising(store: RecordStore, columns: tuple[str, ...], *, strictly: bool, max_samples: int, what: str,
            length: float | None = None) -> ShapeResult:
    """Per key (``columns``), the output's counts in offset order rise (``strictly``, else never
    fall), and the last is the key's number of input records."""
    _expected(store, columns, length)
    key = ", ".join(columns)
    # Per key, its records and its last count, straight off the output's index. SQLite takes an
    # aggregate's bare column from the row of its one max() (a documented rule): the count of the
    # highest offset per (key, partition), then of the highest partition per key.
    _per_key_table(store, "written", columns, "records INTEGER NOT NULL, last INTEGER")
    store.execute(f"INSERT INTO written SELECT {key}, records, n FROM (SELECT {key}, SUM(records) AS records, n, MAX(part) "
                  f"FROM (SELECT {key}, part, COUNT(*) AS records, n, MAX(off) FROM {OUTPUT} GROUP BY {key}, part) "
                  f"GROUP BY {key})")
    # A count that does not rise over the one before it (LAG, in offset order): rare, so the
    # GROUP BY sees only those.
    not_rising = (f"FROM (SELECT {key}, COUNT(*) AS bad FROM (SELECT {key}, n, LAG(n) OVER (PARTITION BY {key} "
                  f"ORDER BY part, off) AS prev FROM {OUTPUT}) WHERE {'n <= prev' if strictly else 'n < prev'} "
                  f"GROUP BY {key}) w")
    w_key = ", ".join(f"w.{c}" for c in columns)
    e_key = ", ".join(f"e.{c}" for c in columns)
    n_key = len(columns)
    word = "rise strictly" if strictly else "never fall"
    return ShapeResult({
        "duplicates": store.anomaly(
            "repeated or falling counts", "nonmonotonic",
            f"{what}'s counts, in offset order, that do not {word} (a batch written twice, or state restored to "
            "another batch than the one replayed)",
            not_rising, records="w.bad", sample=w_key, order=w_key,
            show=lambda *row: _series_sample(store, columns, row, strictly), max_samples=max_samples),
        "wrong_counts": store.anomaly(
            "wrong final counts", None,
            f"{what} whose last count is not its number of input records (too high: inputs counted twice; too "
            "low: inputs lost)",
            f"FROM written w JOIN expected e ON {_same(columns, 'e', 'w')} WHERE w.last != e.n", records="1",
            sample=f"{w_key}, w.last, e.n", order=w_key,
            show=lambda *row: {"key": _shown(columns, row), "last": row[n_key], "inputs": row[n_key + 1]},
            max_samples=max_samples),
        "lost_writes": store.anomaly(
            "lost writes", "lost-write", f"{what} of the input never written",
            f"FROM expected e WHERE NOT EXISTS (SELECT 1 FROM written w WHERE {_same(columns, 'w', 'e')})",
            records="e.n", sample=f"{e_key}, e.n", order=e_key,
            show=lambda *row: {"key": _shown(columns, row), "inputs": row[n_key]}, max_samples=max_samples),
        "unexpected": store.anomaly(
            "unexpected records", None, f"{what} in the output that is not in the input",
            f"FROM written w WHERE NOT EXISTS (SELECT 1 FROM expected e WHERE {_same(columns, 'e', 'w')})",
            records="w.records", sample=w_key, order=w_key,
            show=lambda *row: _series_sample(store, columns, row), max_samples=max_samples),
    })


def _windowed_counts(store: RecordStore, max_samples: int) -> ShapeResult:
    """``windowed-count``: each (key, window) once, with its input count; see the module docstring."""
    length = _window_length(store)
    if length is None:
        return ShapeResult({}, ["no window was written: the watermark may not have passed any window's end"])
    columns = _WINDOW_KEY
    _expected(store, columns, length)
    last_end = store.execute(f"SELECT MAX(we) FROM {OUTPUT}").fetchone()[0]
    _per_key_table(store, "written", columns, "records INTEGER NOT NULL, low INTEGER, high INTEGER")
    store.execute(f"INSERT INTO written SELECT id, ws, we, COUNT(*), MIN(n), MAX(n) FROM {OUTPUT} GROUP BY id, ws, we")
    sample = "w.id, w.ws, w.we, COALESCE((SELECT e.n FROM expected e WHERE e.id = w.id AND e.ws = w.ws AND e.we = w.we), 0)"

    def window_sample(raw: bytes, start: float, end: float, inputs: int) -> dict[str, Any]:
        counts = [n for (n,) in store.execute(f"SELECT n FROM {OUTPUT} WHERE id = ? AND ws = ? AND we = ? "
                                              "ORDER BY part, off LIMIT 10", (raw, start, end))]
        return {"key": show_id(raw), "window": [start, end], "counts": counts, "inputs": inputs}

    missing = f"FROM expected e WHERE NOT EXISTS (SELECT 1 FROM written w WHERE {_same(columns, 'w', 'e')})"
    anomalies = {
        "duplicates": store.anomaly(
            "duplicates", "duplicate", "a (key, window) written more than once",
            "FROM written w WHERE w.records > 1", records="w.records - 1", sample=sample, order="w.id, w.ws, w.we",
            show=window_sample, max_samples=max_samples),
        "wrong_counts": store.anomaly(
            "wrong counts", None, "a (key, window) whose count is not its number of input records",
            f"FROM written w JOIN expected e ON {_same(columns, 'e', 'w')} WHERE w.low != e.n OR w.high != e.n",
            records="1", sample=sample, order="w.id, w.ws, w.we", show=window_sample, max_samples=max_samples),
        "lost_writes": store.anomaly(
            "lost writes", "lost-write", "an input (key, window) that ends no later than the last window written, "
            "but was never written",
            f"{missing} AND e.we <= ?", parameters=(last_end,), records="e.n", sample="e.id, e.ws, e.we, e.n",
            order="e.id, e.ws, e.we",
            show=lambda raw, start, end, n: {"key": show_id(raw), "window": [start, end], "inputs": n},
            max_samples=max_samples),
        "unexpected": store.anomaly(
            "unexpected records", None, "a (key, window) that no input record falls in",
            f"FROM written w WHERE NOT EXISTS (SELECT 1 FROM expected e WHERE {_same(columns, 'e', 'w')})",
            records="w.records", sample=sample, order="w.id, w.ws, w.we", show=window_sample,
            max_samples=max_samples),
    }
    open_windows = store.scalar(f"SELECT COUNT(*) {missing} AND e.we > ?", (last_end,))
    warnings = ([f"{open_windows} input (key, window)s end after the last window written ({last_end:g}): still "
                 "open under the watermark, not checked"] if open_windows else [])
    return ShapeResult(anomalies, warnings)


def _keys_check(store: RecordStore, expected: str, max_samples: int, what: str) -> ShapeResult:
    """Duplicates, losses and unexpected keys when each key should be written as many times as the
    ``expected`` query's ``(id, times)`` rows say."""
    store.execute("CREATE TABLE verdict (id BLOB PRIMARY KEY, want INTEGER NOT NULL, got INTEGER NOT NULL) "
                  "WITHOUT ROWID")
    store.execute(f"INSERT INTO verdict SELECT id, SUM(want), SUM(got) FROM ("
                  f"SELECT id, n AS want, 0 AS got FROM ({expected}) "
                  f"UNION ALL SELECT id, 0, COUNT(*) FROM {OUTPUT} GROUP BY id) GROUP BY id")

    def found(name: str, jepsen: str | None, detection: str, where: str, records: str) -> Anomaly:
        return store.anomaly(name, jepsen, detection, f"FROM verdict WHERE {where}", records=records,
                             sample="id, want, got", order="id", max_samples=max_samples,
                             show=lambda raw, want, got: {"key": show_id(raw), "expected": want, "written": got})

    return ShapeResult({
        "duplicates": found("duplicates", "duplicate", f"{what} written more often than the input makes it",
                            "want > 0 AND got > want", "got - want"),
        "lost_writes": found("lost writes", "lost-write", f"{what} of the input written fewer times than it makes it",
                             "want > 0 AND got < want", "want - got"),
        "unexpected": found("unexpected records", None, f"{what} in the output that no input makes",
                            "want = 0", "got"),
    })
