"""Ray's log categories; checked against the live dashboard's answer for session A."""

from __future__ import annotations

import orjson
import pytest

from runtime.server.logs.categories import CATEGORY_ORDER, categorize, category_of
from tests.support.sample_session import API


@pytest.mark.parametrize(
    ("name", "category"),
    [
        ("worker-1-2-3.out", "worker_out"),
        ("worker-1-2-3.err", "worker_err"),
        ("python-core-worker-1_3.log", "core_worker"),
        ("python-core-driver-1_3.log", "driver"),
        ("raylet.out", "raylet"),
        ("gcs_server.err", "gcs_server"),
        ("log_monitor.log", "internal"),
        ("monitor.log", "autoscaler"),
        ("dashboard_agent.log", "agent"),
        ("dashboard.log", "dashboard"),
        ("events/", "internal"),
        ("debug_state.txt", "internal"),
    ],
)
def test_category_of(name: str, category: str) -> None:
    assert category_of(name) == category


def test_same_categories_as_the_live_dashboard() -> None:
    live = orjson.loads((API / "api_v0_logs_node_id.json").read_bytes())["data"]["result"]
    names = [name for names in live.values() for name in names]
    assert categorize(names) == {k: live[k] for k in CATEGORY_ORDER if k in live}


def test_empty_categories_are_omitted() -> None:
    assert categorize([]) == {}
    assert list(categorize(["raylet.out", "a.txt"])) == ["internal", "raylet"]
