"""Shared indexes planted by less-trusted writers (anyone who may write under
``history-index/``, e.g. a collector identity): the file's own SQL never runs in the
server, its schema must be exactly the server's, verification is bounded in time, and
what an object may decompress to is bounded by the session, not by its manifest.
Whatever is rejected is rebuilt locally, never served (docs/security-model.md)."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import zstandard

from runtime import __version__
from runtime.server.config import ServerConfig
from runtime.server.index import shared as shared_mod
from runtime.server.index import shared_manifest
from runtime.server.index.build import build_index
from runtime.server.index.cache import IndexCache
from runtime.server.index.fingerprint import fingerprints
from runtime.server.index.index_file import refresh_objects
from runtime.server.index.reader import SessionIndex
from runtime.server.index.schema import SCHEMA_VERSION
from runtime.server.index.shared import SharedIndexes, index_version
from runtime.server.index.shared_manifest import (
    COMPRESSION,
    INDEX_BASE_BYTES,
    INDEX_BYTES_PER_INPUT_BYTE,
    INDEX_BYTES_PER_OBJECT,
    SHARE_FORMAT,
    Manifest,
    index_file_problem,
    index_size_bound,
)
from runtime.server.metrics import ServerMetrics
from runtime.storage.base import ObjectInfo, ObjectStore
from runtime.storage.config import StorageConfig, open_store
from runtime.storage.layout import ClusterRef, KeyLayout, event_file_name
from tests.support.sample_session import StoredSample, write_sample_session

pytestmark = pytest.mark.hostile

LAYOUT = KeyLayout("")
VICTIM = ClusterRef("team-b", "raycluster-b")


def _config(tmp: Path, cache: str, mode: str, **extra: object) -> ServerConfig:
    storage = StorageConfig(backend="local", local_dir=str(tmp / "store"), create_bucket=True)
    return ServerConfig(
        storage=storage,
        cache_dir=tmp / cache,
        freshness_seconds=3600,
        shared_index=mode,
        build_wait=60,
        **extra,  # type: ignore[arg-type]
    )


@pytest.fixture
def store(tmp_path: Path) -> ObjectStore:
    return open_store(_config(tmp_path, "c", "off").storage)


@pytest.fixture
def sample(store: ObjectStore) -> StoredSample:
    return write_sample_session(store, LAYOUT, VICTIM)


@pytest.fixture
def honest(tmp_path: Path, store: ObjectStore, sample: StoredSample) -> Path:
    """A copy of the index this server builds for the sample, as one file."""
    cache = IndexCache(_config(tmp_path, "honest", "off"), store=store, layout=LAYOUT, metrics=ServerMetrics())
    path = cache.ensure(sample.cluster, sample.session, wait=120)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.close()
    copy = tmp_path / "honest.sqlite"
    shutil.copy(path, copy)
    return copy


def _listing(store: ObjectStore, sample: StoredSample) -> list[ObjectInfo]:
    return list(store.walk(sample.session_prefix))


def _events_fp(store: ObjectStore, sample: StoredSample) -> str:
    return fingerprints(_listing(store, sample), sample.session_prefix)[0]


def _plant_bytes(store: ObjectStore, sample: StoredSample, packed: bytes, index_size: int) -> str:
    """What a writer can do: a data object and a self-consistent manifest for the
    victim's current inputs. Returns the data key."""
    events_fp = _events_fp(store, sample)
    data_key, manifest_key = LAYOUT.index_keys(sample.cluster, sample.session, index_version(), events_fp)
    store.put_bytes(data_key, packed)
    sha = hashlib.sha256(packed).hexdigest()
    manifest = Manifest(SHARE_FORMAT, SCHEMA_VERSION, events_fp, COMPRESSION, sha, len(packed), index_size, __version__)
    store.put_bytes(manifest_key, manifest.to_bytes())
    return data_key


def _plant(store: ObjectStore, sample: StoredSample, sqlite_file: Path) -> None:
    raw = sqlite_file.read_bytes()
    _plant_bytes(store, sample, zstandard.ZstdCompressor(write_checksum=True).compress(raw), len(raw))


def _edit(path: Path, *statements: str) -> None:
    conn = sqlite3.connect(path)
    for statement in statements:
        conn.execute(statement)
    conn.commit()
    conn.close()


def _burn(limit: int) -> str:
    """A query that runs as long as its writer wants (``limit`` steps)."""
    steps = f"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < {limit})"  # noqa: S608
    return f"({steps} SELECT max(x) FROM c)"  # noqa: S608


def _meta_as_view(limit: int) -> Callable[[Path], None]:
    def damage(path: Path) -> None:
        conn = sqlite3.connect(path)
        meta = conn.execute("SELECT key, value FROM meta").fetchall()
        conn.close()

        def lit(value: object) -> str:
            return "'" + str(value).replace("'", "''") + "'"

        rows = " UNION ALL ".join(f"SELECT {lit(k)}, {lit(v)}" for k, v in meta)
        view = f"CREATE VIEW meta(key, value) AS SELECT * FROM ({rows}) WHERE {_burn(limit)} > 0"  # noqa: S608
        _edit(path, "DROP TABLE meta", view)

    return damage


def _tasks_as_view(path: Path) -> None:
    _edit(path, "DROP TABLE tasks", "CREATE VIEW tasks AS SELECT * FROM task_counts")


def _trigger_on_objects(path: Path) -> None:
    # Would fire when the server refreshes the object list (refresh_objects).
    burn = _burn(10**12)
    _edit(path, f"CREATE TRIGGER burn AFTER DELETE ON objects BEGIN INSERT INTO computed VALUES (1, {burn}); END")  # noqa: S608


def _extra_table(path: Path) -> None:
    _edit(path, "CREATE TABLE planted (x)")


def _virtual_table(path: Path) -> None:
    _edit(path, "CREATE VIRTUAL TABLE planted USING dbstat")


def _missing_index(path: Path) -> None:
    _edit(path, "DROP INDEX tasks_by_state")


def _altered_index(path: Path) -> None:
    _edit(path, "DROP INDEX tasks_by_state", "CREATE INDEX tasks_by_state ON tasks (detail)")


DAMAGES = {
    "meta-view": _meta_as_view(10),
    "meta-view-unbounded": _meta_as_view(10**12),
    "tasks-view": _tasks_as_view,
    "trigger": _trigger_on_objects,
    "extra-table": _extra_table,
    "virtual-table": _virtual_table,
    "missing-index": _missing_index,
    "altered-index": _altered_index,
}


def _fetch(shared: SharedIndexes, store: ObjectStore, sample: StoredSample, dest: Path) -> list[bool]:
    """``fetch`` in a daemon thread, waited for at most 30 s: [its answer], or [] when
    it still runs (pinning a core)."""
    listing = _listing(store, sample)
    events_fp = fingerprints(listing, sample.session_prefix)[0]
    result: list[bool] = []

    def run() -> None:
        result.append(shared.fetch(sample.cluster, sample.session, events_fp, dest, lambda *a: None, listing=listing))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(30)
    return result


@pytest.mark.parametrize("damage", DAMAGES.values(), ids=DAMAGES.keys())
def test_a_planted_schema_is_rejected_before_any_of_its_sql_runs(
    tmp_path: Path, store: ObjectStore, sample: StoredSample, honest: Path, damage: Callable[[Path], None]
) -> None:
    damage(honest)
    _plant(store, sample, honest)
    metrics = ServerMetrics()
    dest = tmp_path / "dl.sqlite"
    started = time.monotonic()
    assert _fetch(SharedIndexes(store, LAYOUT, "read", metrics), store, sample, dest) == [False]
    assert time.monotonic() - started < 10
    assert metrics.registry.get_sample_value("historyserver_shared_index_downloads_total", {"result": "rejected"}) == 1
    assert not dest.exists()


def _serve_after_a_late_log(tmp_path: Path, store: ObjectStore, sample: StoredSample, tasks: int) -> ServerMetrics:
    """A log uploaded after the planted index was built (so a download is refreshed in
    place), then the session served by a reading server: its own rows, no trigger."""
    store.put_bytes(LAYOUT.log_key(sample.cluster, sample.session, sample.node_id, "late.log"), b"late\n")
    metrics = ServerMetrics()
    server = IndexCache(_config(tmp_path, "server", "read"), store=store, layout=LAYOUT, metrics=metrics)
    with server.open(sample.cluster, sample.session) as index:
        assert index.scalar("SELECT count(*) FROM tasks") == tasks > 0
        assert index.scalar("SELECT count(*) FROM sqlite_master WHERE type = 'trigger'") == 0
    return metrics


def test_a_planted_trigger_never_fires_and_the_index_is_rebuilt(
    tmp_path: Path, store: ObjectStore, sample: StoredSample, honest: Path
) -> None:
    """End to end: the object list differs (a late log), so a download is refreshed in
    place: a planted trigger would run there. The server rebuilds and serves its own."""
    conn = sqlite3.connect(honest)
    tasks = conn.execute("SELECT count(*) FROM tasks").fetchone()[0]
    conn.close()
    _edit(honest, "CREATE TRIGGER planted AFTER DELETE ON objects BEGIN DELETE FROM tasks; END")
    _plant(store, sample, honest)
    metrics = _serve_after_a_late_log(tmp_path, store, sample, tasks)
    assert metrics.registry.get_sample_value("historyserver_shared_index_downloads_total", {"result": "rejected"}) == 1
    assert metrics.registry.get_sample_value("historyserver_index_builds_total", {"outcome": "ok"}) == 1


@pytest.mark.parametrize("processes", [0, 2], ids=["in-process", "workers"])
def test_indexes_this_server_builds_pass_the_schema_check(
    tmp_path: Path, store: ObjectStore, sample: StoredSample, processes: int
) -> None:
    out = tmp_path / "built.sqlite"
    stats = build_index(store, LAYOUT, sample.cluster, sample.session, out, processes=processes)
    assert stats.processes == processes
    assert index_file_problem(out, _events_fp(store, sample)) is None


def test_verification_stops_at_its_deadline(
    tmp_path: Path, store: ObjectStore, sample: StoredSample, honest: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Were a slow query ever to get past the schema check, the deadline ends it."""
    _meta_as_view(10**12)(honest)
    monkeypatch.setattr(shared_manifest, "schema_problem", lambda conn: None)
    monkeypatch.setattr(shared_manifest, "VERIFY_SECONDS", 0.5)
    started = time.monotonic()
    assert index_file_problem(honest, _events_fp(store, sample)) == "not verified within 0.5 s"
    assert time.monotonic() - started < 5


def _bomb(index_size: int) -> bytes:
    """zstd zeros: a few KB that inflate to ``index_size`` bytes."""
    chunk = b"\0" * (16 * 1024 * 1024)
    comp = zstandard.ZstdCompressor(level=19, write_checksum=True).compressobj()
    return b"".join(comp.compress(chunk) for _ in range(index_size // len(chunk))) + comp.flush()


def test_a_planted_object_is_not_inflated_beyond_the_sessions_bound(
    tmp_path: Path, store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    sample = write_sample_session(store, LAYOUT, VICTIM, logs=False)
    claimed = 1024**3
    _plant_bytes(store, sample, _bomb(claimed), claimed)
    written: list[int] = []
    real_remove = shared_mod._remove

    def remove(path: Path) -> None:
        if path.exists():
            written.append(path.stat().st_size)
        real_remove(path)

    monkeypatch.setattr(shared_mod, "_remove", remove)
    ranges: list[str] = []
    real_get_range = store.get_range
    monkeypatch.setattr(store, "get_range", lambda key, *a: (ranges.append(key), real_get_range(key, *a))[1])
    shared = SharedIndexes(store, LAYOUT, "read", ServerMetrics())
    assert _fetch(shared, store, sample, tmp_path / "dl") == [False]
    assert max(written, default=0) <= 64 * 1024 * 1024
    assert not any(key.endswith(".zst") for key in ranges), "the data object was read: rejected too late"


def test_the_cache_size_bounds_a_download(
    tmp_path: Path, store: ObjectStore, sample: StoredSample, honest: Path
) -> None:
    _plant(store, sample, honest)
    size = honest.stat().st_size
    small = SharedIndexes(store, LAYOUT, "read", ServerMetrics(), cache_max_bytes=size - 1)
    assert _fetch(small, store, sample, tmp_path / "small") == [False]
    fits = SharedIndexes(store, LAYOUT, "read", ServerMetrics(), cache_max_bytes=size)
    assert _fetch(fits, store, sample, tmp_path / "fits") == [True]
    # And through the cache: --cache-max-size reaches the download.
    config = _config(tmp_path, "server", "read", cache_max_bytes=size - 1)
    metrics = ServerMetrics()
    IndexCache(config, store=store, layout=LAYOUT, metrics=metrics).ensure(sample.cluster, sample.session, wait=60)
    assert metrics.registry.get_sample_value("historyserver_shared_index_downloads_total", {"result": "rejected"}) == 1


def test_an_object_larger_than_its_index_could_compress_to_is_not_downloaded(
    tmp_path: Path, store: ObjectStore, sample: StoredSample, monkeypatch: pytest.MonkeyPatch
) -> None:
    _plant_bytes(store, sample, b"\0" * 4_000_000, 1_000_000)
    ranges: list[str] = []
    real_get_range = store.get_range
    monkeypatch.setattr(store, "get_range", lambda key, *a: (ranges.append(key), real_get_range(key, *a))[1])
    assert _fetch(SharedIndexes(store, LAYOUT, "read", ServerMetrics()), store, sample, tmp_path / "dl") == [False]
    assert not any(key.endswith(".zst") for key in ranges)


def test_the_bound_follows_the_sessions_inputs() -> None:
    prefix = "raycluster/ns/c/session_x/"
    node = "ab" * 28
    events = ObjectInfo(key=f"{prefix}{node}/node_events/{event_file_name(node, 1_700_000_000 * 10**9)}", size=1000)
    log = ObjectInfo(key=f"{prefix}{node}/logs/worker.out", size=10**9)  # not a build input
    base = INDEX_BASE_BYTES + INDEX_BYTES_PER_INPUT_BYTE * 1000
    assert index_size_bound([events, log], prefix) == base + 2 * INDEX_BYTES_PER_OBJECT
    assert index_size_bound([events, log], prefix, cache_max_bytes=5000) == 5000
    assert index_size_bound([events, log], prefix, cache_max_bytes=0) == base + 2 * INDEX_BYTES_PER_OBJECT


# ------------------------------------------- no trusted schema on any connection
# A view or trigger that reads a table-valued pragma runs only with a trusted schema.
def test_a_session_index_does_not_trust_the_files_schema(honest: Path) -> None:
    _edit(honest, "CREATE VIEW planted AS SELECT * FROM pragma_table_info('tasks')")
    with SessionIndex(honest) as index, pytest.raises(sqlite3.OperationalError, match="unsafe use"):
        index.rows("SELECT * FROM planted")


def test_writes_to_an_index_do_not_trust_its_schema(honest: Path, store: ObjectStore, sample: StoredSample) -> None:
    trigger = "INSERT OR REPLACE INTO computed SELECT 'planted-' || name, 'x' FROM pragma_table_info('objects')"
    _edit(
        honest,
        f"CREATE TRIGGER on_objects AFTER DELETE ON objects BEGIN {trigger}; END",
        f"CREATE TRIGGER on_computed AFTER INSERT ON computed WHEN new.key = 'k' BEGIN {trigger}; END",
    )
    with pytest.raises(sqlite3.OperationalError, match="unsafe use"):
        refresh_objects(honest, _listing(store, sample), sample.session_prefix)
    with SessionIndex(honest) as index:
        index.store_computed("k", b"v")  # best effort: refused, nothing stored
        assert index.computed("k") is None
        assert index.scalar("SELECT count(*) FROM computed WHERE key LIKE 'planted-%'") == 0


def _trash_table(path: Path, table: str) -> None:
    """Overwrite the root page of ``table`` with garbage; schema and meta stay intact."""
    conn = sqlite3.connect(path)
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    (root,) = conn.execute("SELECT rootpage FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)).fetchone()
    conn.close()
    with open(path, "r+b") as fh:
        fh.seek((root - 1) * page_size)
        fh.write(b"\xa5" * page_size)


def test_damaged_pages_past_the_checks_are_rebuilt_not_a_failed_build(
    tmp_path: Path, store: ObjectStore, sample: StoredSample, honest: Path
) -> None:
    """Schema and meta intact, the objects table's pages not: refreshing the object list
    raised out of the build, so every request for the session failed for as long as
    the object stayed in the bucket. It is rejected and the session built locally."""
    conn = sqlite3.connect(honest)
    tasks = conn.execute("SELECT count(*) FROM tasks").fetchone()[0]
    conn.close()
    _trash_table(honest, "objects")
    assert index_file_problem(honest, _events_fp(store, sample)) is None  # what the cheap checks see
    _plant(store, sample, honest)
    metrics = _serve_after_a_late_log(tmp_path, store, sample, tasks)
    assert metrics.registry.get_sample_value("historyserver_shared_index_downloads_total", {"result": "rejected"}) == 1
    assert not metrics.registry.get_sample_value("historyserver_shared_index_downloads_total", {"result": "ok"})
    assert metrics.registry.get_sample_value("historyserver_index_builds_total", {"outcome": "ok"}) == 1
