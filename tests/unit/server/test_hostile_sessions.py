"""Made-up sessions (issue #14, item 7): cookies naming random well-formed sessions
must cost no lock file, no lock-table entry and (when repeated) no storage listing;
lock files go with their index. The real app over a local bucket holding session A."""

from __future__ import annotations

import dataclasses
import random
import threading
import time
from pathlib import Path

import orjson
import pytest

from runtime.server.app import create_app
from runtime.server.config import ServerConfig
from runtime.server.context import app_services
from runtime.server.index.cache import IndexCache
from runtime.server.index.locks import file_lock, lock_path, remove_lock_file
from runtime.storage.base import Listing
from runtime.storage.config import StorageConfig
from runtime.storage.layout import ClusterRef, KeyLayout
from runtime.storage.local import LocalStore
from tests.support.sample_session import StoredSample, write_sample_session
from tests.unit.server.queries.app_fixture import SampleApp

pytestmark = pytest.mark.hostile


class CountingStore(LocalStore):
    """A local store counting listings (each one a request on a real bucket)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.listings = 0

    def _list_page(self, prefix: str, delimiter: str | None, token: str | None) -> tuple[Listing, str | None]:
        self.listings += 1
        return super()._list_page(prefix, delimiter, token)


def _world(tmp_path: Path, **overrides: object) -> tuple[SampleApp, CountingStore]:
    storage = StorageConfig(backend="local", local_dir=str(tmp_path / "store"), create_bucket=True)
    (tmp_path / "store").mkdir()
    store = CountingStore(tmp_path / "store")
    sample = write_sample_session(store, storage.layout)
    bare = write_sample_session(
        store, storage.layout, ClusterRef("default", "bare-cluster"), logs=False, endpoints=False
    )
    config = ServerConfig(storage=storage, cache_dir=tmp_path / "cache", kubernetes="off", **overrides)  # type: ignore[arg-type]
    app = create_app(config, store=store)
    return SampleApp(app=app, store=store, cache_dir=tmp_path / "cache", sample=sample, bare=bare), store


def _made_up(sample: StoredSample, rng: random.Random) -> StoredSample:
    session = "session_2026-%02d-%02d_%02d-%02d-%02d_%06d_%d" % (  # noqa: UP031 - reads like the name
        rng.randint(1, 12),
        rng.randint(1, 28),
        rng.randint(0, 23),
        rng.randint(0, 59),
        rng.randint(0, 59),
        rng.randint(0, 999_999),
        rng.randint(1, 99_999),
    )
    return dataclasses.replace(sample, session=session)


def _indexes(world: SampleApp) -> IndexCache:
    indexes: IndexCache = app_services(world.app).indexes
    return indexes


def test_made_up_sessions_leave_nothing_behind(tmp_path: Path) -> None:
    world, store = _world(tmp_path)
    rng = random.Random(14)
    for _ in range(200):
        answer = world.client(_made_up(world.sample, rng)).get("/api/jobs/")
        assert answer.status_code == 404 and "has no objects in storage" in orjson.loads(answer.data)["msg"]
    assert sorted(p.name for p in world.cache_dir.iterdir()) == []  # no lock files, no stamps
    assert len(_indexes(world)._locks) == 0
    # The same made-up session again and again: storage is asked once, not per request.
    client = world.client(_made_up(world.sample, rng))
    before = store.listings
    for _ in range(50):
        assert client.get("/api/v0/tasks").status_code == 404
    assert store.listings - before == 1
    # A real session is still served (and its lock file stays with its index).
    assert world.client().get("/api/jobs/").status_code == 200
    index = _indexes(world).path_for(world.sample.cluster, world.sample.session)
    assert index.exists() and lock_path(index).exists()
    assert len(list(world.cache_dir.glob("*.lock"))) == 1


def test_lock_files_are_evicted_with_their_index(tmp_path: Path) -> None:
    world, _ = _world(tmp_path, cache_max_bytes=1)  # every build evicts the others
    assert world.client().get("/api/jobs/").status_code == 200
    first = _indexes(world).path_for(world.sample.cluster, world.sample.session)
    assert first.exists() and lock_path(first).exists()
    assert world.client(world.bare).get("/api/v0/tasks").status_code == 200
    assert not first.exists() and not lock_path(first).exists()
    indexes = sorted(world.cache_dir.glob("*.sqlite"))
    assert sorted(world.cache_dir.glob("*.lock")) == [lock_path(p) for p in indexes] and len(indexes) == 1


def test_a_deleted_lock_file_never_lets_two_holders_in(tmp_path: Path) -> None:
    """The lock file is removed (with a missing index) while others wait on it: the
    waiters must notice and lock the new file, one at a time."""
    index = tmp_path / "x.sqlite"
    inside: list[int] = []
    overlaps: list[int] = []

    def hold(n: int) -> None:
        for _ in range(20):
            with file_lock(index):
                inside.append(n)
                if len(inside) > 1:
                    overlaps.append(n)
                time.sleep(0.001)
                remove_lock_file(index)  # held by us: a no-op (LOCK_NB fails)
                inside.remove(n)

    threads = [threading.Thread(target=hold, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert overlaps == [] and not lock_path(index).exists()


def test_unknown_session_via_cache_directly(tmp_path: Path) -> None:
    world, _ = _world(tmp_path)
    indexes = _indexes(world)
    ghost = ClusterRef("default", "nobody")
    with pytest.raises(Exception, match="has no objects"):
        indexes.ensure(ghost, "session_2026-01-01_00-00-00_000001_1")
    assert list(world.cache_dir.glob("*")) == []
    assert KeyLayout("").session_prefix(ghost, "session_2026-01-01_00-00-00_000001_1") in indexes._absent
