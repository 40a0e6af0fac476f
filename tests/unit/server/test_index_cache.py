"""The on-disk index cache: one build per session across threads and processes,
survival across restarts, late uploads, eviction, a wiped directory."""

from __future__ import annotations

import multiprocessing
import shutil
import sqlite3
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from runtime.server.config import ServerConfig
from runtime.server.errors import ApiError
from runtime.server.index.cache import IndexCache
from runtime.server.index.schema import META_BUILT_AT
from runtime.server.metrics import ServerMetrics
from runtime.storage.base import ObjectStore
from runtime.storage.config import StorageConfig, open_store
from runtime.storage.layout import ClusterRef, KeyLayout
from tests.support.sample_session import StoredSample, load_events, write_events, write_sample_session


def _config(tmp_path: Path, **overrides: object) -> ServerConfig:
    storage = StorageConfig(backend="local", local_dir=str(tmp_path / "store"), create_bucket=True)
    config = ServerConfig(storage=storage, cache_dir=tmp_path / "cache", freshness_seconds=3600)
    return replace(config, **overrides)  # type: ignore[arg-type]


@pytest.fixture
def config(tmp_path: Path) -> ServerConfig:
    return _config(tmp_path)


@pytest.fixture
def store(config: ServerConfig) -> ObjectStore:
    return open_store(config.storage)


@pytest.fixture
def sample(store: ObjectStore) -> StoredSample:
    return write_sample_session(store, KeyLayout(""))


def _cache(config: ServerConfig, store: ObjectStore) -> tuple[IndexCache, ServerMetrics]:
    metrics = ServerMetrics()
    return IndexCache(config, store=store, layout=config.storage.layout, metrics=metrics), metrics


def _count(metrics: ServerMetrics, result: str) -> float:
    value = metrics.registry.get_sample_value("historyserver_index_cache_requests_total", {"result": result})
    return value or 0.0


def _task_count(cache: IndexCache, sample: StoredSample) -> int:
    with cache.open(sample.cluster, sample.session) as index:
        return int(index.scalar("SELECT COUNT(*) FROM tasks"))


def test_concurrent_requests_build_once(config: ServerConfig, store: ObjectStore, sample: StoredSample) -> None:
    cache, metrics = _cache(config, store)
    barrier = threading.Barrier(6)
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            barrier.wait()
            cache.ensure(sample.cluster, sample.session)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert _count(metrics, "miss") == 1
    # The others joined the build, or came after it and found the index.
    assert _count(metrics, "hit") + _count(metrics, "joined") == 5
    assert _task_count(cache, sample) > 0


def _ensure_in_process(config: ServerConfig, cluster: ClusterRef, session: str, start: object) -> str:
    start.wait()  # type: ignore[attr-defined]
    cache, _ = _cache(config, open_store(config.storage))
    path = cache.ensure(cluster, session)
    conn = sqlite3.connect(path)
    try:
        return str(conn.execute("SELECT value FROM meta WHERE key = ?", (META_BUILT_AT,)).fetchone()[0])
    finally:
        conn.close()


def test_processes_share_one_build(config: ServerConfig, sample: StoredSample) -> None:
    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager:
        start = manager.Event()
        with ctx.Pool(3) as pool:
            pending = [
                pool.apply_async(_ensure_in_process, (config, sample.cluster, sample.session, start)) for _ in range(3)
            ]
            start.set()
            built_at = {p.get(timeout=120) for p in pending}
    assert len(built_at) == 1, "every worker must see the one index that was built"
    assert len(list(config.cache_dir.glob("*.sqlite"))) == 1


def test_index_survives_a_restart(config: ServerConfig, store: ObjectStore, sample: StoredSample) -> None:
    first, _ = _cache(config, store)
    path = first.ensure(sample.cluster, sample.session)
    second, metrics = _cache(config, store)
    assert second.ensure(sample.cluster, sample.session) == path
    assert _count(metrics, "miss") == 0 and _count(metrics, "hit") == 1


def test_late_log_upload_refreshes_objects_only(tmp_path: Path, store: ObjectStore, sample: StoredSample) -> None:
    config = _config(tmp_path, freshness_seconds=0)
    cache, metrics = _cache(config, store)
    path = cache.ensure(sample.cluster, sample.session)
    built = sqlite3.connect(path).execute("SELECT value FROM meta WHERE key=?", (META_BUILT_AT,)).fetchone()[0]
    late_key = KeyLayout("").log_key(sample.cluster, sample.session, sample.node_id, "late-upload.log")
    store.put_bytes(late_key, b"uploaded after the index was built\n")
    with cache.open(sample.cluster, sample.session) as index:
        assert index.scalar("SELECT COUNT(*) FROM objects WHERE rel_key LIKE '%late-upload.log'") == 1
        assert index.meta(META_BUILT_AT) == built, "a log upload must not replay the events"
    assert _count(metrics, "refresh") >= 1


def test_new_event_object_reindexes(tmp_path: Path, store: ObjectStore, sample: StoredSample) -> None:
    config = _config(tmp_path, freshness_seconds=0)
    cache, metrics = _cache(config, store)
    before = _task_count(cache, sample)
    # Session B's task events filed under session A's name: new tasks appear.
    extra = [
        {**event, "sessionName": sample.session}
        for event in load_events("runB-all-types")
        if event.get("eventType") == "TASK_DEFINITION_EVENT"
    ]
    write_events(store, KeyLayout(""), sample.cluster, extra, base_ns=1_800_000_000_000_000_000)
    assert _task_count(cache, sample) > before
    assert _count(metrics, "miss") == 2


def test_freshness_window_skips_listing(config: ServerConfig, store: ObjectStore, sample: StoredSample) -> None:
    cache, metrics = _cache(config, store)
    cache.ensure(sample.cluster, sample.session)
    store.put_bytes(KeyLayout("").log_key(sample.cluster, sample.session, sample.node_id, "x.log"), b"x")
    cache.ensure(sample.cluster, sample.session)
    assert _count(metrics, "refresh") == 0 and _count(metrics, "hit") == 1


def test_lru_eviction_respects_the_byte_bound(tmp_path: Path, store: ObjectStore) -> None:
    config = _config(tmp_path, cache_max_bytes=1)
    layout = KeyLayout("")
    one = write_sample_session(store, layout, ClusterRef("default", "one"))
    two = write_sample_session(store, layout, ClusterRef("default", "two"))
    cache, metrics = _cache(config, store)
    first = cache.ensure(one.cluster, one.session)
    second = cache.ensure(two.cluster, two.session)
    assert second.exists() and not first.exists(), "the least recently used index goes first"
    assert metrics.registry.get_sample_value("historyserver_index_evictions_total") == 1
    assert _task_count(cache, one) > 0  # rebuilt on demand


def test_zero_cache_bound_means_unbounded(tmp_path: Path, store: ObjectStore) -> None:
    config = _config(tmp_path, cache_max_bytes=0)
    layout = KeyLayout("")
    one = write_sample_session(store, layout, ClusterRef("default", "one"))
    two = write_sample_session(store, layout, ClusterRef("default", "two"))
    cache, metrics = _cache(config, store)
    first = cache.ensure(one.cluster, one.session)
    second = cache.ensure(two.cluster, two.session)
    assert first.exists() and second.exists(), "--cache-max-size=0 never evicts"
    assert not metrics.registry.get_sample_value("historyserver_index_evictions_total")


def test_wiped_cache_directory_is_rebuilt(config: ServerConfig, store: ObjectStore, sample: StoredSample) -> None:
    cache, _ = _cache(config, store)
    with cache.open(sample.cluster, sample.session) as index:
        shutil.rmtree(config.cache_dir)
        # The open connection keeps reading the unlinked file.
        assert index.scalar("SELECT COUNT(*) FROM tasks") > 0
    assert _task_count(cache, sample) > 0


def test_big_sessions_build_in_a_child_process(tmp_path: Path, store: ObjectStore, sample: StoredSample) -> None:
    config = _config(tmp_path, subprocess_build_bytes=0)
    cache, metrics = _cache(config, store)
    assert _task_count(cache, sample) > 0
    mode = metrics.registry.get_sample_value(
        "historyserver_session_load_duration_seconds_count", {"mode": "subprocess"}
    )
    assert mode == 1


def test_unknown_session_is_404(config: ServerConfig, store: ObjectStore) -> None:
    cache, _ = _cache(config, store)
    with pytest.raises(ApiError) as err:
        cache.ensure(ClusterRef("default", "nothing"), "session_2026-01-01_00-00-00_000000_1")
    assert err.value.status == 404


def test_log_event_files_count_when_sizing_the_build(tmp_path: Path, store: ObjectStore, sample: StoredSample) -> None:
    """A Ray job writes logs/events/: a session with small event objects and a big
    log-event file was built inside the serving process, which held it many times over."""
    prefix = sample.session_prefix
    event_bytes = sum(i.size for i in store.walk(prefix) if "_events/" in i.key)
    line = b'{"event_id": "%d", "timestamp": "1", "message": "x"}\n'
    store.put_bytes(
        f"{prefix}{sample.node_id}/logs/events/event_EXTRA.log", b"".join(line % n for n in range(event_bytes // 40))
    )
    config = _config(tmp_path, subprocess_build_bytes=event_bytes + event_bytes // 2)
    cache, metrics = _cache(config, store)
    assert _task_count(cache, sample) > 0
    mode = metrics.registry.get_sample_value(
        "historyserver_session_load_duration_seconds_count", {"mode": "subprocess"}
    )
    assert mode == 1
