"""Issue #19 item 3 in the real Ray Dashboard UI: the Cluster page of a dead session
shows DEAD and no NaN. A stored session whose head was still ALIVE in its events (Ray
exports nothing when a head is deleted) and whose worker died on its own is served by
a real history server with no live cluster; headless Chromium opens the Cluster page.
The screenshot is kept as a test artifact (``$ARTIFACTS_DIR`` or ``.test-artifacts/``);
``docs/dead-cluster.png`` is a copy of it."""

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
from tests.support.dead_session import CLUSTER, HEAD_HEX, HEAD_LOG, SESSION, write_dead_session

pytestmark = pytest.mark.integration

ARTIFACTS = Path(os.environ.get("ARTIFACTS_DIR", REPO_ROOT / ".test-artifacts")) / "dashboard"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HistoryServerProcess]:
    root = tmp_path_factory.mktemp("dead-cluster")
    write_dead_session(
        open_store(StorageConfig(backend="local", local_dir=str(root / "store"), create_bucket=True)), KeyLayout("")
    )
    with HistoryServerProcess(root / "store", root / "cache", "--kubernetes=off") as proc:
        yield proc


def test_cluster_page_of_a_dead_session_shows_dead_and_no_nan(server: HistoryServerProcess) -> None:
    with chromium_page(ARTIFACTS, 30_000, {"width": 1600, "height": 900}) as page:
        # Entering the session as a person does: the server sets the cookies and redirects.
        page.goto(f"{server.url}/enter_cluster/{CLUSTER.namespace}/raycluster/{CLUSTER.name}/{SESSION}")
        page.wait_for_url("**/#/overview")
        page.goto(f"{server.url}/#/cluster")
        table = page.locator("table").filter(has_text="head-host")
        table.wait_for()
        page.get_by_text("worker-host").first.wait_for()
        # The node rows: both DEAD (the head at the session's end, the worker by its own death).
        rows = table.locator("tbody tr")
        texts = [rows.nth(i).inner_text() for i in range(rows.count())]
        node_rows = [t for t in texts if "head-host" in t or "worker-host" in t]
        assert len(node_rows) == 2, texts
        assert all("DEAD" in t and "ALIVE" not in t for t in node_rows), node_rows
        # The resource columns: last known totals, never NaN or 0B/0B.
        head = next(t for t in node_rows if "head-host" in t)
        assert "/8.00GB" in head and "/2.00GB" in head, head  # memory, object store totals
        body = page.locator("body").inner_text()
        assert "NaN" not in body
        assert "0.0000B/0.0000B" not in body
        page.screenshot(path=str(ARTIFACTS / "dead-cluster.png"), full_page=False)
        # Ray hides the Log link of a DEAD node's row (a live cluster has lost those
        # logs); the node's own page still links them, and storage still has them.
        page.goto(f"{server.url}/#/cluster/nodes/{HEAD_HEX}")
        page.get_by_text("DEAD").first.wait_for()
        page.get_by_role("link", name="log", exact=True).click()
        page.get_by_text(HEAD_LOG).first.wait_for()
