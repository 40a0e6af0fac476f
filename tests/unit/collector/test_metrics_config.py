"""The head collector ships Ray's generated Grafana dashboards and Prometheus config
once per session, and nothing that is not Ray's (#14): links, other names, oversized
or malformed files stay behind. The file names and sizes are those of a real Ray 2.60
head (tests/fixtures/ray-samples; the integration test ships a real head's files)."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest

from runtime.collector.metrics_config import MAX_DASHBOARD_BYTES, MetricsConfigShipper, ray_metrics_files
from runtime.storage.config import StorageConfig, open_store
from runtime.storage.layout import ClusterRef, KeyLayout

CLUSTER = ClusterRef("default", "raycluster-metrics")
SESSION = "session_2026-11-25_21-02-01_123456_1234"
DASHBOARD = orjson.dumps({"uid": "rayDefaultDashboard", "panels": [{"id": 24}]})
PROM_YML = b"global:\n  scrape_interval: 10s\nscrape_configs:\n- job_name: ray\n  file_sd_configs:\n  - files: [x]\n"


def _session(tmp_root: Path, name: str = SESSION) -> Path:
    session = tmp_root / name
    (session / "metrics/grafana/dashboards").mkdir(parents=True)
    (session / "metrics/prometheus").mkdir(parents=True)
    (session / "metrics/grafana/dashboards/default_grafana_dashboard.json").write_bytes(DASHBOARD)
    (session / "metrics/grafana/dashboards/data_grafana_dashboard.json").write_bytes(DASHBOARD)
    (session / "metrics/prometheus/prometheus.yml").write_bytes(PROM_YML)
    latest = tmp_root / "session_latest"
    if latest.is_symlink():
        latest.unlink()
    latest.symlink_to(name)
    return session


def test_ships_each_file_once_under_the_session(tmp_path: Path) -> None:
    tmp_root = tmp_path / "ray"
    tmp_root.mkdir()
    _session(tmp_root)
    store = open_store(StorageConfig(backend="local", local_dir=str(tmp_path / "bucket"), create_bucket=True))
    layout = KeyLayout("hist")
    shipper = MetricsConfigShipper(store, layout, CLUSTER, tmp_root)
    assert shipper.ship_current() == 3
    prefix = layout.session_prefix(CLUSTER, SESSION)
    keys = sorted(o.key for o in store.walk(prefix))
    assert keys == [
        f"{prefix}metrics/grafana/dashboards/data_grafana_dashboard.json",
        f"{prefix}metrics/grafana/dashboards/default_grafana_dashboard.json",
        f"{prefix}metrics/prometheus/prometheus.yml",
    ]
    assert store.get_bytes(f"{prefix}metrics/prometheus/prometheus.yml") == PROM_YML
    assert shipper.ship_current() == 0  # once per session

    _session(tmp_root, "session_2026-11-25_22-00-00_000001_99")  # the head restarted: a new session
    assert shipper.ship_current() == 3


def test_only_rays_files_are_shipped(tmp_path: Path) -> None:
    tmp_root = tmp_path / "ray"
    tmp_root.mkdir()
    session = _session(tmp_root)
    dashboards = session / "metrics/grafana/dashboards"
    secret = tmp_path / "secret.json"
    secret.write_bytes(orjson.dumps({"token": "s3cr3t"}))
    (dashboards / "linked_grafana_dashboard.json").symlink_to(secret)
    (dashboards / "big_grafana_dashboard.json").write_bytes(b'{"x": "' + b"a" * MAX_DASHBOARD_BYTES + b'"}')
    (dashboards / "half_written_dashboard.json").write_bytes(b'{"panels": [')
    (dashboards / "list_dashboard.json").write_bytes(b"[1, 2]")
    (dashboards / "notes.txt").write_bytes(b"not a dashboard")
    os.mkfifo(dashboards / "fifo_dashboard.json")
    (session / "metrics/prometheus/prometheus.yml").unlink()
    (session / "metrics/prometheus/prometheus.yml").symlink_to(secret)
    found = ray_metrics_files(tmp_root, session)
    assert sorted(found) == [
        "grafana/dashboards/data_grafana_dashboard.json",
        "grafana/dashboards/default_grafana_dashboard.json",
    ]


@pytest.mark.parametrize("linked", ["metrics", "metrics/grafana", "metrics/prometheus"])
def test_a_linked_directory_is_not_followed(tmp_path: Path, linked: str) -> None:
    tmp_root = tmp_path / "ray"
    tmp_root.mkdir()
    session = _session(tmp_root)
    elsewhere = tmp_path / "elsewhere"
    (session / linked).rename(elsewhere)
    (session / linked).symlink_to(elsewhere)
    found = ray_metrics_files(tmp_root, session)
    if linked == "metrics":
        assert found == {}
    elif linked == "metrics/grafana":
        assert list(found) == ["prometheus/prometheus.yml"]
    else:
        assert "prometheus/prometheus.yml" not in found and len(found) == 2


def test_no_session_yet_ships_nothing(tmp_path: Path) -> None:
    store = open_store(StorageConfig(backend="local", local_dir=str(tmp_path / "bucket"), create_bucket=True))
    assert MetricsConfigShipper(store, KeyLayout(""), CLUSTER, tmp_path).ship_current() == 0
