"""Builds report their real progress: inline through the callback, in the child
process as JSON lines before its answer."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.server.index.build import build_index
from runtime.server.index.child import build_in_child
from runtime.server.index.sources import classify
from runtime.storage.base import ObjectStore
from runtime.storage.config import StorageConfig, open_store
from runtime.storage.layout import KeyLayout
from tests.support.sample_session import StoredSample, write_sample_session

Report = tuple[str, int | None, int | None]


@pytest.fixture
def stored(tmp_path: Path) -> tuple[StorageConfig, ObjectStore, StoredSample]:
    storage = StorageConfig(backend="local", local_dir=str(tmp_path / "store"), create_bucket=True)
    store = open_store(storage)
    return storage, store, write_sample_session(store, KeyLayout(""))


def _event_bytes(store: ObjectStore, sample: StoredSample) -> int:
    events = classify(list(store.walk(sample.session_prefix)), sample.session_prefix).events
    assert len(events) > 1
    return sum(info.size for info in events)


def test_an_inline_build_reports_event_bytes_then_writing(
    tmp_path: Path, stored: tuple[StorageConfig, ObjectStore, StoredSample]
) -> None:
    _, store, sample = stored
    total = _event_bytes(store, sample)
    reports: list[Report] = []
    build_index(
        store,
        KeyLayout(""),
        sample.cluster,
        sample.session,
        tmp_path / "i.sqlite",
        progress=lambda *r: reports.append(r),
    )
    reading = [r for r in reports if r[0] == "reading events"]
    assert reading[0] == ("reading events", 0, total)
    assert reading[-1] == ("reading events", total, total)
    done = [r[1] or 0 for r in reading]
    assert done == sorted(done) and len(set(done)) > 2, "one report per object read, growing"
    logs = [r for r in reports if r[0] == "reading log events"]
    assert logs and all(r[2] == logs[0][2] and (r[1] or 0) < (r[2] or 0) for r in logs)
    assert reports[-1] == ("writing", None, None)


def test_the_child_sends_its_progress_to_the_parent(
    tmp_path: Path, stored: tuple[StorageConfig, ObjectStore, StoredSample]
) -> None:
    storage, store, sample = stored
    reports: list[Report] = []
    build_in_child(
        storage=storage,
        cluster=sample.cluster,
        session=sample.session,
        out=tmp_path / "c.sqlite",
        listing=list(store.walk(sample.session_prefix)),
        timeout=120.0,
        progress=lambda *r: reports.append(r),
    )
    # At most a few reports a second, but every phase change.
    assert reports[0] == ("reading events", 0, _event_bytes(store, sample))
    assert [phase for phase, _, _ in reports][-1] == "writing"
    assert (tmp_path / "c.sqlite").exists()
