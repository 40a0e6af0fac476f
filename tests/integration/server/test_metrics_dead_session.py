"""Metrics of a dead cluster (#20), end to end on this machine.

A real Prometheus (the Debian ``prometheus`` package; ``make system-deps`` installs it)
scrapes a real Ray 2.60 head on loopback through Ray's own service-discovery file
(``prom_metrics_service_discovery.json``) every 2 s, while the collector stores the
session. Ray is stopped; the history server, configured with that Prometheus, answers
``/api/prometheus_health`` true for the dead session, and a ``query_range`` for
``ray_node_mem_used{SessionName=...}`` through the server over the session's window
returns samples. The collector stored the session's generated Grafana dashboards and
Prometheus config.

Grafana cannot be installed here: the Grafana side runs against a stand-in HTTP server
that records the requests it receives (``tests/support/recording_http.py``). Headless
Chromium opens the dead session's Metrics tab: its iframe is redirected to the
session's absolute window, and the screenshot is kept.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest
import requests

from runtime.server.grafana.window import PAD_MS
from runtime.storage.layout import ClusterRef, KeyLayout
from tests.integration.emulators.base import REPO_ROOT, free_port
from tests.integration.ray_harness import (
    CollectorProcess,
    RayHead,
    collector_env,
    ray_available,
    wait_until,
)
from tests.integration.server.harness import HistoryServerProcess
from tests.support.chromium import chromium_page
from tests.support.recording_http import RecordingServer, recording_server

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(not ray_available(), reason="ray 2.60 is not installed in this environment"),
]

CLUSTER = ClusterRef(namespace="default", name="raycluster-metrics")
PROMETHEUS = shutil.which("prometheus")
ARTIFACTS = Path(os.environ.get("ARTIFACTS_DIR", REPO_ROOT / ".test-artifacts")) / "metrics"
SCRAPE_SECONDS = 2


class Prometheus:
    """``prometheus`` on a free loopback port, scraping what Ray's file_sd file lists."""

    def __init__(self, workdir: Path, sd_file: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = workdir / "prometheus.yml"
        # Ray's own template (metrics/prometheus/prometheus.yml) with a short interval.
        self.config.write_text(
            f"global:\n  scrape_interval: {SCRAPE_SECONDS}s\n  evaluation_interval: {SCRAPE_SECONDS}s\n"
            "scrape_configs:\n- job_name: ray\n  file_sd_configs:\n"
            f"  - files: ['{sd_file}']\n    refresh_interval: {SCRAPE_SECONDS}s\n"
        )
        self.data = workdir / "tsdb"
        self.log_path = workdir / "prometheus.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        assert PROMETHEUS is not None
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [PROMETHEUS, f"--config.file={self.config}", f"--storage.tsdb.path={self.data}",
                 f"--web.listen-address=127.0.0.1:{self.port}"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
        wait_until(self._ready, 60, f"Prometheus on {self.url} (see {self.log_path})")

    def _ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"prometheus exited: {self.log_path.read_text()[-2000:]}")
        try:
            return requests.get(f"{self.url}/-/ready", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def series(self, query: str) -> list[dict[str, Any]]:
        answer = requests.get(f"{self.url}/api/v1/query", params={"query": query}, timeout=10).json()
        result: list[dict[str, Any]] = answer["data"]["result"]
        return result

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(30)


@dataclass
class DeadSession:
    bucket: Path
    session: str
    server: HistoryServerProcess
    grafana: RecordingServer
    prometheus: Prometheus


@pytest.fixture(scope="module")
def dead(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DeadSession]:
    if PROMETHEUS is None:
        pytest.skip("the Debian prometheus package is not installed (make test installs it: make system-deps)")
    tmp = tmp_path_factory.mktemp("metrics")
    bucket = tmp / "bucket"
    port = free_port()
    ray = RayHead(f"http://127.0.0.1:{port}/v1/events")
    collector = CollectorProcess({}, port, tmp / "collector.log")
    prometheus: Prometheus | None = None
    server: HistoryServerProcess | None = None
    try:
        with recording_server() as grafana:
            grafana.routes["/grafana/api/health"] = (200, {"Content-Type": "application/json"}, b'{"database":"ok"}')
            ray.start()
            collector.env.update(collector_env(bucket, ray, CLUSTER))
            collector.start()
            session = ray.session_dir().name
            prometheus = Prometheus(tmp, ray.session_dir() / "prom_metrics_service_discovery.json")
            prometheus.start()
            query = f'ray_node_mem_used{{SessionName="{session}"}}'
            wait_until(lambda: bool(prometheus and prometheus.series(query)), 180, f"{query} in Prometheus", 2.0)
            layout = KeyLayout("hist")
            config_key = layout.metrics_config_key(CLUSTER, session, "prometheus/prometheus.yml")
            wait_until((bucket / config_key).exists, 60, "the collector to store Ray's metrics config")
            time.sleep(2 * SCRAPE_SECONDS)
            assert collector.terminate() == 0
            ray.stop()  # the cluster is gone; Prometheus keeps what it scraped
            server = HistoryServerProcess(
                bucket, tmp / "cache", "--storage-root-dir=hist", f"--prometheus-url={prometheus.url}",
                f"--grafana-url={grafana.url}",
            ).start()  # fmt: skip
            yield DeadSession(bucket, session, server, grafana, prometheus)
    finally:
        if server is not None:
            server.stop()
        if prometheus is not None:
            prometheus.stop()
        collector.kill()
        ray.cleanup()


def _window(client: requests.Session, dead: DeadSession) -> tuple[int, int]:
    """The dead session's window as the server's Grafana redirect states it (ms)."""
    page = f"{dead.server.url}/grafana/d-solo/rayDefaultDashboard/default-dashboard"
    answer = client.get(
        page,
        params={"orgId": "1", "panelId": "24", "from": "now-1h", "to": "now", "var-SessionName": dead.session},
        allow_redirects=False,
        timeout=30,
    )
    assert answer.status_code == 302, answer.text
    query = dict(parse_qsl(urlsplit(answer.headers["Location"]).query))
    assert query["var-SessionName"] == dead.session
    return int(query["from"]), int(query["to"])


def test_prometheus_health_and_a_range_query_of_the_dead_session(dead: DeadSession) -> None:
    client = dead.server.session(CLUSTER.namespace, CLUSTER.name, dead.session)
    health = client.get(f"{dead.server.url}/api/prometheus_health", timeout=30).json()
    assert health == {"result": True, "msg": "prometheus running", "data": {}}
    grafana = client.get(f"{dead.server.url}/api/grafana_health", timeout=30).json()
    assert grafana["result"] is True and grafana["data"]["sessionName"] == dead.session
    assert grafana["data"]["grafanaHost"] == "/grafana"

    start_ms, end_ms = _window(client, dead)
    assert end_ms - start_ms < 30 * 60 * 1000  # the session, not "the last hour"
    # The session's own end (the window is padded by a scrape interval's margin) is past:
    # the cluster is gone. The padded end may still be ahead when the test runs quickly.
    assert end_ms - PAD_MS < time.time() * 1000
    answer = client.get(
        f"{dead.server.url}/prometheus/api/v1/query_range",
        params={
            "query": f'ray_node_mem_used{{SessionName="{dead.session}"}}',
            "start": f"{start_ms / 1000:.3f}",
            "end": f"{end_ms / 1000:.3f}",
            "step": str(SCRAPE_SECONDS),
        },
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    result = answer.json()["data"]["result"]
    values = [v for series in result for v in series["values"]]
    assert values, result
    assert all(start_ms / 1000 <= float(t) <= end_ms / 1000 for t, _ in values)
    assert all(float(v) > 0 for _, v in values)  # bytes of memory in use
    refused = client.get(
        f"{dead.server.url}/prometheus/api/v1/query", params={"query": "ray_node_mem_used"}, timeout=30
    )
    assert refused.status_code == 403 and "SessionName" in refused.json()["msg"]


def test_the_collector_stored_rays_dashboards_and_prometheus_config(dead: DeadSession) -> None:
    prefix = dead.bucket / KeyLayout("hist").session_prefix(CLUSTER, dead.session) / "metrics"
    dashboards = sorted(p.name for p in (prefix / "grafana" / "dashboards").iterdir())
    assert "default_grafana_dashboard.json" in dashboards and "data_grafana_dashboard.json" in dashboards
    default = json.loads((prefix / "grafana" / "dashboards" / "default_grafana_dashboard.json").read_text())
    assert default["uid"] == "rayDefaultDashboard"
    assert "prom_metrics_service_discovery.json" in (prefix / "prometheus" / "prometheus.yml").read_text()


def test_the_metrics_tab_frames_the_sessions_absolute_window(dead: DeadSession) -> None:
    client = dead.server.session(CLUSTER.namespace, CLUSTER.name, dead.session)
    start_ms, end_ms = _window(client, dead)
    with chromium_page(ARTIFACTS, 60_000, {"width": 1400, "height": 900}) as page:
        page.goto(f"{dead.server.url}/enter_cluster/{CLUSTER.namespace}/raycluster/{CLUSTER.name}/{dead.session}")
        page.goto(f"{dead.server.url}/#/metrics")
        iframe = page.locator("iframe[title='Core Dashboard']")
        iframe.wait_for()
        page.frame_locator("iframe[title='Core Dashboard']").get_by_text("stand-in page").wait_for()
        frame = iframe.element_handle().content_frame()
        assert frame is not None
        framed_url = frame.url
        page.screenshot(path=str(ARTIFACTS / "metrics-tab-dead-session.png"), full_page=True)
        # The Overview's two cards frame d-solo panels with from=now-1h: the same window.
        page.goto(f"{dead.server.url}/#/overview")
        cards = {}
        for title in ("Cluster Utilization", "Node Count"):
            selector = f"iframe[title='{title}']"
            page.frame_locator(selector).get_by_text("stand-in page").wait_for()
            card = page.locator(selector).element_handle().content_frame()
            assert card is not None
            cards[title] = dict(parse_qsl(urlsplit(card.url).query))
        page.screenshot(path=str(ARTIFACTS / "overview-dead-session.png"), full_page=True)
    for title, card_query in cards.items():
        assert (int(card_query["from"]), int(card_query["to"])) == (start_ms, end_ms), title
        assert card_query["var-SessionName"] == dead.session, title
    query = dict(parse_qsl(urlsplit(framed_url).query))
    assert (int(query["from"]), int(query["to"])) == (start_ms, end_ms)
    assert query["var-SessionName"] == dead.session and query["kiosk"] == "1" and "refresh" not in query
    framed = [r for r in dead.grafana.requests if r.path.startswith("/grafana/d/rayDefaultDashboard")]
    assert framed and all(f"from={start_ms}" in r.target and f"to={end_ms}" in r.target for r in framed), [
        r.target for r in framed
    ]
    assert all("cookie" not in r.headers for r in dead.grafana.requests), [
        (r.target, r.headers) for r in dead.grafana.requests if "cookie" in r.headers
    ]
