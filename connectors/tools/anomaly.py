"""One kind of anomaly a verification found in an output topic, and the one report of them that
``kafka-eos verify`` gives, for a copy (``verify.py``) and for a stateful query's shape
(``shape_checks.py``) alike: a shape's checks add their anomalies to the same report."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Anomaly:
    """One kind of anomaly: how many ids and records it affects, and some examples."""

    name: str
    jepsen_name: str | None
    ids: int
    records: int
    detection: str
    samples: list[dict[str, Any]] = field(default_factory=list)
    checked: bool = True


@dataclass
class AnomalyReport:
    """A verification's report, a copy's (``verify.VerifyReport``) and a shape's
    (``shape_checks.ShapeReport``) alike: where it read, what it counted and found, the records an
    anomaly affects, the verdict, the human summary and the JSON."""

    bootstrap_servers: str
    input_topic: str
    output_topic: str
    id_field: str
    output_id_field: str
    counts: dict[str, int]
    anomalies: dict[str, Anomaly]
    warnings: list[str]
    #: The stateful query's shape (``shape_checks.SHAPES``) the output was checked by; None for a copy.
    shape: str | None = None

    @property
    def exactly_once(self) -> bool:
        """No checked anomaly affects an id or a record, and every output record was identified;
        for a shape, the output also holds a record (a stateful query writes at least one, so an
        empty output proves nothing)."""
        clean = (all(a.ids == 0 and a.records == 0 for a in self.anomalies.values() if a.checked)
                 and self.counts["output_unidentified"] == 0)
        return clean and (self.shape is None or self.counts["output_records"] > 0)

    def count(self, anomaly: str) -> int:
        """Records affected by an anomaly (0 when it was not checked)."""
        found = self.anomalies.get(anomaly)
        return found.records if found is not None and found.checked else 0

    def summary_lines(self) -> list[str]:
        """A human summary, one line per fact; the verdict first."""
        lines = [("EXACTLY-ONCE" if self.exactly_once else "NOT EXACTLY-ONCE") + ": " + self._where(),
                 *self._count_lines()]
        # A copy is matched by ids, a shape by keys (or by (key, window)).
        unit = "ids" if self.shape is None else "keys"
        for anomaly in self.anomalies.values():
            if not anomaly.checked:
                lines.append(f"{anomaly.name}: not checked")
                continue
            label = anomaly.name + (f" [{anomaly.jepsen_name}]" if anomaly.jepsen_name else "")
            lines.append(f"{label}: {anomaly.ids} {unit}, {anomaly.records} records")
            for sample in anomaly.samples[:3]:
                lines.append(f"    e.g. {json.dumps(sample, sort_keys=True)}")
        c = self.counts
        if c["output_unidentified"]:
            what = "an id" if self.shape is None else "a key or a readable value"
            lines.append(f"output records without {what}: {c['output_unidentified']}")
        if self.shape is not None and not c["output_records"]:
            lines.append("the output holds no committed record: nothing shows the query ran")
        lines.extend(f"warning: {w}" for w in self.warnings)
        return lines

    def _where(self) -> str:
        topics = f"{self.input_topic} -> {self.output_topic} on {self.bootstrap_servers}"
        if self.shape is not None:
            return f"{topics}, shape {self.shape}, keys by {self.id_field} (input) / {self.output_id_field} (output)"
        return topics + ", ids by " + (self.id_field if self.id_field == self.output_id_field
                                       else f"{self.id_field} (input) / {self.output_id_field} (output)")

    def _count_lines(self) -> list[str]:
        c = self.counts
        if self.shape is not None:
            return [f"input: {c['input_records']} committed records, {c['input_keys']} keys",
                    f"output: {c['output_records']} committed records, {c['output_keys']} keys"]
        return [f"input: {c['input_records']} committed records ({c['input_distinct_ids']} distinct ids), "
                f"{c['input_uncommitted_only']} more only under read_uncommitted (aborted or open)",
                f"output: {c['output_records']} committed records ({c['output_distinct_ids']} distinct ids), "
                f"{c['output_uncommitted_only']} more only under read_uncommitted (aborted or open)"]

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        if self.shape is None:
            del data["shape"]  # a copy's report has the keys it always had
        data["exactly_once"] = self.exactly_once
        return data
