"""The live proxy in front of a real Ray 2.60 head started with token auth
(``RAY_AUTH_MODE=token``, as KubeRay configures ``authOptions.mode: token``, #16).

Discovery and the Secret come from the stand-in Kubernetes API (the official
client talking HTTP to it); the head answers on loopback. The proxied Dashboard
calls succeed with the token from the Secret, a client's own Authorization never
reaches Ray (Ray would prefer it to ours and refuse it), and a Secret the server
may not read is a 503 with nothing sent.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from tests.integration.emulators.base import free_port
from tests.integration.ray_harness import RAY_BIN, ray_available, wait_until
from tests.unit.server.live.k8s_stub import LoopbackDirectory, api_stub, kubernetes_directory, raycluster, secret
from tests.unit.server.live.servers import live_cookies, make_app, serve, server_config

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(not ray_available(), reason="ray 2.60 is not installed in this environment"),
]


@dataclass
class TokenHead:
    url: str
    token: str


@pytest.fixture(scope="module")
def head() -> Iterator[TokenHead]:
    """``ray start --head --block`` on loopback with token auth, in its own process
    group (stopped by that group alone, never ``ray stop``)."""
    token = secrets.token_hex(32)  # what Ray's own generator makes
    tmp_root = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))  # Unix socket paths are short
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token, "RAY_USAGE_STATS_ENABLED": "0"}
    cmd = [
        str(RAY_BIN), "start", "--head", "--block", f"--port={free_port()}", "--node-ip-address=127.0.0.1",
        "--dashboard-host=127.0.0.1", f"--dashboard-port={port}", "--include-dashboard=true", "--num-cpus=1",
        f"--temp-dir={tmp_root}", "--disable-usage-stats",
    ]  # fmt: skip
    log_path = tmp_root.with_suffix(".ray-start.log")
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            cmd, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )

    def up() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"ray start exited with {proc.returncode}; see {log_path}")
        try:
            answer = requests.get(f"{url}/api/version", headers={"Authorization": f"Bearer {token}"}, timeout=2)
        except requests.RequestException:
            return False
        return answer.status_code == 200

    try:
        wait_until(up, 180, f"Ray dashboard with token auth on {url} (see {log_path})")
        yield TokenHead(url, token)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: ~2 s; SIGTERM waits ~30 s (RayHead.stop)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=30)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        shutil.rmtree(tmp_root, ignore_errors=True)
        log_path.unlink(missing_ok=True)


@pytest.fixture
def proxy(tmp_path: Path, head: TokenHead) -> Iterator[str]:
    clusters = (
        raycluster("secure", "team-a", auth={"mode": "token"}),
        raycluster("byo", "team-b", auth={"mode": "token", "secretName": "stale-token"}),
        raycluster("locked", "team-c", auth={"mode": "token"}),
    )
    with api_stub(*clusters) as stub:
        stub.secrets.append(secret("secure", "team-a", {"auth_token": head.token}, owner="secure"))
        stub.secrets.append(secret("stale-token", "team-b", {"auth_token": secrets.token_hex(32)}))
        stub.secrets.append(secret("locked", "team-c", {"auth_token": head.token}, owner="locked"))
        stub.secrets_forbidden_in.add("team-c")  # no Role for the history server there
        directory = LoopbackDirectory(kubernetes_directory(stub.url), head.url)
        with serve(make_app(server_config(tmp_path, proxy_timeout=30.0), directory)) as url:
            yield url


def _client(namespace: str, name: str) -> requests.Session:
    client = requests.Session()
    for key, value in live_cookies(namespace, name).items():
        client.cookies.set(key, value)
    return client


def test_the_head_refuses_requests_without_the_token(head: TokenHead) -> None:
    assert requests.get(f"{head.url}/api/version", timeout=10).status_code == 401
    assert requests.get(f"{head.url}/api/authentication_mode", timeout=10).json()["authentication_mode"] == "token"


def test_proxied_dashboard_calls_carry_the_token_from_the_secret(proxy: str) -> None:
    client = _client("team-a", "secure")
    version = client.get(f"{proxy}/api/version", timeout=30)
    assert version.status_code == 200, version.text
    assert version.json()["ray_version"] == "2.60.0"
    jobs = client.get(f"{proxy}/api/jobs/", timeout=30)
    assert jobs.status_code == 200, jobs.text
    assert isinstance(jobs.json(), list)
    nodes = client.get(f"{proxy}/nodes?view=summary", timeout=30)
    assert nodes.status_code == 200, nodes.text


def test_client_credentials_never_reach_ray(proxy: str) -> None:
    """Ray reads Authorization before x-ray-authorization: forwarded, the caller's
    history-server token would be refused (403) instead of ours being used."""
    client = _client("team-a", "secure")
    client.cookies.set("ray-authentication-token", "forged")
    headers = {"Authorization": "Bearer history-server-login", "X-Ray-Authorization": "Bearer forged"}
    answer = client.get(f"{proxy}/api/version", headers=headers, timeout=30)
    assert answer.status_code == 200, answer.text
    # Ray's own login endpoint (the Dashboard's one non-GET request) is a POST: the
    # read-only proxy never sends it, so no token cookie can be minted through it.
    login = client.post(f"{proxy}/api/authenticate", headers=headers, timeout=30)
    assert login.status_code == 403 and "read-only" in login.json()["msg"]
    assert "ray-authentication-token" not in login.headers.get("Set-Cookie", "")


def test_a_wrong_token_is_refused_by_ray(proxy: str) -> None:
    answer = _client("team-b", "byo").get(f"{proxy}/api/version", timeout=30)
    assert answer.status_code == 403  # Ray's answer, passed through: the token was checked upstream


def test_an_unreadable_secret_is_503(proxy: str) -> None:
    answer = _client("team-c", "locked").get(f"{proxy}/api/version", timeout=30)
    assert answer.status_code == 503
    assert "may not read Secret team-c/locked" in answer.json()["msg"]
    assert "grant get on secrets in namespace team-c" in answer.json()["msg"]
