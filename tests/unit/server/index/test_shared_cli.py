"""``ray-history`` over a bucket downloads the index a history server shared instead of
rebuilding it, and never writes one itself."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import zstandard

from runtime.cli import main as cli_main
from runtime.server.config import ServerConfig
from runtime.server.index.cache import IndexCache
from runtime.server.metrics import ServerMetrics
from runtime.storage.config import StorageConfig, open_store
from runtime.storage.layout import KeyLayout
from tests.support.sample_session import write_sample_session

LAYOUT = KeyLayout("")


def _jobs(store_dir: Path, cache: Path, capsys: pytest.CaptureFixture[str]) -> object:
    argv = ["jobs", "raycluster-demo", "--json", "--storage-backend=local", f"--local-storage-dir={store_dir}"]
    assert cli_main.main([*argv, f"--cache-dir={cache}"]) == 0
    return json.loads(capsys.readouterr().out)


def _index_objects(store_dir: Path) -> list[Path]:
    return sorted(p for p in (store_dir / "history-index").rglob("*") if p.is_file())


def _index_digests(cache: Path) -> set[str]:
    return {hashlib.sha256(p.read_bytes()).hexdigest() for p in cache.glob("*.sqlite")}


def test_the_cli_downloads_a_shared_index_and_writes_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = StorageConfig(backend="local", local_dir=str(tmp_path / "store"), create_bucket=True)
    store = open_store(storage)
    sample = write_sample_session(store, LAYOUT)

    built_here = _jobs(tmp_path / "store", tmp_path / "cli-0", capsys)
    assert not (tmp_path / "store" / "history-index").exists(), "a CLI run never writes"

    config = ServerConfig(storage=storage, cache_dir=tmp_path / "server", shared_index="write")
    server = IndexCache(config, store=store, layout=LAYOUT, metrics=ServerMetrics())
    server.ensure(sample.cluster, sample.session, wait=60)
    assert server.shared is not None and server.shared.wait_for_uploads(60)
    published = _index_objects(tmp_path / "store")
    assert len(published) == 2

    def no_build(*args: object, **kwargs: object) -> None:
        raise AssertionError("the CLI built an index the bucket shares")

    monkeypatch.setattr(IndexCache, "_build", no_build)
    assert _jobs(tmp_path / "store", tmp_path / "cli-1", capsys) == built_here
    packed = next(p for p in published if p.name.endswith(".sqlite.zst")).read_bytes()
    shared = hashlib.sha256(zstandard.ZstdDecompressor().decompressobj().decompress(packed)).hexdigest()
    assert _index_digests(tmp_path / "cli-1") == {shared}, "byte for byte the shared copy"
    assert _index_objects(tmp_path / "store") == published
