"""``/livez``, ``/readz`` and ``/metrics``."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from runtime.server.context import app_services
from runtime.server.live.discovery import NoLiveDirectory
from tests.unit.server.live.servers import make_app, server_config


@pytest.mark.parametrize("method", ["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS"])
def test_probes_answer_ok_for_any_method(tmp_path: Path, method: str) -> None:
    client = make_app(server_config(tmp_path), NoLiveDirectory()).test_client()
    for path in ("/livez", "/readz", "/livez/"):
        answer = client.open(path, method=method)
        assert answer.status_code == 200, (path, method)
        assert answer.mimetype == "text/plain"
        if method != "HEAD":
            assert answer.data == b"ok"


def test_readz_recreates_a_wiped_cache_dir(tmp_path: Path) -> None:
    config = server_config(tmp_path)
    client = make_app(config, NoLiveDirectory()).test_client()
    assert client.get("/readz").status_code == 200
    shutil.rmtree(config.cache_dir, ignore_errors=True)
    assert client.get("/readz").status_code == 200
    assert config.cache_dir.is_dir()


def test_readz_fails_when_the_cache_dir_is_unusable(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    config = server_config(tmp_path)
    app = make_app(config.__class__(**{**config.__dict__, "cache_dir": blocker / "cache"}), NoLiveDirectory())
    answer = app.test_client().get("/readz")
    assert answer.status_code == 503
    assert b"not writable" in answer.data
    assert app.test_client().get("/livez").status_code == 200  # alive all the same


def test_metrics(tmp_path: Path) -> None:
    app = make_app(server_config(tmp_path), NoLiveDirectory())
    metrics = app_services(app).metrics
    metrics.proxied.labels("forwarded").inc()
    answer = app.test_client().get("/metrics")
    assert answer.status_code == 200
    assert answer.headers["Content-Type"].startswith("text/plain; version=")
    assert b'historyserver_live_proxy_requests_total{outcome="forwarded"} 1.0' in answer.data
