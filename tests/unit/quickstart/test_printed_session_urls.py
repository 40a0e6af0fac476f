"""The quickstart's closing lines: every Dashboard link carries the session in its path
(``/sessions/...``, parsed back by the server's own parser) and a deep-link fragment."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from runtime.quickstart.runner import Quickstart
from runtime.quickstart.workload import JobResult
from runtime.server.session_urls import SessionTarget, parse_session_path
from tests.unit.quickstart.test_options import parse

SESSION = "session_2026-11-23_18-20-19_412672_14978"
TASK = "92ba3d58fa71ff60ffffffffffffffffffffffff03000000"


def test_links_are_session_urls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from runtime.quickstart.options import options_from_args

    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    quickstart = Quickstart(options_from_args(parse()), out)
    job = JobResult("quickstart-1", "03000000", "FAILED", "")
    quickstart._print_urls(SESSION, job, {"task_id": TASK, "name": "validate-batch-2", "error_message": "boom"})
    links = dict(re.findall(r"^\s+([A-Za-z ]+):\s+(http://\S+)", out.getvalue(), re.MULTILINE))
    base = quickstart.base_url
    fragments = {
        "Open the Dashboard": "#/overview",
        "The failed job": "#/jobs/03000000",
        "The failed task": f"#/jobs/03000000/tasks/{TASK}",
    }
    for label, fragment in fragments.items():
        url = links[label]
        assert url.startswith(base + "/sessions/") and url.endswith(fragment), (label, url)
        target, rest = parse_session_path(url[len(base) : -len(fragment)])
        assert target == SessionTarget("default", "raycluster", "quickstart", SESSION)
        assert rest == "/"
    assert links["Pick any session"] == base + "/select_cluster"
