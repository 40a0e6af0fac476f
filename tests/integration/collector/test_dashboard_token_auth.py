"""The collector beside a Ray 2.60 head started with token auth (``RAY_AUTH_MODE=token``),
as KubeRay ``authOptions.mode: token`` runs one: the token comes as ``RAY_AUTH_TOKEN``
or as a file named by ``RAY_AUTH_TOKEN_PATH``.

One real head per module (``tests/integration/ray_harness.py``, loopback, free ports).
The dashboard client is checked directly, and the whole collector process stores its
endpoint snapshots with either form of the token. The collector processes are killed,
not stopped with SIGTERM: a SIGTERM sent right after start was once missed for a minute
(probably: the main thread blocks in ``Event.wait()`` without a timeout, and a signal another
thread takes does not wake it) -- the collector's shutdown, not what is tested here.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from runtime.collector.dashboard import AUTH_HEADER, DashboardAuthError, DashboardClient
from runtime.collector.snapshot_endpoints import CLUSTER_METADATA_URI, JOBS_URI, TIMEZONE_URI
from runtime.storage.layout import ClusterRef, KeyLayout
from tests.integration.emulators.base import free_port
from tests.integration.ray_harness import CollectorProcess, RayHead, collector_env, ray_available

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(not ray_available(), reason="ray 2.60 is not installed in this environment"),
    pytest.mark.timeout(300),
]

CLUSTER = ClusterRef(namespace="ns", name="token-auth")
SNAPSHOTS = (CLUSTER_METADATA_URI, TIMEZONE_URI, JOBS_URI)


@pytest.fixture(scope="module")
def token() -> str:
    return secrets.token_urlsafe(32)


@pytest.fixture(scope="module")
def ray_head(token: str) -> Iterator[RayHead]:
    head = RayHead(export_url=f"http://127.0.0.1:{free_port()}/v1/events", auth_token=token)
    try:
        try:
            head.start(timeout=180)
        except (RuntimeError, TimeoutError) as exc:
            pytest.fail(f"{exc}\n{head.log_path.read_text(errors='replace')[-3000:]}")
        yield head
    finally:
        head.cleanup()
        head.log_path.unlink(missing_ok=True)


def test_the_head_really_requires_the_token(ray_head: RayHead, token: str) -> None:
    url = f"{ray_head.dashboard_url}/api/version"
    assert requests.get(url, timeout=10).status_code == 401
    assert requests.get(url, headers={AUTH_HEADER: "Bearer wrong"}, timeout=10).status_code == 403
    assert requests.get(url, headers={AUTH_HEADER: f"Bearer {token}"}, timeout=10).status_code == 200


def test_client_with_the_token_from_the_environment(ray_head: RayHead, token: str) -> None:
    client = DashboardClient(ray_head.dashboard_url, auth_token=token, auth_mode="token", environ={})
    answer = client.get(CLUSTER_METADATA_URI)
    assert answer.ok and json.loads(answer.body)["data"]["rayVersion"] == "2.60.0"


def test_client_with_the_token_file_rereads_it(ray_head: RayHead, token: str, tmp_path: Path) -> None:
    path = tmp_path / "ray-token" / "auth_token"
    path.parent.mkdir()
    path.write_text(token + "\n")  # a Secret's file may end with a newline
    environ = {"RAY_AUTH_TOKEN_PATH": str(path)}
    client = DashboardClient(ray_head.dashboard_url, auth_mode="token", environ=environ)
    assert client.get(TIMEZONE_URI).ok

    path.write_text("rotated-but-wrong")  # the next request reads the file again
    with pytest.raises(DashboardAuthError, match="HTTP 403"):
        client.get(TIMEZONE_URI)
    path.write_text(token)
    assert client.get(TIMEZONE_URI).ok

    path.unlink()
    with pytest.raises(DashboardAuthError, match=r"RAY_AUTH_TOKEN_PATH=.*cannot be read") as refused:
        client.get(TIMEZONE_URI)
    assert token not in str(refused.value)


def test_precedence_is_rays_env_then_path_then_home_file(ray_head: RayHead, token: str, tmp_path: Path) -> None:
    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-token")
    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    (home / ".ray" / "auth_token").write_text(token)
    url = ray_head.dashboard_url
    # RAY_AUTH_TOKEN wins over RAY_AUTH_TOKEN_PATH ...
    env_first = DashboardClient(url, auth_token=token, auth_mode="token", environ={"RAY_AUTH_TOKEN_PATH": str(wrong)})
    assert env_first.get(TIMEZONE_URI).ok
    # ... which wins over ~/.ray/auth_token ...
    path_first = DashboardClient(url, auth_mode="token", environ={"RAY_AUTH_TOKEN_PATH": str(wrong), "HOME": str(home)})
    with pytest.raises(DashboardAuthError, match="HTTP 403"):
        path_first.get(TIMEZONE_URI)
    # ... which is read only in token mode, as Ray reads it.
    assert DashboardClient(url, auth_mode="token", environ={"HOME": str(home)}).get(TIMEZONE_URI).ok
    with pytest.raises(DashboardAuthError, match="HTTP 401"):
        DashboardClient(url, environ={"HOME": str(home)}).get(TIMEZONE_URI)


def test_without_the_token_a_clear_auth_error(ray_head: RayHead, tmp_path: Path) -> None:
    with pytest.raises(DashboardAuthError, match=r"HTTP 401 \(check the dashboard token\)"):
        DashboardClient(ray_head.dashboard_url, environ={}).get(CLUSTER_METADATA_URI)
    with pytest.raises(DashboardAuthError, match="RAY_AUTH_MODE=token but no token"):
        DashboardClient(ray_head.dashboard_url, auth_mode="token", environ={"HOME": str(tmp_path)})


def _stored(bucket: Path, session: str, uri: str) -> bytes | None:
    path = bucket / KeyLayout("hist").endpoint_key(CLUSTER, session, uri)
    return path.read_bytes() if path.is_file() else None


def _run_collector(ray_head: RayHead, tmp_path: Path, auth_env: dict[str, str]) -> tuple[Path, CollectorProcess]:
    bucket = tmp_path / "bucket"
    env = collector_env(bucket, ray_head, CLUSTER, RAY_AUTH_MODE="token", **auth_env)
    collector = CollectorProcess(env, free_port(), tmp_path / "collector.log")
    for name in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):  # only what the test gives
        if name not in auth_env:
            collector.env.pop(name, None)
    collector.start()
    return bucket, collector


@pytest.mark.parametrize("form", ["RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"])
def test_the_collector_stores_snapshots_with_either_form(
    ray_head: RayHead, token: str, tmp_path: Path, form: str
) -> None:
    if form == "RAY_AUTH_TOKEN":
        auth_env = {"RAY_AUTH_TOKEN": token}
    else:
        path = tmp_path / "token"
        path.write_text(token)
        path.chmod(0o600)
        auth_env = {"RAY_AUTH_TOKEN_PATH": str(path)}
    bucket, collector = _run_collector(ray_head, tmp_path, auth_env)
    session = ray_head.session_dir().name
    try:
        deadline = time.monotonic() + 60
        while any(_stored(bucket, session, uri) is None for uri in SNAPSHOTS) and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        # Killed, not stopped: what is asserted is stored already (see the module docstring).
        collector.kill()
    log = collector.log()
    assert all(_stored(bucket, session, uri) is not None for uri in SNAPSHOTS), log[-3000:]
    assert json.loads(_stored(bucket, session, CLUSTER_METADATA_URI) or b"")["data"]["rayVersion"] == "2.60.0"
    assert "HTTP 401" not in log and "HTTP 403" not in log
    assert token not in log


def test_the_collector_without_a_readable_token_file_names_the_variable(ray_head: RayHead, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-token"
    bucket, collector = _run_collector(ray_head, tmp_path, {"RAY_AUTH_TOKEN_PATH": str(missing)})
    session = ray_head.session_dir().name
    try:
        deadline = time.monotonic() + 60
        while f"RAY_AUTH_TOKEN_PATH={missing}" not in collector.log() and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        collector.kill()
    assert f"RAY_AUTH_MODE=token but RAY_AUTH_TOKEN_PATH={missing}: cannot be read" in collector.log()
    assert _stored(bucket, session, CLUSTER_METADATA_URI) is None
