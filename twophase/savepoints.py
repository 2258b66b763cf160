"""Savepoints: checkpoints a user asked for, in a folder the user chose (a path or a URI).

A savepoint folder is self-contained (``<path>/_metadata`` holds every participant's state), so it
stays valid after the checkpoint folder is cleaned. Savepoints never expire; only
:func:`dispose_savepoint` deletes one. Like the checkpoint store, a savepoint's files are created
once (conditionally) and never rewritten.
"""

from __future__ import annotations

import logging
import os

from twophase.checkpoint import CompletedCheckpoint, decode, encode
from twophase.errors import CorruptCheckpointError, StateFileExistsError, StateFileNotFoundError
from twophase.checkpoint_store import COMMITTED_MARKER, METADATA_FILE
from twophase.storage.state_storage import open_state_storage

log = logging.getLogger(__name__)

SavepointPath = str | os.PathLike[str]


def write_savepoint(path: SavepointPath, checkpoint: CompletedCheckpoint) -> str:
    """Write ``checkpoint`` as a savepoint; refuses to overwrite another savepoint."""
    storage = open_state_storage(path)
    try:
        storage.create(METADATA_FILE, encode(checkpoint))
    except FileExistsError:
        raise StateFileExistsError(f"savepoint path {storage.uri!r} already holds a savepoint") from None
    log.info("savepoint of checkpoint %d written to %s", checkpoint.checkpoint_id, storage.uri)
    return storage.uri


def load_savepoint(path: SavepointPath) -> CompletedCheckpoint:
    """Load a savepoint; raises FileNotFoundError, CorruptCheckpointError or (written by a newer
    kit) NewerStateFormatError naming the path."""
    storage = open_state_storage(path)
    try:
        data = storage.read(METADATA_FILE)
    except FileNotFoundError:
        raise StateFileNotFoundError(f"no savepoint at {storage.uri!r} (missing {METADATA_FILE})") from None
    try:
        return decode(data, storage.location(METADATA_FILE))
    except CorruptCheckpointError as exc:
        raise CorruptCheckpointError(f"savepoint {storage.location(METADATA_FILE)} is corrupt: {exc}") from exc


def mark_savepoint_committed(path: SavepointPath) -> None:
    try:
        open_state_storage(path).create(COMMITTED_MARKER, b"")
    except FileExistsError:
        pass


def is_savepoint_committed(path: SavepointPath) -> bool:
    return open_state_storage(path).exists(COMMITTED_MARKER)


def dispose_savepoint(path: SavepointPath) -> None:
    """Delete a savepoint. Refuses a folder that is not a savepoint, so a typo deletes nothing."""
    storage = open_state_storage(path)
    if not storage.exists(METADATA_FILE):
        raise StateFileNotFoundError(f"no savepoint at {storage.uri!r}; nothing deleted")
    storage.delete([METADATA_FILE])  # first: a crash part-way leaves no savepoint that looks whole
    storage.delete_folder()
    log.info("savepoint %s disposed", storage.uri)
