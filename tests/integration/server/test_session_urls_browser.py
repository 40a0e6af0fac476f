"""Session URLs in headless Chromium against a real history server (gunicorn) over a local
store holding session A and session B (two real recorded sessions of one cluster): a deep
link opens that job in a fresh browser with no cookies, two tabs show two sessions side
by side, and nothing is kept in cookies. Screenshots go to ``.test-artifacts/session-urls``
(or ``$ARTIFACTS_DIR``)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runtime.server.session_urls import session_path
from runtime.storage.config import StorageConfig, open_store
from runtime.storage.layout import KeyLayout
from tests.integration.emulators.base import REPO_ROOT
from tests.integration.server.harness import HistoryServerProcess
from tests.support.chromium import chromium_page
from tests.support.sample_session import RUN_B, StoredSample, write_sample_session

pytestmark = pytest.mark.integration

ARTIFACTS = Path(os.environ.get("ARTIFACTS_DIR", REPO_ROOT / ".test-artifacts")) / "session-urls"
#: Job 02000000's submission id in each recorded session.
SUBMISSION_A = "raysubmit_zXeGXHwfPUEBW8Ci"
SUBMISSION_B = "raysubmit_dgRDq1r7dPm3T9sY"


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, StoredSample, StoredSample]:
    root = tmp_path_factory.mktemp("session-urls")
    store = open_store(StorageConfig(backend="local", local_dir=str(root / "store"), create_bucket=True))
    a = write_sample_session(store, KeyLayout(""))
    b = write_sample_session(store, KeyLayout(""), run=RUN_B)
    assert a.cluster == b.cluster and a.session != b.session
    return root, a, b


@pytest.fixture(scope="module")
def server(stored: tuple[Path, StoredSample, StoredSample]) -> Iterator[HistoryServerProcess]:
    root = stored[0]
    with HistoryServerProcess(root / "store", root / "cache") as proc:
        yield proc


@pytest.fixture
def page() -> Iterator[Any]:
    with chromium_page(ARTIFACTS, 60_000, {"width": 1400, "height": 1000}) as fresh:
        yield fresh


def _url(server: HistoryServerProcess, sample: StoredSample) -> str:
    return server.url + session_path(sample.cluster, sample.session)


def test_a_deep_link_opens_the_job_in_a_fresh_browser(
    page: Any, server: HistoryServerProcess, stored: tuple[Path, StoredSample, StoredSample]
) -> None:
    a = stored[1]
    answer = page.goto(_url(server, a) + "#/jobs/03000000")
    assert answer is not None and answer.status == 200
    page.get_by_text("wl-job2-fails").first.wait_for()
    assert page.url == _url(server, a) + "#/jobs/03000000"  # no redirect through a picker
    page.screenshot(path=str(ARTIFACTS / "deep-link-job.png"))
    assert page.context.cookies() == []
    # The access log shows the URLs as requested (the session part is only hidden from the views).
    assert f"GET {session_path(a.cluster, a.session)}api/jobs/" in server.log_path.read_text()


def test_two_tabs_show_two_sessions(
    page: Any, server: HistoryServerProcess, stored: tuple[Path, StoredSample, StoredSample]
) -> None:
    _, a, b = stored
    main_js_sent = _main_js_downloads(server)
    tab_a = page
    tab_b = page.context.new_page()
    tab_a.goto(_url(server, a) + "#/jobs")
    tab_b.goto(_url(server, b) + "#/jobs")
    tab_a.get_by_text(SUBMISSION_A).first.wait_for()
    tab_b.get_by_text(SUBMISSION_B).first.wait_for()
    tab_b.get_by_text("wl-job3-stopped").first.wait_for()  # a job only session B has
    # Back in the first tab after the second loaded: still session A.
    tab_a.reload()
    tab_a.get_by_text(SUBMISSION_A).first.wait_for()
    assert tab_a.get_by_text(SUBMISSION_B).count() == 0
    assert tab_a.get_by_text("wl-job3-stopped").count() == 0
    tab_a.screenshot(path=str(ARTIFACTS / "tab-session-a.png"))
    tab_b.screenshot(path=str(ARTIFACTS / "tab-session-b.png"))
    assert page.context.cookies() == []
    # main.js (over 1 MB) was downloaded once for both sessions: their URLs redirect to /static/.
    assert _main_js_downloads(server) == main_js_sent + 1


def _main_js_downloads(server: HistoryServerProcess) -> int:
    return len(re.findall(r'"GET /static/js/main\.[0-9a-f]+\.js HTTP/[0-9.]+" 200', server.log_path.read_text()))


def test_latest_and_the_missing_slash(
    page: Any, server: HistoryServerProcess, stored: tuple[Path, StoredSample, StoredSample]
) -> None:
    b = stored[2]  # the newer of the two
    latest = f"{server.url}/sessions/{b.cluster.namespace}/{b.cluster.name}/latest"
    page.goto(latest + "#/jobs")  # redirected to latest/, the fragment kept
    page.get_by_text(SUBMISSION_B).first.wait_for()
    assert page.url == latest + "/#/jobs"


def test_enter_cluster_lands_on_the_deep_link(
    page: Any, server: HistoryServerProcess, stored: tuple[Path, StoredSample, StoredSample]
) -> None:
    a = stored[1]
    enter = f"{server.url}/enter_cluster/{a.cluster.namespace}/raycluster/{a.cluster.name}/{a.session}"
    page.goto(enter + "#/jobs/03000000")  # the fragment survives the redirect (RFC 9110 section 10.2.2)
    page.get_by_text("wl-job2-fails").first.wait_for()
    assert page.url == _url(server, a) + "#/jobs/03000000"
    page.goto(f"{server.url}/enter_cluster/{a.cluster.namespace}/{a.cluster.name}#/jobs")  # latest, short form
    page.get_by_text(SUBMISSION_B).first.wait_for()
    assert page.url == server.url + session_path(a.cluster, stored[2].session) + "#/jobs"
