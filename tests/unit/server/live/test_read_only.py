"""The live proxy is read-only: the only question asked of the authorizer is "may
read" (``get rayclusters``), so only reads reach a live cluster's dashboard. Job
submission (``POST /api/jobs/``: code execution on the cluster), stopping and
deleting jobs, package uploads ... are refused with 403 before the cluster is
looked up, its Secret read or any connection opened -- and so never carry the
cluster's Ray token."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from flask import Flask

from runtime.server.auth import build_access_control, install, parse_auth
from runtime.server.config import LiveClusterURL
from runtime.server.context import app_services
from runtime.server.live.discovery import StaticLiveDirectory
from tests.support.k8s_auth_stub import AuthApiStub, auth_api_stub
from tests.unit.server.live.k8s_stub import ApiStub, LoopbackDirectory, api_stub, kubernetes_directory
from tests.unit.server.live.servers import Upstream, live_cookies, make_app, serve, server_config, upstream_server
from tests.unit.server.live.test_token_auth import CLUSTERS, SECRETS, TOKEN, secret_reads

READER = "reader-token"
WRITES = ("POST", "PUT", "DELETE", "PATCH")
#: What the Dashboard's write endpoints are (Ray's job, package and serve APIs).
WRITE_PATHS = (
    "/api/jobs/",
    "/api/jobs/raysubmit_abc/stop",
    "/api/packages/gcs/_ray_pkg_x.zip",
    "/api/serve/applications/",
)


class Rig:
    def __init__(self, url: str, app: Flask, stub: ApiStub, upstream: Upstream, reviews: AuthApiStub) -> None:
        self.url, self.app, self.stub, self.upstream, self.reviews = url, app, stub, upstream, reviews

    def client(self) -> requests.Session:
        client = requests.Session()
        for key, value in live_cookies("team-a", "secure").items():
            client.cookies.set(key, value)
        client.headers["Authorization"] = f"Bearer {READER}"
        return client

    def proxied(self, outcome: str) -> float:
        registry = app_services(self.app).metrics.registry
        value = registry.get_sample_value("historyserver_live_proxy_requests_total", {"outcome": outcome})
        return float(value or 0.0)


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    """A viewer with a read grant on team-a (SubjectAccessReview ``get rayclusters``)
    and team-a/secure, a live cluster with Ray token auth whose Secret is readable."""
    with api_stub(*CLUSTERS) as stub, upstream_server() as upstream, auth_api_stub() as reviews:
        stub.secrets.extend(SECRETS)
        reviews.tokens = {READER: ("viewer@example.com", ("team-a-viewers",))}
        reviews.access = {("team-a-viewers", "team-a")}
        directory = LoopbackDirectory(kubernetes_directory(stub.url), upstream.url)
        app = make_app(server_config(tmp_path, proxy_timeout=5.0), directory)
        install(app, build_access_control(parse_auth("kubernetes", "kubernetes"), reviews.api_client))
        with serve(app) as url:
            yield Rig(url, app, stub, upstream, reviews)


@pytest.mark.parametrize("method", WRITES)
@pytest.mark.parametrize("path", WRITE_PATHS)
def test_writes_are_refused_before_anything_is_sent(rig: Rig, method: str, path: str) -> None:
    answer = rig.client().request(method, rig.url + path, json={"entrypoint": "python -c 'import os'"}, timeout=10)
    assert answer.status_code == 403, answer.text
    assert answer.headers["Content-Type"].startswith("application/json")
    message = answer.json()["msg"]
    assert "read-only" in message and method in message and "team-a/secure" in message
    assert TOKEN not in answer.text and TOKEN not in str(answer.headers)
    assert rig.upstream.seen == []  # no connection, so no token either
    assert secret_reads(rig.stub) == []  # the token was not even read
    verbs = {r["spec"]["resourceAttributes"]["verb"] for r in rig.reviews.access_reviews}
    assert verbs == {"get"}
    assert rig.proxied("read_only") == 1 and rig.proxied("forwarded") == 0


def test_session_urls_refuse_writes_too(rig: Rig) -> None:
    answer = rig.client().post(f"{rig.url}/sessions/team-a/secure/live/api/jobs/", json={}, timeout=10)
    assert answer.status_code == 403 and "read-only" in answer.json()["msg"]
    assert rig.upstream.seen == []


def test_reads_still_carry_the_token(rig: Rig) -> None:
    client = rig.client()
    for method in ("GET", "HEAD"):
        answer = client.request(method, f"{rig.url}/api/jobs/?x=1", timeout=10)
        assert answer.status_code == 200, answer.text
        seen = rig.upstream.last()
        assert (seen.method, seen.path) == (method, "/api/jobs/?x=1")
        assert seen.header("x-ray-authorization") == f"Bearer {TOKEN}"
        assert seen.header("Authorization") is None
    # The Dashboard's profiling links are GETs, and pass.
    assert client.get(f"{rig.url}/worker/traceback?pid=1&node_id=n", timeout=10).status_code == 200


def test_options_is_answered_here_without_the_token(rig: Rig) -> None:
    """The Dashboard is served same-origin: no preflight needs the cluster. OPTIONS is
    answered locally, naming what the proxy allows, and never forwarded."""
    for path in ("/api/jobs/", "/api/jobs/raysubmit_abc/stop"):
        answer = rig.client().options(rig.url + path, timeout=10)
        assert answer.status_code == 204, answer.text
        assert answer.headers["Allow"] == "GET, HEAD, OPTIONS"
        assert "Access-Control-Allow-Methods" not in answer.headers
    assert rig.upstream.seen == []


def test_writes_are_refused_without_access_control_too(tmp_path: Path) -> None:
    """With access control off (local use) the proxy is read-only all the same."""
    with upstream_server() as upstream:
        directory = StaticLiveDirectory([LiveClusterURL("default", "live-demo", upstream.url)])
        with serve(make_app(server_config(tmp_path), directory)) as url:
            client = requests.Session()
            for key, value in live_cookies().items():
                client.cookies.set(key, value)
            for method in WRITES:
                answer = client.request(method, f"{url}/api/jobs/raysubmit_abc/stop", data=b"{}", timeout=10)
                assert answer.status_code == 403 and method in answer.json()["msg"]
            assert upstream.seen == []
            assert client.get(f"{url}/api/jobs/", timeout=10).status_code == 200
            assert [s.method for s in upstream.seen] == ["GET"]
