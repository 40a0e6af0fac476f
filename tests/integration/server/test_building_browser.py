"""A browser entering a session that is being indexed, in headless Chromium: the
progress page reloads itself into the Dashboard, and the cluster picker shows the
build's progress before it opens the Dashboard. ``--build-wait 0`` makes every
build outlast the request that started it, so the small sample session is enough
(and ``--no-index-ahead`` leaves the builds to the requests)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.storage.config import StorageConfig, open_store
from runtime.storage.layout import ClusterRef, KeyLayout
from tests.integration.emulators.base import REPO_ROOT
from tests.integration.server.harness import HistoryServerProcess
from tests.support.chromium import chromium_page
from tests.support.sample_session import StoredSample, write_sample_session

pytestmark = pytest.mark.integration

World = tuple[HistoryServerProcess, StoredSample, StoredSample]
ARTIFACTS = Path(os.environ.get("ARTIFACTS_DIR", REPO_ROOT / ".test-artifacts")) / "building"


@pytest.fixture(scope="module")
def world(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[HistoryServerProcess, StoredSample, StoredSample]]:
    root = tmp_path_factory.mktemp("building")
    store = open_store(StorageConfig(backend="local", local_dir=str(root / "store"), create_bucket=True))
    by_url = write_sample_session(store, KeyLayout(""), ClusterRef("default", "entered-by-url"))
    by_picker = write_sample_session(store, KeyLayout(""), ClusterRef("default", "entered-by-picker"))
    with HistoryServerProcess(root / "store", root / "cache", "--build-wait=0", "--no-index-ahead") as server:
        yield server, by_url, by_picker


@pytest.fixture
def page() -> Iterator[object]:
    with chromium_page(ARTIFACTS, 30_000, {"width": 1200, "height": 800}) as page:
        yield page


def test_the_progress_page_lands_in_the_dashboard(page: object, world: World) -> None:
    server, sample, _ = world
    statuses: list[int] = []
    page.on("response", lambda r: statuses.append(r.status) if "/enter_cluster/" in r.url else None)  # type: ignore[attr-defined]
    page.goto(f"{server.url}/enter_cluster/default/raycluster/{sample.cluster.name}/{sample.session}")  # type: ignore[attr-defined]
    assert page.title() == f"Indexing {sample.session}"  # type: ignore[attr-defined]
    page.screenshot(path=str(ARTIFACTS / "progress-page.png"))  # type: ignore[attr-defined]
    page.wait_for_url("**/#/overview")  # type: ignore[attr-defined]
    assert statuses[0] == 503 and statuses[-1] == 302, statuses
    cookies = {c["name"]: c["value"] for c in page.context.cookies()}  # type: ignore[attr-defined]
    assert cookies["session_name"] == sample.session


def test_the_picker_shows_the_build_then_opens_the_dashboard(page: object, world: World) -> None:
    server, _, sample = world
    page.goto(f"{server.url}/select_cluster")  # type: ignore[attr-defined]
    row = page.locator("tr", has_text=sample.cluster.name)  # type: ignore[attr-defined]
    row.locator("button.open").click()
    page.locator("#status", has_text="Indexing default/entered-by-picker").wait_for()  # type: ignore[attr-defined]
    page.wait_for_url("**/#/overview")  # type: ignore[attr-defined]
    cookies = {c["name"]: c["value"] for c in page.context.cookies()}  # type: ignore[attr-defined]
    assert cookies["cluster_name"] == sample.cluster.name
