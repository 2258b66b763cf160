"""State storages for unit tests (a local directory, and kafka_testkit's in-memory one) and the
scenarios run on them, here and on real S3 and HDFS in integration_tests/."""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

from kafka_testkit.crashing_storage import CrashingStorage, SimulatedCrash, WriteLog
from kafka_testkit.memory_storage import memory_storage
from kafka_testkit.memory_system import ListSource, MemorySink, MemoryTransactionalSystem, StepClock
from twophase import savepoints
from twophase.checkpoint import CompletedCheckpoint
from twophase.checkpoint_store import FileCheckpointStore
from twophase.coordinator import CheckpointConfig, CheckpointCoordinator
from twophase.errors import CheckpointExistsError
from twophase.pipeline import LocalPipeline
from twophase.state_owner import StateOwner
from twophase.storage.state_storage import LocalStateStorage, StateStorage

KINDS = ("local", "memory")


def make_storage(kind: str, tmp_path: Path) -> StateStorage:
    if kind == "local":
        return LocalStateStorage(tmp_path / "state")
    if kind == "memory":
        return memory_storage()
    raise ValueError(f"unknown storage kind {kind!r}; valid: {KINDS}")


RECORDS = list(range(60))
RETAINED = 2


def _run_life(storage: StateStorage, system: MemoryTransactionalSystem, crash_at: int | None, log: WriteLog) -> None:
    """One process lifetime of the in-process pipeline: a checkpoint every 10 records."""
    coordinator = CheckpointCoordinator(
        FileCheckpointStore(CrashingStorage(storage, crash_at, log), retained_checkpoints=RETAINED),
        CheckpointConfig(checkpoint_interval=None, retained_checkpoints=RETAINED), clock=StepClock(0.1))
    sinks = [MemorySink("out-0", system), MemorySink("out-1", system)]
    LocalPipeline(coordinator, ListSource(RECORDS), lambda r: [r], sinks, route=lambda v: v % 2,
                  max_poll_records=7, checkpoint_every_records=10).run()


def crash_at_every_write(new_storage: Callable[[str], StateStorage], *, workers: int = 1) -> int:
    """Run the pipeline once cleanly, counting its writes to the state; then, for every N, on a
    fresh storage: crash before write N, restart, run to the end, and check the output is
    exactly-once and no state file was ever written twice. Returns how many crashes were run.

    The crashes are independent (each has its own storage location and transactional system), so
    on a remote storage, where every write is a round trip, ``workers`` threads run them at once."""
    clean = WriteLog()
    _run_life(new_storage("clean"), MemoryTransactionalSystem(), None, clean)
    crash_points = range(1, len(clean.writes) + 1)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for _ in pool.map(lambda crash_at: _crash_and_restart(new_storage, clean, crash_at), crash_points):
            pass  # map re-raises the first crash's failure here
    return len(clean.writes)


def _crash_and_restart(new_storage: Callable[[str], StateStorage], clean: WriteLog, crash_at: int) -> None:
    storage = new_storage(f"crash-{crash_at}")
    system = MemoryTransactionalSystem()
    log = WriteLog()
    try:
        _run_life(storage, system, crash_at, log)
        raise AssertionError(f"write {crash_at} was never reached")
    except SimulatedCrash:
        pass
    _run_life(storage, system, None, log)  # the restarted process: same storage, same system
    where = f"crash before write {crash_at} ({clean.writes[crash_at - 1]})"
    counts = Counter(system.visible)
    assert {v: n for v, n in counts.items() if n > 1} == {}, f"duplicates after a {where}"
    assert set(counts) == set(RECORDS), f"lost records after a {where}"
    assert system.open_txn_ids("") == [], f"open transactions after a {where}"
    rewritten = [k for k in log.refused_creates if not k.startswith("_write-probe-")]  # refused by design
    assert rewritten == [], f"a file was written twice after a {where}"
    final = FileCheckpointStore(storage, check_writable=False)
    assert final.is_committed(final.latest().checkpoint_id), f"last checkpoint unmarked after a {where}"
    assert len(final.checkpoint_ids()) <= RETAINED, f"retention fell behind after a {where}"


def racing_creates(storage: StateStorage, key: str, contenders: int = 8) -> list[int]:
    """``contenders`` threads create ``key`` at once, each with its own content ("writer N").
    Returns who won; the stored content must be the winner's."""
    start = threading.Barrier(contenders)
    winners: list[int] = []

    def contend(n: int) -> None:
        start.wait()
        try:
            storage.create(key, f"writer {n}".encode())
            winners.append(n)
        except FileExistsError:
            pass

    threads = [threading.Thread(target=contend, args=(n,)) for n in range(contenders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(winners) == 1, f"{len(winners)} writers created {key}"
    assert storage.read(key) == f"writer {winners[0]}".encode()
    return winners


# -- The store's contract on a real remote storage (integration_tests: S3, HDFS) -----------------

def chk(cid: int, **states: object) -> CompletedCheckpoint:
    """A completed checkpoint ``cid`` with ``states`` (by default a source position)."""
    return CompletedCheckpoint(cid, 1000 * cid, 1000 * cid + 5, states or {"source": cid})


def write_once_with_retention(location: str, files_under: Callable[[], list[str]]) -> None:
    """Five checkpoints stored and committed with two retained, and a reserved id: one file per
    fact (no temp files, no markers), as ``files_under`` lists them with a client of its own; and a
    store opened elsewhere (another driver's) reads the same."""
    store = FileCheckpointStore(location, retained_checkpoints=2)
    store.claim_owner(StateOwner("spark-streaming-query", "q-1", "it"))
    for cid in range(1, 6):
        store.add(chk(cid))
        store.mark_committed(cid)
    store.reserve_checkpoint_id(6)
    assert files_under() == ["_owner", "chk-4/_committed", "chk-4/_metadata", "chk-5/_committed",
                             "chk-5/_metadata", "chk-6/_reserved"]
    elsewhere = FileCheckpointStore(location)
    assert elsewhere.latest().checkpoint_id == 5 and elsewhere.is_committed(5)
    assert elsewhere.next_checkpoint_id() == 7
    assert elsewhere.owner().owner_id == "q-1"


def zombie_driver_refused(location: str) -> None:
    """Two drivers read the same state; the second to store checkpoint 3 is refused and the
    first one's stays."""
    driver, zombie = FileCheckpointStore(location), FileCheckpointStore(location)
    driver.latest(), zombie.latest()
    driver.add(chk(3, sink=["driver"]))
    try:
        zombie.add(chk(3, sink=["zombie"]))
    except CheckpointExistsError as exc:
        assert "another driver" in str(exc), exc
    else:
        raise AssertionError("a zombie driver stored over a stored checkpoint")
    assert FileCheckpointStore(location).latest().state_of("sink") == ["driver"]


def savepoint_lifecycle(location: str, files_under: Callable[[], list[str]]) -> None:
    """A savepoint written once (a second write refused), marked committed, read, and disposed
    of, leaving no file under the location's parent that ``files_under`` lists."""
    savepoints.write_savepoint(location, chk(4))
    try:
        savepoints.write_savepoint(location, chk(5))
    except FileExistsError as exc:
        assert "already holds a savepoint" in str(exc), exc
    else:
        raise AssertionError("a second savepoint was written over the first")
    savepoints.mark_savepoint_committed(location)
    assert savepoints.load_savepoint(location).checkpoint_id == 4 and savepoints.is_savepoint_committed(location)
    savepoints.dispose_savepoint(location)
    assert files_under() == []
