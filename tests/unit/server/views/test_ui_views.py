"""The Ray Dashboard UI routes and the last-resort route (live proxy or 404)."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from runtime.server.config import LiveClusterURL
from runtime.server.live.discovery import NoLiveDirectory, StaticLiveDirectory
from runtime.server.views.ui import find_dashboard_build
from tests.unit.server.live.servers import Upstream, live_cookies, make_app, server_config, upstream_server

MAIN_JS = "main.0123abcd.js"
STORED = {
    "cluster_name": "raycluster-demo",
    "cluster_namespace": "default",
    "session_name": "session_2026-11-22_01-45-25_333080_9264",
}


@pytest.fixture
def build(tmp_path: Path) -> Path:
    root = tmp_path / "build"
    (root / "static" / "js").mkdir(parents=True)
    (root / "index.html").write_text(f'<!doctype html><title>Ray Dashboard</title><script src="./static/js/{MAIN_JS}">')
    (root / "static" / "js" / MAIN_JS).write_text("console.log('dashboard')")
    (root / "favicon.ico").write_bytes(b"\x00\x00\x01\x00")
    (root / "speedscope-1.5.3").mkdir()
    (root / "speedscope-1.5.3" / "index.html").write_text("speedscope")
    (tmp_path / "secret.txt").write_text("outside the build")
    return root


def _client(app: Flask, cookies: dict[str, str] | None = None) -> FlaskClient:
    client = app.test_client()
    for name, value in (cookies or {}).items():
        client.set_cookie(name, value)
    return client


@pytest.fixture
def app(tmp_path: Path, build: Path) -> Flask:
    return make_app(server_config(tmp_path, dashboard_dir=build), NoLiveDirectory())


def test_index(app: Flask) -> None:
    answer = _client(app, STORED).get("/")
    assert answer.status_code == 200
    assert b"Ray Dashboard" in answer.data
    assert answer.headers["Cache-Control"] == "no-cache"
    assert answer.headers["X-Content-Type-Options"] == "nosniff"
    assert answer.mimetype == "text/html"
    assert _client(app).head("/").status_code == 200


def test_index_without_a_selection_goes_to_the_picker(tmp_path: Path, build: Path, app: Flask) -> None:
    assert _client(app).get("/").status_code == 200  # no picker route registered: just the UI
    app = make_app(server_config(tmp_path, dashboard_dir=build), NoLiveDirectory())

    @app.get("/select_cluster")
    def picker() -> str:
        return "picker"

    answer = _client(app).get("/")
    assert answer.status_code == 302
    assert answer.headers["Location"] == "select_cluster"  # relative: works under a path prefix
    assert _client(app, STORED).get("/").status_code == 200


def test_hashed_assets_are_immutable(app: Flask) -> None:
    answer = _client(app).get(f"/static/js/{MAIN_JS}")
    assert answer.status_code == 200
    assert answer.data == b"console.log('dashboard')"
    assert answer.headers["Cache-Control"] == "public, max-age=31536000, immutable"
    assert "javascript" in answer.mimetype


def test_top_level_files(app: Flask) -> None:
    favicon = _client(app).get("/favicon.ico")
    assert favicon.status_code == 200 and favicon.data == b"\x00\x00\x01\x00"
    assert "max-age=3600" in favicon.headers["Cache-Control"]
    assert _client(app).get("/speedscope-1.5.3/index.html").data == b"speedscope"


@pytest.mark.parametrize(
    "path",
    [
        "/static/../../secret.txt",
        "/static/%2e%2e/%2e%2e/secret.txt",
        "/static/..%2f..%2fsecret.txt",
        "/../secret.txt",
        "/%2e%2e/secret.txt",
        "/static/js/missing.js",
        "/static/",
    ],
)
def test_no_escape_from_the_build(app: Flask, path: str) -> None:
    answer = _client(app).get(path)
    assert answer.status_code == 404
    assert b"outside the build" not in answer.data
    assert answer.get_json()["result"] is False


def test_missing_build_explains_the_fix(tmp_path: Path) -> None:
    app = make_app(server_config(tmp_path, dashboard_dir=tmp_path / "nothing"), NoLiveDirectory())
    for path in ("/", f"/static/js/{MAIN_JS}"):
        answer = _client(app).get(path)
        assert answer.status_code == 404
        assert "--dashboard-dir" in answer.get_json()["msg"]


@pytest.mark.parametrize("method", ["GET", "POST", "DELETE"])
def test_unknown_paths_are_404_json(app: Flask, method: str) -> None:
    """404, not 405: behind ``ray start --proxy-server-url`` a 404 lets Ray answer itself."""
    for cookies, text in ((None, "no such route"), (STORED, "stored sessions"),
                          ({**STORED, "cluster_name": "Bad_Name"}, "no such route")):  # fmt: skip
        answer = _client(app, cookies).open("/api/jobs/raysubmit_x/stop", method=method)
        assert answer.status_code == 404
        assert text in answer.get_json()["msg"]


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    with upstream_server() as up:
        yield up


def test_live_selection_is_proxied(tmp_path: Path, build: Path, upstream: Upstream) -> None:
    directory = StaticLiveDirectory([LiveClusterURL("default", "live-demo", upstream.url)])
    app = make_app(server_config(tmp_path, dashboard_dir=build), directory)
    client = _client(app, live_cookies())
    answer = client.get("/api/jobs/raysubmit_x?x=1")
    assert answer.status_code == 200
    assert answer.get_json()["path"] == "/api/jobs/raysubmit_x?x=1"
    assert upstream.last().method == "GET"
    assert "session_name=live; " in "\n".join(answer.headers.getlist("Set-Cookie"))
    # Read-only: a write is our JSON 403 (not a bare 405), never sent to the cluster.
    refused = client.post("/api/jobs/raysubmit_x/stop", data=b"{}", content_type="application/json")
    assert refused.status_code == 403 and "read-only" in refused.get_json()["msg"]
    assert [s.method for s in upstream.seen] == ["GET"]
    assert client.get("/worker/traceback?pid=1&ip=10.0.0.1").get_json()["path"] == "/worker/traceback?pid=1&ip=10.0.0.1"
    # The UI itself is always ours, even for a live cluster.
    assert b"Ray Dashboard" in client.get("/").data
    assert client.get("/favicon.ico").data == b"\x00\x00\x01\x00"


def test_find_build_without_importing_ray(tmp_path: Path, build: Path) -> None:
    assert find_dashboard_build(build) == build
    assert find_dashboard_build(tmp_path / "nothing") is None
    code = (
        "import sys\n"
        "from runtime.server.views.ui import find_dashboard_build\n"
        "found = find_dashboard_build()\n"
        "assert 'ray' not in sys.modules, 'ray was imported'\n"
        "print(found or '')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    found = out.stdout.strip()
    # The dev extra installs ray[default] (its dashboard build): not finding it is a bug.
    assert found and Path(found, "index.html").is_file(), out.stdout


def test_the_real_ray_build(tmp_path: Path) -> None:
    assert find_dashboard_build() is not None, "the dev extra installs ray[default], whose dashboard build is served"
    app = make_app(server_config(tmp_path), NoLiveDirectory())
    client = _client(app, STORED)
    index = client.get("/")
    assert index.status_code == 200 and b"Ray Dashboard" in index.data
    scripts = re.findall(rb'src="\./(static/js/[^"]+)"', index.data)
    assert scripts
    for script in scripts:
        answer = client.get("/" + script.decode())
        assert answer.status_code == 200 and len(answer.data) > 1000
        assert "immutable" in answer.headers["Cache-Control"]
    assert client.get("/favicon.ico").status_code == 200
