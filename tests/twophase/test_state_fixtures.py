"""State written by earlier versions of the kit is read in place (an upgrade), and state of a newer
format version (a downgrade) is refused in one line and never rewritten.

The fixtures (``state_fixtures/``, see its README.md) were written by running each earlier
version's own code; ``future/`` raises one format version past what this kit reads."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from connectors.kafka.sink.committable import COMMITTABLE_VERSION, KafkaCommittable
from twophase import checkpoint, checkpoint_statistics, state_owner
from twophase.checkpoint import CompletedCheckpoint, decode
from twophase.checkpoint_statistics import (
    CheckpointOutcome,
    CommitFigures,
    decode_statistics,
    read_statistics,
    record_statistics,
)
from twophase.checkpoint_store import LEGACY_COUNTER_READABLE_VERSIONS, FileCheckpointStore
from twophase.downgrade_guard import refuse_state_of_a_newer_kit
from twophase.errors import NewerStateFormatError
from twophase.savepoints import is_savepoint_committed, load_savepoint
from twophase.state_owner import decode_owner

FIXTURES = Path(__file__).resolve().parent / "state_fixtures"
FUTURE = FIXTURES / "future"

#: Every format the kit persists, the versions this kit reads, and the fixture of each earlier one.
PAST = {
    "checkpoint-counter-v1": {"counter": 1, "metadata": 1},
    "statistics-v1": {"owner": 1, "metadata": 1, "committable": 1, "statistics": 1},
    "statistics-v2": {"owner": 1, "metadata": 1, "committable": 1, "statistics": 2},
    "statistics-v3": {"owner": 1, "metadata": 1, "committable": 1, "statistics": 3},
}


def test_every_version_this_kit_reads_has_a_fixture_written_by_the_version_that_wrote_it():
    written = {fmt: set() for fmt in ("counter", "metadata", "owner", "committable", "statistics")}
    for versions in PAST.values():
        for fmt, version in versions.items():
            written[fmt].add(version)
    assert written == {"counter": set(LEGACY_COUNTER_READABLE_VERSIONS),
                       "metadata": set(checkpoint.READABLE_VERSIONS),
                       "owner": set(state_owner.READABLE_VERSIONS),
                       "committable": {COMMITTABLE_VERSION},
                       "statistics": set(checkpoint_statistics.READABLE_VERSIONS)}
    assert sorted(p.name for p in FIXTURES.iterdir() if p.is_dir() and p.name != "future") == sorted(PAST)


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` and its bytes."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def past(request, tmp_path) -> Path:
    """A copy of the fixture (the kit writes into it where a test goes on with the state)."""
    folder = tmp_path / request.param
    shutil.copytree(FIXTURES / request.param, folder)
    return folder


@pytest.mark.parametrize("past", sorted(PAST), indirect=True)
def test_state_of_an_earlier_version_is_read_in_place(past):
    before = snapshot(past)
    store = FileCheckpointStore(past, check_writable=False)
    refuse_state_of_a_newer_kit(store)
    if "committable" in PAST[past.name]:
        from connectors.spark.state_guard import check_state_readable
        check_state_readable(store)
    assert store.checkpoint_ids() == [1, 2]
    assert store.is_committed(1) and not store.is_committed(2)
    assert store.next_checkpoint_id() == 3
    latest = store.latest()
    assert latest is not None and latest.checkpoint_id == 2
    versions = PAST[past.name]
    if "committable" in versions:
        handles = [KafkaCommittable.from_json(h) for h in latest.state_of("kafka-sink")]
        assert [(h.transactional_id, h.record_count) for h in handles] == [("kafka-eos-0-0", 100),
                                                                           ("kafka-eos-1-0", 101)]
    else:
        assert latest.state_of("source") == {"orders-0": 200}
    if "owner" in versions:
        owner = store.owner()
        assert owner is not None and owner.kind == "spark-streaming-query"
        assert owner.owner_id == "5f1c2d3e-0000-4000-8000-000000000001"
    else:
        assert store.owner() is None
    if "statistics" in versions:
        stats = read_statistics(store, 1)
        assert stats is not None and stats.outcome is CheckpointOutcome.COMMITTED
        assert (stats.records, stats.transactions, stats.totals.records, stats.totals.recoveries) == (201, 2, 201, 1)
        assert stats.timings is not None and stats.timings.total_ms == 42.0
        assert stats.sink == {"transactional_id_prefix": "kafka-eos-", "transaction_timeout_ms": 900_000,
                              "restart_budget_ms": 60_000}
    # A checkpoint folder is a savepoint folder (``_metadata``, ``_committed``).
    assert load_savepoint(past / "chk-1").checkpoint_id == 1 and is_savepoint_committed(past / "chk-1")
    assert snapshot(past) == before, "reading changed the state"


@pytest.mark.parametrize("past", sorted(PAST), indirect=True)
def test_this_kit_goes_on_with_the_state_of_an_earlier_version(past):
    """The upgrade: the next checkpoint is stored beside the old ones, ids go on, the statistics'
    running totals go on from the old record, and the old files stay as they were written."""
    before = snapshot(past)
    store = FileCheckpointStore(past, retained_checkpoints=5)
    assert store.next_checkpoint_id() == 3
    store.reserve_checkpoint_id(3)
    store.add(CompletedCheckpoint(3, 10, 20, {"kafka-sink": []}))
    store.mark_committed(3)
    stats = record_statistics(store, 3, outcome=CheckpointOutcome.COMMITTED,
                              figures=CommitFigures(records=7, transactions=1))
    assert stats is not None
    if "statistics" in PAST[past.name]:
        assert (stats.totals.checkpoints, stats.totals.records, stats.totals.recoveries) == (2, 208, 1)
    reopened = FileCheckpointStore(past, check_writable=False)
    assert reopened.latest().checkpoint_id == 3 and reopened.next_checkpoint_id() == 4
    after = snapshot(past)
    assert {k: v for k, v in after.items() if k in before} == before, "an old file was rewritten"
    assert sorted(set(after) - set(before)) == ["chk-3/_committed", "chk-3/_metadata", "chk-3/_reserved",
                                                 "chk-3/_statistics"]


# -- a downgrade ---------------------------------------------------------------------------------

#: future fixture -> (the file whose version is newer, its version, the versions this kit reads)
FUTURE_FILES = {
    "checkpoint-v2": ("chk-2/_metadata", 2, checkpoint.READABLE_VERSIONS),
    "owner-v2": ("_owner", 2, state_owner.READABLE_VERSIONS),
    "statistics-v4": ("chk-1/_statistics", 4, checkpoint_statistics.READABLE_VERSIONS),
    "checkpoint-counter-v2": ("_checkpoint_counter", 2, LEGACY_COUNTER_READABLE_VERSIONS),
    "committable-v2": ("chk-2/_metadata", 2, (COMMITTABLE_VERSION,)),
}


def test_every_format_has_a_future_fixture():
    assert sorted(p.name for p in FUTURE.iterdir()) == sorted(FUTURE_FILES)


def _readers(folder: Path, name: str):
    """Each way the kit reads the future file of ``name`` (decoder, store, savepoint, state guard)."""
    from connectors.spark.state_guard import check_state_readable

    relative = FUTURE_FILES[name][0]
    data = (folder / relative).read_bytes()
    where = str(folder / relative)
    store = lambda: FileCheckpointStore(folder, check_writable=False)  # noqa: E731
    readers = {"state guard": lambda: check_state_readable(store()), "store check": lambda: refuse_state_of_a_newer_kit(store())}
    if name == "checkpoint-v2":
        readers |= {"decode": lambda: decode(data, where), "latest": lambda: store().latest(),
                    "load": lambda: store().load(2), "savepoint": lambda: load_savepoint(folder / "chk-2")}
    elif name == "owner-v2":
        readers |= {"decode": lambda: decode_owner(data, where), "owner": lambda: store().owner()}
    elif name == "statistics-v4":
        readers |= {"decode": lambda: decode_statistics(data, where), "read": lambda: read_statistics(store(), 1)}
    elif name == "checkpoint-counter-v2":
        readers |= {"next id": lambda: store().next_checkpoint_id(), "latest": lambda: store().latest()}
        readers.pop("store check")  # the guard's path lists the store too
    elif name == "committable-v2":
        readers.pop("store check")  # the handles are the Kafka sink's: checked by the state guard
    return readers


@pytest.mark.parametrize("name, reader", [(name, reader) for name in sorted(FUTURE_FILES)
                                          for reader in _readers(FUTURE / name, name)])
def test_state_of_a_newer_version_is_refused_in_one_line_and_left_as_it_is(tmp_path, name, reader):
    folder = tmp_path / name
    shutil.copytree(FUTURE / name, folder)
    before = snapshot(folder)
    relative, version, readable = FUTURE_FILES[name]
    with pytest.raises(NewerStateFormatError) as refused:
        _readers(folder, name)[reader]()
    message = str(refused.value)
    assert "\n" not in message
    assert str(folder / relative) in message, message
    assert f"format_version {version}, written by a newer version of pyspark-kafka-eos" in message
    assert f"this version reads format_version {', '.join(map(str, readable))} only" in message
    assert "Upgrade pyspark-kafka-eos" in message and "left as it is" in message
    assert (refused.value.version, refused.value.readable) == (version, readable)
    assert snapshot(folder) == before, "the newer state was changed, or something was written beside it"


@pytest.mark.parametrize("name", sorted(FUTURE_FILES))
def test_a_query_starting_on_newer_state_is_refused_before_it_writes_anything(tmp_path, name):
    """The path where the Spark sink starts on a state directory (the state guard, before any task
    writes): refused, and the state folder holds exactly what it held."""
    pytest.importorskip("pyspark")
    import json

    from connectors.spark import state_guard
    from connectors.spark.options import parse_sink_options

    state = tmp_path / "state"
    shutil.copytree(FUTURE / name, state)
    before = snapshot(state)
    checkpoint_location = tmp_path / "chk"
    (checkpoint_location / "commits").mkdir(parents=True)
    owner_id = "5f1c2d3e-0000-4000-8000-000000000001"
    (checkpoint_location / "metadata").write_text(json.dumps({"id": owner_id}) + "\n")
    options = parse_sink_options({"kafka.bootstrap.servers": "localhost:9092", "topic": "out",
                                  "checkpointlocation": str(checkpoint_location), "eos.statedir": str(state)},
                                 streaming=True)
    state_guard._verified.clear()
    try:
        with pytest.raises(NewerStateFormatError, match="Upgrade pyspark-kafka-eos"):
            state_guard.guard_sink_state(options)
    finally:
        state_guard._verified.clear()
    assert snapshot(state) == before
