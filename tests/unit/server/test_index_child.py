"""The whole-build child process: answers, failures and the timeout."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.server.index.child import build_in_child
from runtime.server.index.reader import SessionIndex
from runtime.server.load_errors import SessionLoadError
from runtime.storage.config import StorageConfig, open_store
from runtime.storage.layout import KeyLayout
from tests.support.sample_session import StoredSample, write_sample_session


@pytest.fixture
def stored(tmp_path: Path) -> tuple[StorageConfig, StoredSample]:
    storage = StorageConfig(backend="local", local_dir=str(tmp_path / "store"), create_bucket=True)
    return storage, write_sample_session(open_store(storage), KeyLayout(""))


def _build(storage: StorageConfig, sample: StoredSample, out: Path, timeout: float = 120.0) -> None:
    listing = list(open_store(storage).walk(sample.session_prefix))
    build_in_child(
        storage=storage, cluster=sample.cluster, session=sample.session, out=out, listing=listing, timeout=timeout
    )


def test_the_child_builds_the_index(tmp_path: Path, stored: tuple[StorageConfig, StoredSample]) -> None:
    _build(*stored, tmp_path / "ok.sqlite")
    with SessionIndex(tmp_path / "ok.sqlite") as index:
        assert index.scalar("SELECT COUNT(*) FROM tasks") > 0


def test_a_failing_build_is_a_load_error(tmp_path: Path, stored: tuple[StorageConfig, StoredSample]) -> None:
    with pytest.raises(SessionLoadError, match=r"failed: \w+Error"):
        _build(*stored, tmp_path / "missing-dir" / "x.sqlite")


def test_a_build_over_its_time_is_stopped(tmp_path: Path, stored: tuple[StorageConfig, StoredSample]) -> None:
    with pytest.raises(SessionLoadError, match="took longer than 0 s"):
        _build(*stored, tmp_path / "slow.sqlite", timeout=0.0)
