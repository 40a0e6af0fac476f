"""The real ``historyserver`` process (embedded gunicorn, gthread workers) over a
local store holding session A, with one static live cluster (a stand-in head
dashboard in this process): probes, metrics, the UI, a stored session, the live
proxy, multi-worker metrics and a clean SIGTERM."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from runtime.server.views.ui import find_dashboard_build
from runtime.storage.config import StorageConfig, open_store
from runtime.storage.layout import KeyLayout
from tests.integration.emulators.base import REPO_ROOT
from tests.integration.server.harness import HistoryServerProcess
from tests.support.sample_session import StoredSample, write_sample_session
from tests.unit.server.live.servers import BIG_SIZE, Upstream, upstream_server

pytestmark = pytest.mark.integration

LIVE = "live-demo"


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, StoredSample]:
    root = tmp_path_factory.mktemp("gunicorn")
    store = open_store(StorageConfig(backend="local", local_dir=str(root / "store"), create_bucket=True))
    return root, write_sample_session(store, KeyLayout(""))


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    with upstream_server() as up:
        yield up


@pytest.fixture(scope="module")
def server(stored: tuple[Path, StoredSample], upstream: Upstream) -> Iterator[HistoryServerProcess]:
    root, _ = stored
    args = (f"--live-cluster=default/{LIVE}={upstream.url}", "--kubernetes=off", "--threads=4", "--proxy-timeout=5")
    with HistoryServerProcess(root / "store", root / "cache", *args) as proc:
        yield proc


def test_probes(server: HistoryServerProcess) -> None:
    for path in ("/readz", "/livez"):
        for method in ("GET", "POST"):
            answer = requests.request(method, f"{server.url}{path}", timeout=10)
            assert (answer.status_code, answer.text) == (200, "ok")


def test_metrics(server: HistoryServerProcess) -> None:
    requests.get(f"{server.url}/livez", timeout=10)
    text = requests.get(f"{server.url}/metrics", timeout=10).text
    assert 'historyserver_request_duration_seconds_count{method="GET",route="/livez",status="2xx"}' in text


def test_ui(server: HistoryServerProcess, stored: tuple[Path, StoredSample]) -> None:
    _, sample = stored
    cookies = {"cluster_name": "raycluster-demo", "cluster_namespace": "default", "session_name": sample.session}
    index = requests.get(f"{server.url}/", cookies=cookies, timeout=10)
    assert find_dashboard_build() is not None, "the dev extra installs ray[default], whose dashboard build is served"
    assert index.status_code == 200 and "Ray Dashboard" in index.text
    script = re.search(r'src="\./(static/js/[^"]+)"', index.text)
    assert script is not None
    asset = requests.get(f"{server.url}/{script.group(1)}", timeout=10)
    assert asset.status_code == 200 and "immutable" in asset.headers["Cache-Control"]
    first = requests.get(f"{server.url}/", allow_redirects=False, timeout=10)  # no cluster chosen: the picker
    assert first.status_code == 302 and first.headers["Location"] == "select_cluster"


def test_stored_session(server: HistoryServerProcess, stored: tuple[Path, StoredSample]) -> None:
    _, sample = stored
    clusters = requests.get(f"{server.url}/clusters", timeout=30).json()
    assert clusters[0]["name"] == LIVE and clusters[0]["sessionName"] == "live"  # live entries first
    assert any(c["sessionName"] == sample.session for c in clusters)
    client = server.session("default", "raycluster-demo", sample.session)
    jobs = client.get(f"{server.url}/api/jobs/", timeout=60)
    assert jobs.status_code == 200, jobs.text
    assert any(job.get("submission_id") for job in jobs.json())
    assert client.cookies.get("session_name") == sample.session


def _live_client(server: HistoryServerProcess) -> requests.Session:
    client = requests.Session()
    entered = client.get(f"{server.url}/enter_cluster/default/raycluster/{LIVE}", timeout=30)
    assert entered.status_code == 200 and entered.json()["session"] == "live", entered.text
    return client


def test_live_proxy(server: HistoryServerProcess, upstream: Upstream) -> None:
    client = _live_client(server)
    version = client.get(f"{server.url}/api/version?x=1", timeout=30)
    assert version.status_code == 200 and version.json()["path"] == "/api/version?x=1"
    stop = client.post(f"{server.url}/api/jobs/raysubmit_abc/stop", json={}, timeout=30)
    assert stop.status_code == 403 and "read-only" in stop.json()["msg"]  # the live proxy only reads
    assert upstream.last().method == "GET"
    with client.get(f"{server.url}/big", stream=True, timeout=30) as big:
        assert sum(len(chunk) for chunk in big.iter_content(1 << 20)) == BIG_SIZE
    upstream.gap = 0.5
    started = time.monotonic()
    with client.get(f"{server.url}/api/v0/logs/stream?node_id=a&filename=b", stream=True, timeout=30) as stream:
        lines = [(line, time.monotonic() - started) for line in stream.iter_lines()]
    assert [line for line, _ in lines] == [b"tick 0", b"tick 1", b"tick 2"]
    assert lines[0][1] < 0.45, "gunicorn must stream, not buffer"


def test_sigterm_finishes_in_flight_requests(stored: tuple[Path, StoredSample], upstream: Upstream) -> None:
    root, _ = stored
    proc = HistoryServerProcess(root / "store", root / "cache-term", f"--live-cluster={LIVE}={upstream.url}",
                                "--kubernetes=off").start()  # fmt: skip
    upstream.gap = 0.7
    cookies = {"cluster_name": LIVE, "cluster_namespace": "default", "session_name": "live"}
    result: dict[str, object] = {}

    def slow_request() -> None:
        try:
            result["body"] = requests.get(f"{proc.url}/slow", cookies=cookies, timeout=30).text
        except requests.RequestException as exc:
            result["error"] = exc

    worker = threading.Thread(target=slow_request)
    worker.start()
    time.sleep(0.4)
    assert proc.stop() == 0
    worker.join(30)
    assert result.get("body") == "tick 0\ntick 1\ntick 2\n", result
    log = proc.log()
    assert "Traceback" not in log, log


def test_two_workers_sum_their_metrics(stored: tuple[Path, StoredSample]) -> None:
    root, _ = stored
    proc = HistoryServerProcess(root / "store", root / "cache-2w", "--workers=2", "--kubernetes=off").start()
    try:
        for _ in range(20):
            requests.get(f"{proc.url}/livez", headers={"Connection": "close"}, timeout=10)
        text = requests.get(f"{proc.url}/metrics", timeout=10).text
    finally:
        assert proc.stop() == 0
    counts = re.findall(r'historyserver_request_duration_seconds_count\{[^}]*route="/livez"[^}]*\} (\S+)', text)
    assert counts and sum(float(c) for c in counts) == 20.0, text[:2000]
    metrics_dir = re.search(r"summed through (\S+)", proc.log())
    assert metrics_dir is not None, proc.log()
    assert not Path(metrics_dir.group(1)).exists(), "the multi-process metrics directory is left behind"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "runtime.server.main", *args]
    return subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=False)


def test_exit_codes(tmp_path: Path) -> None:
    bad = _run("--storage-backend=local", f"--local-storage-dir={tmp_path}", "--cache-max-size=lots")
    assert bad.returncode == 2 and "--cache-max-size" in bad.stderr
    missing = _run("--storage-backend=local", f"--local-storage-dir={tmp_path / 'nope'}", f"--cache-dir={tmp_path}/c")
    assert missing.returncode == 1 and "nope" in missing.stderr


def test_sigint_also_stops(stored: tuple[Path, StoredSample]) -> None:
    root, _ = stored
    proc = HistoryServerProcess(root / "store", root / "cache-int", "--kubernetes=off").start()
    assert proc.proc is not None
    os.killpg(proc.proc.pid, signal.SIGINT)  # Ctrl-C in a terminal reaches the whole group
    try:
        assert proc.proc.wait(20) == 0, proc.log()
    except subprocess.TimeoutExpired:
        proc.proc.kill()
        pytest.fail(f"no exit 20 s after SIGINT:\n{proc.log()}")
