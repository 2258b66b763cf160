"""One kind of anomaly a verification found in an output topic: what ``kafka-eos verify`` reports,
for a copy (``verify.py``) and for a stateful query's shape (``shape_checks.py``) alike."""

from __future__ import annotations

from dataclasses import dataclass, field
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
