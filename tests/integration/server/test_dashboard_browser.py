"""The real Ray Dashboard UI, served by the history server, browsing a stored
session in headless Chromium: jobs with their statuses, a job's tasks, actors, a
worker's log and the cluster page. Screenshots are kept as test artifacts
(``$ARTIFACTS_DIR`` or ``.test-artifacts/`` at the repository root)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.storage.config import StorageConfig, open_store
from runtime.storage.layout import KeyLayout
from tests.integration.emulators.base import REPO_ROOT
from tests.integration.server.harness import HistoryServerProcess
from tests.support.chromium import chromium_page
from tests.support.sample_session import StoredSample, write_sample_session

pytestmark = pytest.mark.integration

ARTIFACTS = Path(os.environ.get("ARTIFACTS_DIR", REPO_ROOT / ".test-artifacts")) / "dashboard"
WORKER_LOG = "worker-9072bffb047803924596bf8c6710e1f48c25899f83e6a4781d136078-02000000-10258.out"


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, StoredSample]:
    root = tmp_path_factory.mktemp("browser")
    store = open_store(StorageConfig(backend="local", local_dir=str(root / "store"), create_bucket=True))
    return root, write_sample_session(store, KeyLayout(""))


@pytest.fixture(scope="module")
def server(stored: tuple[Path, StoredSample]) -> Iterator[HistoryServerProcess]:
    root, _ = stored
    with HistoryServerProcess(root / "store", root / "cache") as proc:
        yield proc


@pytest.fixture(scope="module")
def browser_page(server: HistoryServerProcess) -> Iterator[object]:
    with chromium_page(ARTIFACTS, 30_000, {"width": 1400, "height": 1000}) as page:
        failures: list[str] = []
        page.on(
            "response",
            lambda r: failures.append(f"{r.status} {r.url}") if r.status >= 500 and _unexpected(r.url) else None,
        )
        page.failures = failures
        yield page


def _unexpected(url: str) -> bool:
    """A 5xx from an API call, except the metrics probes: like Ray without Grafana or
    Prometheus, the history server answers those 500 ``result: false`` on purpose."""
    return "/api/" in url and not url.endswith(("/api/grafana_health", "/api/prometheus_health"))


def _shot(page: object, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)  # type: ignore[attr-defined]


def test_pick_the_session_in_the_cluster_picker(
    browser_page: object, server: HistoryServerProcess, stored: tuple[Path, StoredSample]
) -> None:
    page = browser_page
    _, sample = stored
    page.goto(f"{server.url}/select_cluster")  # type: ignore[attr-defined]
    row = page.locator("tr", has_text=sample.session)  # type: ignore[attr-defined]
    row.locator("button.open").click()
    page.wait_for_url("**/#/overview")  # type: ignore[attr-defined]
    _shot(page, "01-overview")
    cookies = {c["name"]: c["value"] for c in page.context.cookies()}  # type: ignore[attr-defined]
    assert cookies["session_name"] == sample.session


def test_jobs_list_shows_real_statuses(browser_page: object, server: HistoryServerProcess) -> None:
    page = browser_page
    page.goto(f"{server.url}/#/jobs")  # type: ignore[attr-defined]
    page.get_by_text("wl-job2-fails").first.wait_for()  # type: ignore[attr-defined]
    page.get_by_text("raysubmit_zXeGXHwfPUEBW8Ci").first.wait_for()  # type: ignore[attr-defined]
    assert page.get_by_text("FAILED").count() >= 1  # type: ignore[attr-defined]
    assert page.get_by_text("SUCCEEDED").count() >= 1  # type: ignore[attr-defined]
    _shot(page, "02-jobs")


def test_job_detail_lists_its_tasks(browser_page: object, server: HistoryServerProcess) -> None:
    page = browser_page
    page.goto(f"{server.url}/#/jobs/02000000")  # type: ignore[attr-defined]
    page.get_by_text("square").first.wait_for()  # type: ignore[attr-defined]
    _shot(page, "03-job-detail")


def test_actors_page(browser_page: object, server: HistoryServerProcess) -> None:
    page = browser_page
    page.goto(f"{server.url}/#/actors")  # type: ignore[attr-defined]
    page.get_by_text("Counter").first.wait_for()  # type: ignore[attr-defined]
    _shot(page, "04-actors")


def test_worker_log(browser_page: object, server: HistoryServerProcess, stored: tuple[Path, StoredSample]) -> None:
    page = browser_page
    _, sample = stored
    page.goto(f"{server.url}/#/logs/viewer?nodeId={sample.node_id}&fileName={WORKER_LOG}")  # type: ignore[attr-defined]
    page.get_by_text("square(1) running in pid 10258").first.wait_for()  # type: ignore[attr-defined]
    _shot(page, "05-worker-log")


def test_cluster_page(browser_page: object, server: HistoryServerProcess) -> None:
    page = browser_page
    page.goto(f"{server.url}/#/cluster")  # type: ignore[attr-defined]
    page.get_by_text("192.0.2.2").first.wait_for()  # type: ignore[attr-defined]
    _shot(page, "06-cluster")
    assert page.failures == []  # type: ignore[attr-defined]
