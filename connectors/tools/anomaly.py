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


class AnomalyReport:
    """What a verification's report (a dataclass with ``anomalies`` and an ``exactly_once``
    verdict) answers alike for a copy and a shape: the records an anomaly affects, and its JSON."""

    anomalies: dict[str, Anomaly]
    #: Each report's own verdict (a property of the report).
    exactly_once: bool

    def count(self, anomaly: str) -> int:
        """Records affected by an anomaly (0 when it was not checked)."""
        found = self.anomalies.get(anomaly)
        return found.records if found is not None and found.checked else 0

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)  # type: ignore[call-overload]
        data["exactly_once"] = self.exactly_once
        return data
