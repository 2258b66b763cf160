"""A completed checkpoint and its versioned, checksummed serialized form (``_metadata``)."""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from twophase.errors import CorruptCheckpointError
from twophase.state_versions import check_format_version

#: 1: written by every version so far (0.1.0 on). A higher one is refused (a downgrade,
#: twophase/state_versions.py), a lower or missing one is corrupt.
FORMAT_VERSION = 1
READABLE_VERSIONS = (1,)

JsonValue = Any  # whatever json.dumps accepts: the participants' states must be JSON-serializable


def wall_clock_ms() -> int:
    """This machine's wall clock in milliseconds since the epoch: the time base of checkpoint
    timestamps, transactions' begin and age, statistics and job metrics (the one definition)."""
    return int(time.time() * 1000)


@dataclass(frozen=True)
class CompletedCheckpoint:
    """Everything needed to restore a job: each participant's acknowledged state, by name.

    A source's state is its offsets; a sink's state is its pre-committed transaction handles
    (committables) that were not yet confirmed committed when the checkpoint was taken.
    """

    checkpoint_id: int
    trigger_timestamp_ms: int
    completion_timestamp_ms: int
    operator_states: Mapping[str, JsonValue] = field(default_factory=dict)
    is_savepoint: bool = False

    def state_of(self, participant: str) -> JsonValue | None:
        return self.operator_states.get(participant)


def _canonical(payload: Mapping[str, Any]) -> bytes:
    return json.dumps(payload, sort_keys=True, separators=(",", ":")).encode("utf-8")


def encode(checkpoint: CompletedCheckpoint) -> bytes:
    """Serialize with the format version and a SHA-256 of the checkpoint's canonical JSON."""
    body = asdict(checkpoint)
    body["operator_states"] = dict(checkpoint.operator_states)
    checksum = hashlib.sha256(_canonical(body)).hexdigest()
    document = {"format_version": FORMAT_VERSION, "checksum": f"sha256:{checksum}", "checkpoint": body}
    return json.dumps(document, sort_keys=True, indent=1).encode("utf-8")


def decode(data: bytes, location: str | None = None) -> CompletedCheckpoint:
    """Parse ``_metadata`` bytes; raise NewerStateFormatError for a format version newer than
    READABLE_VERSIONS (naming ``location``), CorruptCheckpointError for anything else but a valid
    document."""
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptCheckpointError(f"not valid JSON ({exc})") from exc
    if not isinstance(document, dict):
        raise CorruptCheckpointError("not a checkpoint metadata document")
    check_format_version(document.get("format_version"), READABLE_VERSIONS, "checkpoint metadata", location,
                         CorruptCheckpointError)
    body = document.get("checkpoint")
    if not isinstance(body, dict):
        raise CorruptCheckpointError("missing 'checkpoint' object")
    expected = f"sha256:{hashlib.sha256(_canonical(body)).hexdigest()}"
    if document.get("checksum") != expected:
        raise CorruptCheckpointError("checksum mismatch")
    try:
        return CompletedCheckpoint(
            checkpoint_id=int(body["checkpoint_id"]),
            trigger_timestamp_ms=int(body["trigger_timestamp_ms"]),
            completion_timestamp_ms=int(body["completion_timestamp_ms"]),
            operator_states=dict(body["operator_states"]),
            is_savepoint=bool(body.get("is_savepoint", False)),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptCheckpointError(f"malformed checkpoint fields ({exc})") from exc
