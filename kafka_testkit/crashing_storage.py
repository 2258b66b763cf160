"""A state storage that dies before its N-th write, for crash tests of the state layout.

Every mutation of a :class:`~twophase.storage.state_storage.StateStorage` (each create, each deleted key)
counts as one write. With ``crash_at=N`` the N-th write raises :class:`SimulatedCrash` *instead of*
happening, so the storage is left exactly as a process killed between write N-1 and write N
leaves it (on an object store a PUT or DELETE is atomic; on a local disk a create is a rename of
an fsynced temp file, so "half a write" is not a state either). :class:`SimulatedCrash` derives
from BaseException, so no ``except Exception`` of the code under test can swallow it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from twophase.storage.state_storage import StateStorage


class SimulatedCrash(BaseException):
    """The process died here (before the write named in the message)."""


@dataclass
class WriteLog:
    """What was written, in order, and which creates found their key taken."""

    writes: list[str] = field(default_factory=list)
    refused_creates: list[str] = field(default_factory=list)


class CrashingStorage(StateStorage):
    def __init__(self, inner: StateStorage, crash_at: int | None = None, log: WriteLog | None = None) -> None:
        self.inner = inner
        self.uri = inner.uri
        self.crash_at = crash_at
        self.log = log or WriteLog()

    def _write(self, what: str) -> None:
        if self.crash_at is not None and len(self.log.writes) + 1 >= self.crash_at:
            raise SimulatedCrash(f"crash before write {len(self.log.writes) + 1}: {what}")
        self.log.writes.append(what)

    def create(self, key: str, data: bytes) -> None:
        self._write(f"create {key}")
        try:
            self.inner.create(key, data)
        except FileExistsError:
            self.log.refused_creates.append(key)
            raise

    def delete(self, keys: Iterable[str]) -> None:
        for key in keys:
            self._write(f"delete {key}")
            self.inner.delete([key])

    def read(self, key: str) -> bytes:
        return self.inner.read(key)

    def exists(self, key: str) -> bool:
        return self.inner.exists(key)

    def list_keys(self, subdirectory: str = "") -> list[str]:
        return self.inner.list_keys(subdirectory)

    def location(self, key: str = "") -> str:
        return self.inner.location(key)
