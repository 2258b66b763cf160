"""Savepoints: checkpoints a user asked for, in a folder the user chose.

A savepoint folder is self-contained (``<path>/_metadata`` holds every participant's state), so it
stays valid after the checkpoint folder is cleaned. Savepoints never expire; only
:func:`dispose_savepoint` deletes one.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from twophase.checkpoint import CompletedCheckpoint, CorruptCheckpointError, decode, encode
from twophase.checkpoint_store import COMMITTED_MARKER, METADATA_FILE
from twophase.durable_file import fsync_directory, write_atomically

log = logging.getLogger(__name__)


def write_savepoint(path: str | os.PathLike[str], checkpoint: CompletedCheckpoint) -> Path:
    """Write ``checkpoint`` as a savepoint; refuses to overwrite another savepoint."""
    folder = Path(path)
    if (folder / METADATA_FILE).exists():
        raise FileExistsError(f"savepoint path {str(folder)!r} already holds a savepoint")
    folder.mkdir(parents=True, exist_ok=True)
    write_atomically(folder / METADATA_FILE, encode(checkpoint))
    if folder.parent.exists():
        fsync_directory(folder.parent)
    log.info("savepoint of checkpoint %d written to %s", checkpoint.checkpoint_id, folder)
    return folder


def load_savepoint(path: str | os.PathLike[str]) -> CompletedCheckpoint:
    """Load a savepoint; raises FileNotFoundError or CorruptCheckpointError naming the path."""
    metadata = Path(path) / METADATA_FILE
    if not metadata.exists():
        raise FileNotFoundError(f"no savepoint at {str(path)!r} (missing {METADATA_FILE})")
    try:
        return decode(metadata.read_bytes())
    except CorruptCheckpointError as exc:
        raise CorruptCheckpointError(f"savepoint {metadata} is corrupt: {exc}") from exc


def mark_savepoint_committed(path: str | os.PathLike[str]) -> None:
    write_atomically(Path(path) / COMMITTED_MARKER, b"")


def is_savepoint_committed(path: str | os.PathLike[str]) -> bool:
    return (Path(path) / COMMITTED_MARKER).exists()


def dispose_savepoint(path: str | os.PathLike[str]) -> None:
    """Delete a savepoint. Refuses a folder that is not a savepoint, so a typo deletes nothing."""
    folder = Path(path)
    if not (folder / METADATA_FILE).exists():
        raise FileNotFoundError(f"no savepoint at {str(folder)!r}; nothing deleted")
    shutil.rmtree(folder)
    log.info("savepoint %s disposed", folder)
