"""Fixtures: an index of session A's live answers, and an empty index."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.server.index.reader import SessionIndex
from tests.unit.server.queries.factory import create_index
from tests.unit.server.queries.live_fixture import build_live_index


@pytest.fixture(scope="session")
def live_index_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_live_index(tmp_path_factory.mktemp("live") / "index.sqlite")


@pytest.fixture
def live_index(live_index_path: Path, tmp_path: Path) -> Iterator[SessionIndex]:
    # A copy per test: summaries write their cache into the file.
    path = tmp_path / "index.sqlite"
    path.write_bytes(live_index_path.read_bytes())
    with SessionIndex(path) as index:
        yield index


@pytest.fixture
def empty_index_path(tmp_path: Path) -> Path:
    path = tmp_path / "empty.sqlite"
    create_index(path).close()
    return path
