"""``historyserver`` indexes a finished session before anyone asks: with
``--build-wait=0`` a request that had to build would be answered 503, yet the
first one is answered from the index at once."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import requests

from runtime.storage.config import StorageConfig, open_store
from runtime.storage.layout import KeyLayout
from tests.integration.server.harness import HistoryServerProcess
from tests.support.sample_session import write_sample_session

pytestmark = pytest.mark.integration

BUILT = 'historyserver_index_builds_total{outcome="ok"}'


def _builds(url: str) -> float:
    for line in requests.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line.startswith(BUILT):
            return float(line.split()[-1])
    return 0.0


def test_a_finished_session_is_indexed_before_the_first_request(tmp_path: Path) -> None:
    store = open_store(StorageConfig(backend="local", local_dir=str(tmp_path / "store"), create_bucket=True))
    sample = write_sample_session(store, KeyLayout(""))  # no live discovery: its cluster is not running
    # A max age far beyond the sample session's date, whenever this runs.
    args = ("--build-wait=0", "--index-ahead-max-age=876000h", "--kubernetes=off")
    with HistoryServerProcess(tmp_path / "store", tmp_path / "cache", *args) as server:
        deadline = time.monotonic() + 60
        while _builds(server.url) < 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _builds(server.url) == 1, server.log()
        cluster = sample.cluster
        started = time.perf_counter()
        answer = requests.get(
            f"{server.url}/enter_cluster/{cluster.namespace}/raycluster/{cluster.name}/{sample.session}", timeout=10
        )
        assert answer.status_code == 200, answer.text
        assert time.perf_counter() - started < 1.0
        assert _builds(server.url) == 1, "the request built nothing"
