"""Indexes shared through the bucket, on the local backend: a second cache downloads
instead of building, ``read`` never writes, ``write`` writes data and manifest, and
anything corrupt or foreign is rebuilt, never served."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest
import zstandard

from runtime.server.config import ServerConfig
from runtime.server.index.cache import IndexCache
from runtime.server.index.fingerprint import fingerprints
from runtime.server.index.shared import DOWNLOAD_PHASE, SharedIndexes, index_version
from runtime.server.metrics import ServerMetrics
from runtime.storage.base import ObjectStore
from runtime.storage.config import StorageConfig, open_store
from runtime.storage.layout import KeyLayout
from tests.support.sample_session import StoredSample, write_sample_session

LAYOUT = KeyLayout("")
TABLES = ("tasks", "actors", "jobs", "nodes", "objects")


def _config(tmp_path: Path, cache: str, mode: str) -> ServerConfig:
    storage = StorageConfig(backend="local", local_dir=str(tmp_path / "store"), create_bucket=True)
    return ServerConfig(storage=storage, cache_dir=tmp_path / cache, freshness_seconds=3600, shared_index=mode)


@pytest.fixture
def store(tmp_path: Path) -> ObjectStore:
    return open_store(_config(tmp_path, "c", "off").storage)


@pytest.fixture
def sample(store: ObjectStore) -> StoredSample:
    return write_sample_session(store, LAYOUT)


def _cache(tmp_path: Path, store: ObjectStore, cache: str, mode: str) -> tuple[IndexCache, ServerMetrics]:
    metrics = ServerMetrics()
    return IndexCache(_config(tmp_path, cache, mode), store=store, layout=LAYOUT, metrics=metrics), metrics


def _value(metrics: ServerMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def _builds(metrics: ServerMetrics) -> float:
    return _value(metrics, "historyserver_index_builds_total", outcome="ok")


def _downloads(metrics: ServerMetrics, result: str) -> float:
    return _value(metrics, "historyserver_shared_index_downloads_total", result=result)


def _rows(cache: IndexCache, sample: StoredSample) -> dict[str, list[tuple[object, ...]]]:
    with cache.open(sample.cluster, sample.session) as index:
        return {t: sorted(index.rows(f"SELECT * FROM {t}"), key=repr) for t in TABLES}  # noqa: S608


def _index_keys(store: ObjectStore) -> list[str]:
    return sorted(info.key for info in store.walk(LAYOUT.index_root_prefix()))


def _keys(store: ObjectStore, sample: StoredSample) -> tuple[str, str]:
    events_fp, _ = fingerprints(list(store.walk(sample.session_prefix)), sample.session_prefix)
    return LAYOUT.index_keys(sample.cluster, sample.session, index_version(), events_fp)


def _publish(tmp_path: Path, store: ObjectStore, sample: StoredSample, cache: str = "writer") -> IndexCache:
    writer, metrics = _cache(tmp_path, store, cache, "write")
    writer.ensure(sample.cluster, sample.session, wait=60)
    assert writer.shared is not None and writer.shared.wait_for_uploads(60)
    assert _value(metrics, "historyserver_shared_index_uploads_total", result="ok") == 1
    return writer


def test_a_second_cache_downloads_instead_of_building(tmp_path: Path, store: ObjectStore, sample: StoredSample) -> None:
    writer = _publish(tmp_path, store, sample)
    assert _index_keys(store) == sorted(_keys(store, sample))  # exactly data + manifest
    reader, metrics = _cache(tmp_path, store, "reader", "read")
    assert _rows(reader, sample) == _rows(writer, sample)
    assert _builds(metrics) == 0
    assert _downloads(metrics, "ok") == 1
    assert _value(metrics, "historyserver_index_cache_requests_total", result="downloaded") == 1
    data_key, manifest_key = _keys(store, sample)
    manifest = json.loads(store.get_bytes(manifest_key))
    path = reader.path_for(sample.cluster, sample.session)
    assert manifest["sha256"] == hashlib.sha256(store.get_bytes(data_key)).hexdigest()
    assert manifest["size"] == store.stat(data_key).size
    assert manifest["compression"] == "zstd" and manifest["index_size"] > 4 * manifest["size"]
    served = zstandard.ZstdDecompressor().decompressobj().decompress(store.get_bytes(data_key))
    assert path.read_bytes() == served  # served as downloaded


def test_read_never_writes_and_off_never_looks(tmp_path: Path, store: ObjectStore, sample: StoredSample) -> None:
    reader, metrics = _cache(tmp_path, store, "reader", "read")
    reader.ensure(sample.cluster, sample.session, wait=60)
    assert _builds(metrics) == 1 and _downloads(metrics, "absent") == 1
    assert _index_keys(store) == []
    _publish(tmp_path, store, sample)
    off, metrics = _cache(tmp_path, store, "off", "off")
    assert off.shared is None
    off.ensure(sample.cluster, sample.session, wait=60)
    assert _builds(metrics) == 1 and _downloads(metrics, "absent") + _downloads(metrics, "ok") == 0


def _flip_byte(store: ObjectStore, key: str) -> None:
    data = bytearray(store.get_bytes(key))
    data[len(data) // 2] ^= 0xFF
    store.put_bytes(key, bytes(data))


def _wrong_sha(store: ObjectStore, key: str) -> None:
    manifest = json.loads(store.get_bytes(key))
    manifest["sha256"] = "0" * 64
    store.put_bytes(key, json.dumps(manifest).encode())


def _foreign_version(store: ObjectStore, key: str) -> None:
    manifest = json.loads(store.get_bytes(key))
    manifest["schema_version"] = 999
    store.put_bytes(key, json.dumps(manifest).encode())


def _truncate(store: ObjectStore, key: str) -> None:
    data = store.get_bytes(key)
    store.put_bytes(key, data[: len(data) // 2])


def _consistent(store: ObjectStore, key: str, data: bytes, index_size: int) -> None:
    """Replace the data object and make its manifest agree (sha256, sizes)."""
    store.put_bytes(key, data)
    manifest_key = key.removesuffix(".sqlite.zst") + ".manifest.json"
    manifest = json.loads(store.get_bytes(manifest_key))
    manifest.update(sha256=hashlib.sha256(data).hexdigest(), size=len(data), index_size=index_size)
    store.put_bytes(manifest_key, json.dumps(manifest).encode())


def _not_an_index(store: ObjectStore, key: str) -> None:
    """Consistent data and manifest, but the data is no index of ours."""
    raw = b"SQLite format 3\x00" + b"\x00" * 8000
    _consistent(store, key, zstandard.ZstdCompressor().compress(raw), len(raw))


def _not_zstd(store: ObjectStore, key: str) -> None:
    _consistent(store, key, b"not zstd at all" * 100, 10_000)


def _bigger_than_said(store: ObjectStore, key: str) -> None:
    """A bomb: a small object that decompresses far beyond what its manifest says."""
    _consistent(store, key, zstandard.ZstdCompressor().compress(b"\x00" * 50_000_000), 1_000_000)


@pytest.mark.parametrize(
    ("damage", "on"),
    [
        (_flip_byte, 0),
        (_wrong_sha, 1),
        (_foreign_version, 1),
        (_truncate, 0),
        (_not_an_index, 0),
        (_not_zstd, 0),
        (_bigger_than_said, 0),
    ],
    ids=["flipped-byte", "wrong-sha", "foreign-version", "truncated", "not-an-index", "not-zstd", "bomb"],
)
def test_corrupt_or_foreign_indexes_are_rebuilt_never_served(
    tmp_path: Path, store: ObjectStore, sample: StoredSample, damage: object, on: int
) -> None:
    writer = _publish(tmp_path, store, sample)
    expected = _rows(writer, sample)
    damage(store, _keys(store, sample)[on])  # type: ignore[operator]
    # A writer: rejects it, builds, and puts a good copy back.
    fixer, metrics = _cache(tmp_path, store, "fixer", "write")
    assert _rows(fixer, sample) == expected
    assert _downloads(metrics, "rejected") == 1 and _builds(metrics) == 1
    assert fixer.shared is not None and fixer.shared.wait_for_uploads(60)
    reader, metrics = _cache(tmp_path, store, "reader", "read")
    assert _rows(reader, sample) == expected
    assert _downloads(metrics, "ok") == 1 and _builds(metrics) == 0


def test_a_download_reports_its_bytes_and_refreshes_a_changed_object_list(
    tmp_path: Path, store: ObjectStore, sample: StoredSample
) -> None:
    _publish(tmp_path, store, sample)
    # A late log upload: same build inputs, one more object.
    store.put_bytes(LAYOUT.log_key(sample.cluster, sample.session, sample.node_id, "late.log"), b"late\n")
    listing = list(store.walk(sample.session_prefix))
    events_fp, _ = fingerprints(listing, sample.session_prefix)
    shared = SharedIndexes(store, LAYOUT, "read", ServerMetrics())
    seen: list[tuple[str, int | None, int | None]] = []
    dest = tmp_path / "fetched.sqlite"
    assert shared.fetch(sample.cluster, sample.session, events_fp, dest, lambda *p: seen.append(p), listing=listing)
    size = store.stat(_keys(store, sample)[0]).size  # bytes moved: the compressed object
    assert seen[0] == (DOWNLOAD_PHASE, 0, size) and seen[-1] == (DOWNLOAD_PHASE, size, size)
    reader, metrics = _cache(tmp_path, store, "reader", "read")
    with reader.open(sample.cluster, sample.session) as index:
        keys = [row[0] for row in index.rows("SELECT rel_key FROM objects")]
    assert f"{sample.node_id}/logs/late.log" in keys
    assert _builds(metrics) == 0


def test_a_refused_upload_leaves_answers_alone(
    tmp_path: Path, store: ObjectStore, sample: StoredSample, caplog: pytest.LogCaptureFixture
) -> None:
    # The index prefix is a regular file: every upload below it fails (even as root).
    (tmp_path / "store" / "history-index").write_bytes(b"")
    writer, metrics = _cache(tmp_path, store, "writer", "write")
    writer.ensure(sample.cluster, sample.session, wait=60)
    assert writer.shared is not None and writer.shared.wait_for_uploads(60)
    assert _value(metrics, "historyserver_shared_index_uploads_total", result="failed") == 1
    with writer.open(sample.cluster, sample.session) as index:
        assert index.rows("SELECT COUNT(*) FROM tasks")[0][0] > 0
    warnings = [r for r in caplog.records if "cannot publish" in r.getMessage()]
    assert len(warnings) == 1


def test_an_unreadable_downloaded_file_is_removed(tmp_path: Path, store: ObjectStore, sample: StoredSample) -> None:
    _publish(tmp_path, store, sample)
    _not_an_index(store, _keys(store, sample)[0])
    dest = tmp_path / "fetched.sqlite"
    listing = list(store.walk(sample.session_prefix))
    events_fp, _ = fingerprints(listing, sample.session_prefix)
    metrics = ServerMetrics()
    assert not SharedIndexes(store, LAYOUT, "read", metrics).fetch(
        sample.cluster, sample.session, events_fp, dest, lambda *p: None, listing=listing
    )
    assert not dest.exists()
    with pytest.raises(sqlite3.Error):
        sqlite3.connect(f"file:{dest}?mode=ro", uri=True).execute("SELECT 1")


def test_a_container_is_refused_off_azure(tmp_path: Path, store: ObjectStore) -> None:
    config = replace(_config(tmp_path, "c", "read"), shared_index_container="indexes")
    with pytest.raises(ValueError, match="--shared-index-container=indexes"):
        IndexCache(config, store=store, layout=LAYOUT, metrics=ServerMetrics())


def test_a_newer_build_replaces_the_copy_of_older_inputs(
    tmp_path: Path, store: ObjectStore, sample: StoredSample
) -> None:
    """A running session is re-indexed as its events grow: only its newest copy stays."""
    _publish(tmp_path, store, sample, "first")
    old = _index_keys(store)
    events = [i for i in store.walk(sample.session_prefix) if "/node_events/" in i.key]
    store.put_bytes(events[0].key.rsplit("-", 1)[0] + "-999.jsonl", b"\n")  # one more (empty) event object
    _publish(tmp_path, store, sample, "second")
    new = _index_keys(store)
    assert len(new) == 2 and not set(new) & set(old)
    assert new == sorted(_keys(store, sample))
