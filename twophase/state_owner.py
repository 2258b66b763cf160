"""Who a state directory belongs to: the ``_owner`` record, written once at first use.

Checkpoint ids only mean something to the job that wrote them: batch 7 of one Spark query is not
batch 7 of another. A job that took another job's state for its own would skip its batches as
"already committed", or commit another job's transactions. So the first job to use a state
directory records itself there with a conditional create, and every later start compares.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from twophase.errors import CorruptOwnerError
from twophase.state_versions import check_format_version

OWNER_FILE = "_owner"
#: 1: written by every version so far (0.1.0 on); a higher one is refused (a downgrade).
FORMAT_VERSION = 1
READABLE_VERSIONS = (1,)


@dataclass(frozen=True)
class StateOwner:
    #: What kind of job owns the state, e.g. ``spark-streaming-query``.
    kind: str
    #: The job's stable identity within its kind (Spark's query id), or None if it has none.
    owner_id: str | None
    #: Where the owner keeps its own progress (Spark's checkpointLocation), for messages.
    description: str = ""
    #: The job had completed checkpoints up to this id before it first used this state (a query
    #: that switched to this sink mid-life); None for a job that started with this state.
    adopted_through: int | None = None
    created_ms: int = 0

    def same_owner_as(self, other: StateOwner) -> bool:
        return (self.kind, self.owner_id) == (other.kind, other.owner_id)

    def describe(self) -> str:
        who = f"{self.kind} {self.owner_id}" if self.owner_id else self.kind
        return f"{who} ({self.description})" if self.description else who


def encode_owner(owner: StateOwner) -> bytes:
    return json.dumps({"format_version": FORMAT_VERSION, "owner": asdict(owner)}, sort_keys=True,
                      indent=1).encode("utf-8")


def decode_owner(data: bytes, location: str | None = None) -> StateOwner:
    """Parse ``_owner`` bytes; NewerStateFormatError (naming ``location``) for a newer format
    version, CorruptOwnerError for anything else but a valid record."""
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptOwnerError(f"not valid JSON ({exc})") from exc
    version = document.get("format_version") if isinstance(document, dict) else None
    check_format_version(version, READABLE_VERSIONS, "state owner record", location, CorruptOwnerError)
    body = document.get("owner")
    try:
        adopted = body.get("adopted_through")
        return StateOwner(
            kind=str(body["kind"]),
            owner_id=None if body.get("owner_id") is None else str(body["owner_id"]),
            description=str(body.get("description", "")),
            adopted_through=None if adopted is None else int(adopted),
            created_ms=int(body.get("created_ms", 0)),
        )
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise CorruptOwnerError(f"malformed owner fields ({exc})") from exc
