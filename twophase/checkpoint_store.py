"""The completed-checkpoint store: ``<dir>/chk-<id>/_metadata`` on a local (or mounted) filesystem.

Like Flink's CompletedCheckpointStore it keeps the newest ``retained_checkpoints`` and subsumes
older ones only once a newer one is durable. It also keeps two things Flink keeps elsewhere:

- ``chk-<id>/_committed``: written once every participant confirmed the commit of checkpoint
  ``id``; recovery re-commits a checkpoint's transactions only when this marker is missing;
- ``_checkpoint_counter``: the next checkpoint id, so ids are never reused across restarts, even
  ids of checkpoints that never completed (their transactions may still linger on the broker).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from pathlib import Path

from twophase.checkpoint import CompletedCheckpoint, CorruptCheckpointError, decode, encode
from twophase.durable_file import fsync_directory, write_atomically

log = logging.getLogger(__name__)

METADATA_FILE = "_metadata"
COMMITTED_MARKER = "_committed"
COUNTER_FILE = "_checkpoint_counter"
_CHK_DIR = re.compile(r"^chk-(\d+)$")


def validate_retained(retained_checkpoints: int) -> None:
    if not isinstance(retained_checkpoints, int) or retained_checkpoints < 1:
        raise ValueError(
            f"retained_checkpoints must be an integer >= 1, got {retained_checkpoints!r}"
        )


def ensure_writable_directory(directory: Path, what: str) -> None:
    """Fail at start, not at the first checkpoint, when ``directory`` cannot take our files."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / f".write-probe-{os.getpid()}"
        write_atomically(probe, b"probe")
        probe.unlink()
    except OSError as exc:
        raise ValueError(f"{what} {str(directory)!r} is not a writable directory: {exc}") from exc


class FileCheckpointStore:
    def __init__(self, directory: str | os.PathLike[str], retained_checkpoints: int = 3) -> None:
        validate_retained(retained_checkpoints)
        self.directory = Path(directory)
        self.retained_checkpoints = retained_checkpoints
        ensure_writable_directory(self.directory, "checkpoint directory")

    # -- paths ---------------------------------------------------------------------------------

    def checkpoint_path(self, checkpoint_id: int) -> Path:
        return self.directory / f"chk-{checkpoint_id}"

    def checkpoint_ids(self) -> list[int]:
        """Ids of every ``chk-<id>`` folder, valid or not, ascending."""
        ids = []
        for entry in self.directory.iterdir():
            match = _CHK_DIR.match(entry.name)
            if match and entry.is_dir():
                ids.append(int(match.group(1)))
        return sorted(ids)

    # -- checkpoint ids --------------------------------------------------------------------------

    def next_checkpoint_id(self) -> int:
        """One more than any id this store has handed out or holds."""
        counter_path = self.directory / COUNTER_FILE
        from_counter = 1
        if counter_path.exists():
            try:
                from_counter = int(json.loads(counter_path.read_text())["next_checkpoint_id"])
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("ignoring unreadable checkpoint counter %s (%s)", counter_path, exc)
        ids = self.checkpoint_ids()
        return max(from_counter, (ids[-1] + 1) if ids else 1)

    def reserve_checkpoint_id(self, checkpoint_id: int) -> None:
        """Durably record that ``checkpoint_id`` is used, before anything is done under it."""
        document = {"format_version": 1, "next_checkpoint_id": checkpoint_id + 1}
        write_atomically(self.directory / COUNTER_FILE, json.dumps(document).encode())

    # -- checkpoints ---------------------------------------------------------------------------

    def add(self, checkpoint: CompletedCheckpoint) -> Path:
        """Store ``checkpoint`` durably, then subsume checkpoints beyond the retained count."""
        path = self.checkpoint_path(checkpoint.checkpoint_id)
        path.mkdir(parents=True, exist_ok=True)
        write_atomically(path / METADATA_FILE, encode(checkpoint))
        fsync_directory(self.directory)
        log.info("checkpoint %d stored at %s", checkpoint.checkpoint_id, path)
        self._subsume(newest=checkpoint.checkpoint_id)
        return path

    def load(self, checkpoint_id: int) -> CompletedCheckpoint:
        """Load one checkpoint; raises CorruptCheckpointError or FileNotFoundError."""
        path = self.checkpoint_path(checkpoint_id) / METADATA_FILE
        checkpoint = decode(path.read_bytes())
        if checkpoint.checkpoint_id != checkpoint_id:
            raise CorruptCheckpointError(
                f"{path} holds checkpoint {checkpoint.checkpoint_id}, not {checkpoint_id}"
            )
        return checkpoint

    def latest(self) -> CompletedCheckpoint | None:
        """The newest valid checkpoint. Corrupt or truncated ones are logged and skipped."""
        for checkpoint_id in reversed(self.checkpoint_ids()):
            try:
                return self.load(checkpoint_id)
            except FileNotFoundError:
                # A crash between mkdir and the metadata rename leaves an empty folder behind.
                log.warning("checkpoint folder %s has no %s; skipping it",
                            self.checkpoint_path(checkpoint_id), METADATA_FILE)
            except (CorruptCheckpointError, OSError) as exc:
                log.error("checkpoint metadata %s is unreadable (%s); falling back to an older one",
                          self.checkpoint_path(checkpoint_id) / METADATA_FILE, exc)
        return None

    def valid_checkpoints(self) -> list[CompletedCheckpoint]:
        result = []
        for checkpoint_id in self.checkpoint_ids():
            try:
                result.append(self.load(checkpoint_id))
            except (FileNotFoundError, CorruptCheckpointError, OSError):
                continue
        return result

    # -- commit markers ------------------------------------------------------------------------

    def mark_committed(self, checkpoint_id: int) -> None:
        path = self.checkpoint_path(checkpoint_id)
        if not (path / METADATA_FILE).exists():
            raise FileNotFoundError(f"checkpoint {checkpoint_id} is not stored in {self.directory}")
        write_atomically(path / COMMITTED_MARKER, b"")

    def is_committed(self, checkpoint_id: int) -> bool:
        return (self.checkpoint_path(checkpoint_id) / COMMITTED_MARKER).exists()

    # -- retention -----------------------------------------------------------------------------

    def _subsume(self, newest: int) -> None:
        valid = [c.checkpoint_id for c in self.valid_checkpoints()]
        keep = set(valid[-self.retained_checkpoints:])
        for checkpoint_id in self.checkpoint_ids():
            # Only what is older than the checkpoint just made durable may go; a corrupt folder
            # newer than every valid checkpoint is left for a human to look at.
            if checkpoint_id < newest and checkpoint_id not in keep:
                shutil.rmtree(self.checkpoint_path(checkpoint_id), ignore_errors=True)
                log.info("checkpoint %d subsumed by %d", checkpoint_id, newest)
        fsync_directory(self.directory)
