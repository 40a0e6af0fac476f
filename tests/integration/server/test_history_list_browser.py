"""The history list (#19 item 2) in headless Chromium against a real history server:
outcomes of indexed sessions, the "failed only", owner and date filters, sorting by a
column, "Load more" through the cursor, each row's link and its copy-link button.

The store holds the real sessions A (jobs 2 FAILED + 2 SUCCEEDED, 7 failed task
attempts) and B (run B of the captured samples, owned by a RayJob), both indexed
before the page loads, one unindexed older session of A's cluster and 150 marker-only
sessions so that the first page (100) is not everything. Screenshots go to
``$ARTIFACTS_DIR`` or ``.test-artifacts/history-list``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from runtime.storage.config import StorageConfig, open_store
from runtime.storage.layout import ClusterRef, KeyLayout
from tests.integration.emulators.base import REPO_ROOT
from tests.integration.server.harness import HistoryServerProcess, get_when_indexed
from tests.support.chromium import chromium_page
from tests.support.sample_session import RUN_B, SESSION_A, StoredSample, write_sample_session

pytestmark = pytest.mark.integration

ARTIFACTS = Path(os.environ.get("ARTIFACTS_DIR", REPO_ROOT / ".test-artifacts")) / "history-list"
DEMO = ClusterRef("default", "raycluster-demo")
NIGHTLY = ClusterRef("team-a", "rayjob-nightly-x7k2p", "rayjob", "rayjob-nightly")
OLDER = "session_2026-11-01_08-00-00_000001_1"
BULK = ClusterRef("bulk", "raycluster-bulk")
BULK_COUNT = 150

World = tuple[HistoryServerProcess, StoredSample, StoredSample]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("history-list")
    store = open_store(StorageConfig(backend="local", local_dir=str(root / "store"), create_bucket=True))
    layout = KeyLayout("")
    a = write_sample_session(store, layout, DEMO)
    b = write_sample_session(store, layout, NIGHTLY, run=RUN_B)
    store.put_bytes(layout.marker_key(DEMO, OLDER), b"")
    for i in range(BULK_COUNT):
        store.put_bytes(layout.marker_key(BULK, f"session_2026-10-{1 + i // 60:02d}_00-{i % 60:02d}-00_000000_1"), b"")
    with HistoryServerProcess(root / "store", root / "cache") as server:
        client = requests.Session()
        for sample in (a, b):
            kind = sample.cluster.owner_kind
            name = sample.cluster.owner_name or sample.cluster.name
            get_when_indexed(
                client, f"{server.url}/enter_cluster/{sample.cluster.namespace}/{kind}/{name}/{sample.session}", 120
            )
        yield server, a, b


@pytest.fixture
def page(world: World) -> Iterator[object]:
    with chromium_page(ARTIFACTS, 30_000, {"width": 1500, "height": 900}) as page:
        page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=world[0].url)
        page.goto(f"{world[0].url}/select_cluster")
        page.locator("#status", has_text="cluster sessions").wait_for()
        yield page


def _rows(page: object) -> object:
    return page.locator("#rows tr")  # type: ignore[attr-defined]


def _sessions(page: object) -> list[str]:
    return page.locator("#rows tr td.name .session").all_inner_texts()  # type: ignore[attr-defined,no-any-return]


def _column(page: object, index: int) -> list[str]:
    cells = page.locator(f"#rows tr td:nth-child({index})").all_inner_texts()  # type: ignore[attr-defined]
    return [text.strip() for text in cells]


def test_outcomes_and_load_more(page: object, world: World) -> None:
    _, _, b = world
    assert _rows(page).count() == 100  # type: ignore[attr-defined]
    row_a = page.locator("#rows tr", has_text=SESSION_A)  # type: ignore[attr-defined]
    assert "2 FAILED" in row_a.inner_text() and "2 SUCCEEDED" in row_a.inner_text()
    assert row_a.locator("td").nth(7).inner_text().strip() == "7"  # failed tasks
    assert row_a.locator("td").nth(8).inner_text().strip() == "1"  # nodes
    row_b = page.locator("#rows tr", has_text=b.session)  # type: ignore[attr-defined]
    assert "rayjob" in row_b.inner_text() and "rayjob-nightly" in row_b.inner_text()
    older = page.locator("#rows tr", has_text=OLDER)  # type: ignore[attr-defined]
    assert "not indexed yet" in older.inner_text()
    page.screenshot(path=str(ARTIFACTS / "picker-with-outcomes.png"))  # type: ignore[attr-defined]
    more = page.locator("#more")  # type: ignore[attr-defined]
    assert more.is_visible()
    more.click()
    page.locator("#status", has_text=f"{BULK_COUNT + 3} of {BULK_COUNT + 3} cluster sessions").wait_for()  # type: ignore[attr-defined]
    assert not more.is_visible()
    sessions = _sessions(page)
    assert len(sessions) == len(set(sessions)) == BULK_COUNT + 3  # no duplicates across the two pages


def test_failed_only_owner_and_dates(page: object, world: World) -> None:
    _, _, b = world
    page.locator("#f-failed").check()  # type: ignore[attr-defined]
    page.locator("#status", has_text="of 2 cluster sessions").wait_for()  # type: ignore[attr-defined]
    assert sorted(_sessions(page)) == sorted([SESSION_A, b.session])
    assert page.locator("#more").is_hidden()  # type: ignore[attr-defined]
    page.locator("#f-owner").fill("rayjob/rayjob-nightly")  # type: ignore[attr-defined]
    page.locator("#status", has_text="1 of 1 cluster sessions").wait_for()  # type: ignore[attr-defined]
    assert _sessions(page) == [b.session]
    page.locator("#f-owner").fill("")  # type: ignore[attr-defined]
    page.locator("#f-failed").uncheck()  # type: ignore[attr-defined]
    page.locator("#f-from").fill("2026-11-01")  # type: ignore[attr-defined]
    page.locator("#f-to").fill("2026-11-01")  # type: ignore[attr-defined]
    page.locator("#status", has_text="1 of 1 cluster sessions").wait_for()  # type: ignore[attr-defined]
    assert _sessions(page) == [OLDER]
    page.screenshot(path=str(ARTIFACTS / "filtered-by-date.png"))  # type: ignore[attr-defined]


def test_sort_by_columns(page: object, world: World) -> None:
    page.locator("th[data-sort=failedTasks] button").click()  # type: ignore[attr-defined]
    header = page.locator("th[data-sort=failedTasks]")  # type: ignore[attr-defined]
    assert header.get_attribute("aria-sort") == "descending"
    failed = [int(v) if v else None for v in _column(page, 8)]
    known = [v for v in failed if v is not None]
    assert known == sorted(known, reverse=True) and known[0] == 7
    assert failed[: len(known)] == known  # unknown (unindexed) last
    # The same order as the API's first page sorted by failedTasks, ties in the server's order.
    entries = requests.get(f"{world[0].url}/clusters?limit=100", timeout=30).json()
    indexed = [e for e in entries if e["summary"]]
    expected = [e["sessionName"] for e in sorted(indexed, key=lambda e: -e["summary"]["failedTasks"])]
    assert _sessions(page)[: len(expected)] == expected and SESSION_A in expected
    header.locator("button").click()
    assert header.get_attribute("aria-sort") == "ascending"
    ascending = [int(v) for v in _column(page, 8) if v]
    assert ascending == sorted(ascending)
    page.locator("th[data-sort=cluster] button").click()  # type: ignore[attr-defined]
    names = [text.split("\n")[0] for text in _column(page, 1)]
    assert names == sorted(names) and header.get_attribute("aria-sort") is None
    page.locator("th[data-sort=start] button").click()  # type: ignore[attr-defined]
    starts = _column(page, 4)
    assert starts == sorted(starts, reverse=True)
    page.screenshot(path=str(ARTIFACTS / "sorted.png"))  # type: ignore[attr-defined]


def test_row_link_and_copy_link(page: object, world: World) -> None:
    server = world[0]
    expected = f"{server.url}/sessions/default/raycluster-demo/{SESSION_A}/"
    row = page.locator("#rows tr", has_text=SESSION_A)  # type: ignore[attr-defined]
    assert row.locator("a.session-link").get_attribute("href") == expected
    row.locator("button.copy").click()
    row.locator("button.copy", has_text="Copied").wait_for()
    assert page.evaluate("navigator.clipboard.readText()") == expected  # type: ignore[attr-defined]
