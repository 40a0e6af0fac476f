"""ray_history_pulumi/grafana: the vendored dashboards are what the installed Ray generates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import ray

from ray_history_pulumi import grafana
from ray_history_pulumi.grafana import generate

#: Ray's default uids (``default_uid`` of each DashboardConfig); the server's default
#: ``--grafana-dashboard-uids`` lists the same, the default dashboard first.
RAY_DEFAULT_UIDS = [
    "rayDefaultDashboard",
    "rayDataDashboard",
    "rayDataLlmDashboard",
    "rayServeDashboard",
    "rayServeDeploymentDashboard",
    "rayServeLlmDashboard",
    "rayServeLlmSglangDashboard",
    "rayTrainDashboard",
]


def test_vendored_dashboards_equal_what_the_installed_ray_generates() -> None:
    fresh = generate.generate()
    committed = {p.name: p.read_text(encoding="utf-8") for p in generate.DASHBOARD_DIR.glob("*.json")}
    assert set(committed) == set(fresh), "run: python -m ray_history_pulumi.grafana.generate"
    stale = sorted(name for name in fresh if fresh[name] != committed[name])
    assert not stale, f"{stale} differ from Ray {ray.__version__}'s: run python -m ray_history_pulumi.grafana.generate"


def test_generation_ignores_the_shells_uid_overrides(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("RAY_GRAFANA_DEFAULT_DASHBOARD_UID", "someoneElses")
    generate.main(["--out", str(tmp_path)])
    assert json.loads((tmp_path / "default_grafana_dashboard.json").read_text())["uid"] == "rayDefaultDashboard"


def test_dashboards_are_valid_grafana_json_of_this_ray_version() -> None:
    found = grafana.dashboards()
    assert [d.uid for d in found] and len({d.uid for d in found}) == len(found)
    for dashboard in found:
        parsed = json.loads(dashboard.content)
        assert parsed["uid"] == dashboard.uid
        assert parsed["title"] and isinstance(parsed["panels"], list) and parsed["panels"]
        assert f"rayVersion:{ray.__version__}" in parsed["tags"]
        # The datasource is a variable picking a Prometheus one: any store's name works.
        (variable,) = [v for v in parsed["templating"]["list"] if v["name"] == "datasource"]
        assert variable["type"] == "datasource" and variable["query"] == "prometheus"
        for panel in parsed["panels"]:
            for target in panel.get("targets", []):
                assert target["expr"].strip(), f"{dashboard.file_name}: panel {panel.get('title')} has no query"
        assert json.loads(dashboard.compact) == parsed


def test_default_uids_default_dashboard_first() -> None:
    assert grafana.dashboard_uids() == RAY_DEFAULT_UIDS


def test_ray_session_filter_is_there_for_dead_sessions() -> None:
    """A dead session's charts are found by Ray's ``SessionName`` label: the default dashboard filters on it."""
    (default,) = [d for d in grafana.dashboards() if d.uid == "rayDefaultDashboard"]
    names = [v["name"] for v in json.loads(default.content)["templating"]["list"]]
    assert "SessionName" in names and "Cluster" in names
