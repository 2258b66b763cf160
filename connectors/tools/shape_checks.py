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
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Iterable

from connectors.tools.anomaly import Anomaly, AnomalyReport
from connectors.tools.tool_errors import UsageError
from twophase.errors import InvalidValueError

SHAPES = ("running-count", "complete-count", "windowed-count", "windowed-running-count", "dedup", "join")
#: One line naming the valid values, for every place that takes a shape.
SHAPE_HELP = f"one of {', '.join(SHAPES)}"


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
class ShapeReport(AnomalyReport):
    """Same reading as :class:`connectors.tools.verify.VerifyReport`, for a shape."""

    shape: str

    @property
    def exactly_once(self) -> bool:
        # A shape with no output record proves nothing: a stateful query writes at least one.
        return super().exactly_once and self.counts["output_records"] > 0

    def summary_lines(self) -> list[str]:
        c = self.counts
        lines = [
            ("EXACTLY-ONCE" if self.exactly_once else "NOT EXACTLY-ONCE")
            + f": {self.input_topic} -> {self.output_topic} on {self.bootstrap_servers}, shape {self.shape}, "
            + f"keys by {self.id_field} (input) / {self.output_id_field} (output)",
            f"input: {c['input_records']} committed records, {c['input_keys']} keys",
            f"output: {c['output_records']} committed records, {c['output_keys']} keys",
        ]
        for anomaly in self.anomalies.values():
            label = anomaly.name + (f" [{anomaly.jepsen_name}]" if anomaly.jepsen_name else "")
            lines.append(f"{label}: {anomaly.ids} keys, {anomaly.records} records")
            for sample in anomaly.samples[:3]:
                lines.append(f"    e.g. {json.dumps(sample, sort_keys=True)}")
        if c["output_unidentified"]:
            lines.append(f"output records without a key or a readable value: {c['output_unidentified']}")
        if not c["output_records"]:
            lines.append("the output holds no committed record: nothing shows the query ran")
        lines.extend(f"warning: {w}" for w in self.warnings)
        return lines


@dataclass
class ShapeResult:
    """What a check found: its anomalies, and the counts it adds."""

    anomalies: dict[str, Anomaly]
    warnings: list[str] = field(default_factory=list)


class _Found:
    """Collects one anomaly's keys and samples."""

    def __init__(self, name: str, jepsen: str | None, detection: str, max_samples: int) -> None:
        self.anomaly = Anomaly(name, jepsen, 0, 0, detection)
        self._max = max_samples

    def add(self, records: int, **sample: Any) -> None:
        self.anomaly.ids += 1
        self.anomaly.records += records
        if len(self.anomaly.samples) < self._max:
            self.anomaly.samples.append(sample)


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


def count_of(record: OutputRecord) -> int:
    """The ``count`` of an output value; InvalidValueError when it has none."""
    if not isinstance(record.value, dict) or "count" not in record.value:
        raise InvalidValueError("the value has no count field")
    count = record.value["count"]
    if isinstance(count, bool) or not isinstance(count, int):
        raise InvalidValueError(f"count is {count!r}, not an integer")
    return count


def window_of(record: OutputRecord) -> tuple[float, float]:
    """(start, end) of an output value's ``window``, epoch seconds; InvalidValueError when it has none."""
    window = record.value.get("window") if isinstance(record.value, dict) else None
    if not isinstance(window, dict) or "start" not in window or "end" not in window:
        raise InvalidValueError("the value has no window.start and window.end")
    return _number(window["start"], "window.start"), _number(window["end"], "window.end")


def _in_offset_order(outputs: Iterable[OutputRecord]) -> list[OutputRecord]:
    return sorted(outputs, key=lambda r: (r.partition, r.offset))


def _series(outputs: list[OutputRecord], key_of) -> dict[Any, list[tuple[int, OutputRecord]]]:  # type: ignore[no-untyped-def]
    series: dict[Any, list[tuple[int, OutputRecord]]] = defaultdict(list)
    for record in _in_offset_order(outputs):
        series[key_of(record)].append((count_of(record), record))
    return series


def _keys_check(expected: Counter, written: Counter, max_samples: int, what: str) -> dict[str, Anomaly]:
    """Duplicates, losses and unexpected keys when each key should be written ``expected[k]`` times."""
    duplicates = _Found("duplicates", "duplicate", f"{what} written more often than the input makes it", max_samples)
    lost = _Found("lost writes", "lost-write", f"{what} of the input written fewer times than it makes it", max_samples)
    unexpected = _Found("unexpected records", None, f"{what} in the output that no input makes", max_samples)
    for key in sorted(set(expected) | set(written), key=str):
        want, got = expected.get(key, 0), written.get(key, 0)
        sample = {"key": _show(key), "expected": want, "written": got}
        if want == 0:
            unexpected.add(got, **sample)
        elif got > want:
            duplicates.add(got - want, **sample)
        elif got < want:
            lost.add(want - got, **sample)
    return {"duplicates": duplicates.anomaly, "lost_writes": lost.anomaly, "unexpected": unexpected.anomaly}


def _show(key: Any) -> Any:
    return list(key) if isinstance(key, tuple) else key


def running_counts(inputs: Iterable[InputRecord], outputs: Iterable[OutputRecord], *, strictly: bool = True,
                   max_samples: int = 10, key_of=None) -> ShapeResult:  # type: ignore[no-untyped-def]
    """``running-count`` (``strictly``) and ``complete-count``: see the module docstring. ``key_of``
    maps an input record to the output's key (default: its key)."""
    expected: Counter = Counter((key_of or (lambda r: r.key))(r) for r in inputs)
    return _rising(expected, list(outputs), lambda r: r.key, strictly, max_samples, "a key")


def _rising(expected: Counter, outputs: list[OutputRecord], key_of, strictly: bool, max_samples: int,  # type: ignore[no-untyped-def]
            what: str) -> ShapeResult:
    word = "rise strictly" if strictly else "never fall"
    not_rising = _Found("repeated or falling counts", "nonmonotonic",
                        f"{what}'s counts, in offset order, that do not {word} (a batch written twice, or "
                        "state restored to another batch than the one replayed)", max_samples)
    wrong = _Found("wrong final counts", None,
                   f"{what} whose last count is not its number of input records (too high: inputs counted "
                   "twice; too low: inputs lost)", max_samples)
    lost = _Found("lost writes", "lost-write", f"{what} of the input never written", max_samples)
    unexpected = _Found("unexpected records", None, f"{what} in the output that is not in the input", max_samples)
    series = _series(outputs, key_of)
    for key, counts in series.items():
        values = [count for count, _ in counts]
        bad = [i for i in range(1, len(values)) if (values[i] <= values[i - 1] if strictly else values[i] < values[i - 1])]
        if bad:
            first = counts[bad[0]][1]
            not_rising.add(len(bad), key=_show(key), counts=values[:20], partition=first.partition,
                           offset=first.offset)
        if key not in expected:
            unexpected.add(len(values), key=_show(key), counts=values[:20])
        elif values[-1] != expected[key]:
            wrong.add(1, key=_show(key), last=values[-1], inputs=expected[key])
    for key in sorted(set(expected) - set(series), key=str):
        lost.add(expected[key], key=_show(key), inputs=expected[key])
    return ShapeResult({"duplicates": not_rising.anomaly, "wrong_counts": wrong.anomaly,
                        "lost_writes": lost.anomaly, "unexpected": unexpected.anomaly})


def _window_length(outputs: list[OutputRecord]) -> float | None:
    lengths = {end - start for start, end in map(window_of, outputs)}
    if len(lengths) > 1:
        raise InvalidValueError(f"windows of several lengths {sorted(lengths)}: the windowed shapes take tumbling windows")
    return lengths.pop() if lengths else None


def _window_key(record: InputRecord, length: float) -> tuple[str, float, float]:
    if record.time is None:
        raise InvalidValueError(f"input record of key {record.key!r} has no event time")
    start = (record.time // length) * length
    return record.key, start, start + length


def windowed_counts(inputs: Iterable[InputRecord], outputs: Iterable[OutputRecord], *,
                    max_samples: int = 10) -> ShapeResult:
    """``windowed-count``: see the module docstring."""
    written = list(outputs)
    length = _window_length(written)
    if length is None:
        return ShapeResult({}, ["no window was written: the watermark may not have passed any window's end"])
    expected = Counter(_window_key(r, length) for r in inputs)
    last_end = max(end for _, end in map(window_of, written))
    duplicates = _Found("duplicates", "duplicate", "a (key, window) written more than once", max_samples)
    wrong = _Found("wrong counts", None, "a (key, window) whose count is not its number of input records",
                   max_samples)
    lost = _Found("lost writes", "lost-write", "an input (key, window) that ends no later than the last window "
                  "written, but was never written", max_samples)
    unexpected = _Found("unexpected records", None, "a (key, window) that no input record falls in", max_samples)
    seen: dict[tuple[str, float, float], list[int]] = defaultdict(list)
    for record in _in_offset_order(written):
        seen[(record.key, *window_of(record))].append(count_of(record))
    for window, counts in seen.items():
        sample = {"key": window[0], "window": [window[1], window[2]], "counts": counts[:10],
                  "inputs": expected.get(window, 0)}
        if len(counts) > 1:
            duplicates.add(len(counts) - 1, **sample)
        if window not in expected:
            unexpected.add(len(counts), **sample)
        elif any(count != expected[window] for count in counts):
            wrong.add(1, **sample)
    for window in sorted(set(expected) - set(seen)):
        if window[2] <= last_end:
            lost.add(expected[window], key=window[0], window=[window[1], window[2]], inputs=expected[window])
    open_windows = sum(1 for w in set(expected) - set(seen) if w[2] > last_end)
    warnings = ([f"{open_windows} input (key, window)s end after the last window written ({last_end:g}): still "
                 "open under the watermark, not checked"] if open_windows else [])
    return ShapeResult({"duplicates": duplicates.anomaly, "wrong_counts": wrong.anomaly, "lost_writes": lost.anomaly,
                        "unexpected": unexpected.anomaly}, warnings)


def windowed_running_counts(inputs: Iterable[InputRecord], outputs: Iterable[OutputRecord], *,
                            max_samples: int = 10) -> ShapeResult:
    """``windowed-running-count``: see the module docstring."""
    written = list(outputs)
    length = _window_length(written)
    if length is None:
        return ShapeResult({}, ["no window was written"])
    expected = Counter(_window_key(r, length) for r in inputs)
    return _rising(expected, written, lambda r: (r.key, *window_of(r)), True, max_samples, "a (key, window)")


def deduplicated(inputs: Iterable[InputRecord], outputs: Iterable[OutputRecord], *,
                 max_samples: int = 10) -> ShapeResult:
    """``dedup``: each input key once in the output."""
    expected = Counter({r.key: 1 for r in inputs})
    return ShapeResult(_keys_check(expected, Counter(r.key for r in outputs), max_samples, "a key"))


def joined(left: Iterable[InputRecord], right: Iterable[InputRecord], outputs: Iterable[OutputRecord], *,
           max_samples: int = 10) -> ShapeResult:
    """``join``: each key as many times as it has pairs of left and right records."""
    lefts, rights = Counter(r.key for r in left), Counter(r.key for r in right)
    expected = Counter({key: lefts[key] * rights[key] for key in lefts if rights[key]})
    return ShapeResult(_keys_check(expected, Counter(r.key for r in outputs), max_samples, "a key's pair"))
