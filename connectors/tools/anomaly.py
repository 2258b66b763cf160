"""One kind of anomaly a verification found in an output topic, and what every report of them
answers: what ``kafka-eos verify`` reports, for a copy (``verify.py``) and for a stateful query's
shape (``shape_checks.py``) alike."""

from __future__ import annotations

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
    """What a verification's report holds and answers alike for a copy (``verify.VerifyReport``)
    and a shape (``shape_checks.ShapeReport``): where it read, what it counted and found, the
    records an anomaly affects, the verdict, and its JSON."""

    bootstrap_servers: str
    input_topic: str
    output_topic: str
    id_field: str
    output_id_field: str
    counts: dict[str, int]
    anomalies: dict[str, Anomaly]
    warnings: list[str]

    @property
    def exactly_once(self) -> bool:
        """No checked anomaly affects an id or a record, and every output record was identified."""
        return (all(a.ids == 0 and a.records == 0 for a in self.anomalies.values() if a.checked)
                and self.counts["output_unidentified"] == 0)

    def count(self, anomaly: str) -> int:
        """Records affected by an anomaly (0 when it was not checked)."""
        found = self.anomalies.get(anomaly)
        return found.records if found is not None and found.checked else 0

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["exactly_once"] = self.exactly_once
        return data
