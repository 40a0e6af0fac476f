"""Access control end to end, against the real ``historyserver`` (gunicorn) process.

Two stored sessions, one in namespace ``team-a`` and one in ``team-b``; a static policy
(``team-a`` readable by group ``team-a-devs``, ``team-b`` by ``team-b-devs``).

* Browser: ``--auth oidc --authz static`` with a real OIDC provider on loopback (npm
  ``oauth2-mock-server``) and headless Chromium: the root sends the browser to the
  provider's login and back, the cluster picker lists only team-a's session, its Ray
  Dashboard loads, team-b's session answers 403 naming the namespace, and after
  ``/logout`` the next page needs a new login. Screenshot:
  ``$ARTIFACTS_DIR`` (or ``.test-artifacts/``) ``/dashboard/access-e2e.png``.
* API clients: ``--auth oidc,kubernetes --authz static`` with the real kubernetes client
  talking to the TokenReview stand-in (``tests/support/k8s_auth_stub.py``) through a
  kubeconfig: a bearer token of a team-b user reads only team-b, no credentials is a
  401 (JSON), and the stand-in down with a token not yet cached is a 503 with Retry-After.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests
import yaml

from runtime.server.selection import COOKIE_CLUSTER, COOKIE_NAMESPACE, COOKIE_SESSION
from runtime.storage.config import StorageConfig, open_store
from runtime.storage.layout import ClusterRef, KeyLayout
from tests.integration.emulators.base import REPO_ROOT
from tests.integration.server.harness import HistoryServerProcess
from tests.support.chromium import chromium_page
from tests.support.k8s_auth_stub import AuthApiStub, auth_api_stub
from tests.support.oidc_provider import CLIENT_ID, CLIENT_SECRET, MockOidcProvider, mock_oidc_provider
from tests.support.sample_session import RUN_B, StoredSample, write_sample_session

pytestmark = pytest.mark.integration

ARTIFACTS = Path(os.environ.get("ARTIFACTS_DIR", REPO_ROOT / ".test-artifacts")) / "dashboard"
LOGIN_COOKIE = "ray_history_login"
TEAM_A = ClusterRef("team-a", "raycluster-a")
TEAM_B = ClusterRef("team-b", "raycluster-b")
POLICY = {
    "namespaces": {
        "team-a": {"groups": ["team-a-devs"]},
        "team-b": {"groups": ["team-b-devs"]},
    }
}
ALICE = {"email": "alice@example.com", "groups": ["team-a-devs"]}
#: Kubernetes bearer tokens the stand-in's TokenReview accepts.
BOB_TOKEN = "bob-token-of-team-b"
CAROL_TOKEN = "carol-token-never-reviewed"
TIMEOUT = 60


@dataclass(frozen=True)
class Stored:
    root: Path
    team_a: StoredSample
    team_b: StoredSample


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Stored:
    """Session A (with logs and endpoint snapshots) in team-a, session B in team-b."""
    root = tmp_path_factory.mktemp("access-e2e")
    store = open_store(StorageConfig(backend="local", local_dir=str(root / "store"), create_bucket=True))
    layout = KeyLayout("")
    team_a = write_sample_session(store, layout, TEAM_A)
    team_b = write_sample_session(store, layout, TEAM_B, run=RUN_B)
    assert team_a.session != team_b.session
    (root / "policy.yaml").write_text(yaml.safe_dump(POLICY))
    (root / "client-secret").write_text(CLIENT_SECRET + "\n")
    return Stored(root=root, team_a=team_a, team_b=team_b)


@pytest.fixture(scope="module")
def provider(stored: Stored) -> Iterator[MockOidcProvider]:
    workdir = stored.root / "provider"
    workdir.mkdir()
    with mock_oidc_provider(workdir) as running:
        running.set_claims(ALICE)
        yield running


def _server(stored: Stored, provider: MockOidcProvider, name: str, *extra: str) -> HistoryServerProcess:
    """``historyserver`` with ``--authz static`` and the OIDC flags; its redirect URL is its own port."""
    server = HistoryServerProcess(
        stored.root / "store",
        stored.root / f"cache-{name}",
        "--authz=static",
        f"--authz-policy={stored.root / 'policy.yaml'}",
        f"--oidc-issuer={provider.url}",
        f"--oidc-client-id={CLIENT_ID}",
        f"--oidc-client-secret-file={stored.root / 'client-secret'}",
        *extra,
    )
    server.args.append(f"--oidc-redirect-url={server.url}/oauth2/callback")
    return server


# ------------------------------------------------------------------ the browser


@pytest.fixture(scope="module")
def browser_server(stored: Stored, provider: MockOidcProvider) -> Iterator[HistoryServerProcess]:
    with _server(stored, provider, "browser", "--auth=oidc", "--kubernetes=off") as server:
        yield server


@pytest.fixture
def page() -> Iterator[Any]:
    with chromium_page(ARTIFACTS, TIMEOUT * 1000, {"width": 1400, "height": 1000}) as opened:
        opened.set_default_navigation_timeout(TIMEOUT * 1000)
        yield opened


def _cookies(page: Any) -> dict[str, str]:
    return {c["name"]: c["value"] for c in page.context.cookies()}


def _path(url: str) -> str:
    return urlsplit(url).path


def _refused(response: Any) -> bool:
    """A 401, 403 or 5xx answer to the Dashboard's API calls, except the metrics probes (500
    ``result: false`` on purpose, as Ray without Grafana or Prometheus). A 404 is no refusal:
    routes the history server does not serve (``/api/v0/platform_events`` ...)."""
    url = urlsplit(response.url).path
    return (
        (response.status in (401, 403) or response.status >= 500)
        and url.startswith(("/api/", "/nodes", "/logical/", "/events", "/task/"))
        and not url.endswith(("/api/grafana_health", "/api/prometheus_health"))
    )


def test_browser_logs_in_reads_team_a_dashboard_is_refused_team_b_logs_out(
    page: Any, browser_server: HistoryServerProcess, provider: MockOidcProvider, stored: Stored
) -> None:
    server = browser_server
    provider.set_claims(ALICE)
    navigations: list[str] = []
    page.on("request", lambda r: navigations.append(r.url) if r.is_navigation_request() else None)
    refusals: list[str] = []  # the Dashboard's own API calls refused (401/403) or failing (5xx)
    page.on("response", lambda r: refusals.append(f"{r.status} {r.url}") if _refused(r) else None)

    # Not logged in: / -> /login -> the provider -> /oauth2/callback -> / -> the picker,
    # whose /clusters fetch lists only what alice may read.
    with page.expect_response(lambda r: _path(r.url) == "/clusters", timeout=TIMEOUT * 1000) as listed:
        page.goto(f"{server.url}/")
    assert listed.value.status == 200
    clusters = listed.value.json()
    assert [(c["namespace"], c["name"], c["sessionName"]) for c in clusters] == [
        ("team-a", TEAM_A.name, stored.team_a.session)
    ]
    assert _path(page.url) == "/select_cluster"
    assert any(url.startswith(f"{server.url}/login?next=/") for url in navigations)
    assert any(url.startswith(f"{provider.url}/authorize?") for url in navigations)
    assert any(url.startswith(f"{server.url}/oauth2/callback?") for url in navigations)
    assert LOGIN_COOKIE in _cookies(page)
    row = page.locator("#rows tr", has_text=stored.team_a.session)
    row.wait_for()
    assert page.locator("#rows tr").count() == 1
    assert "team-b" not in page.locator("body").inner_text()
    assert stored.team_b.session not in page.content()

    # Open it: the real Ray Dashboard of team-a's session.
    row.locator("button.open").click()
    page.wait_for_url("**/#/overview")
    assert _cookies(page)[COOKIE_SESSION] == stored.team_a.session
    page.goto(f"{server.url}/#/jobs")
    page.get_by_text("wl-job2-fails").first.wait_for()
    page.get_by_text("raysubmit_zXeGXHwfPUEBW8Ci").first.wait_for()
    page.screenshot(path=str(ARTIFACTS / "access-e2e.png"), full_page=True)
    assert refusals == []

    # Another team's session: 403 with a JSON message naming team-b; the selection
    # cookies still name team-a's session.
    team_b_url = f"{server.url}/enter_cluster/team-b/raycluster/{TEAM_B.name}/{stored.team_b.session}"
    refused = page.goto(team_b_url)
    assert refused is not None and refused.status == 403
    body = refused.json()
    assert body["result"] is False and "may not read namespace team-b" in body["msg"]
    assert "alice@example.com" in body["msg"]
    assert _cookies(page)[COOKIE_SESSION] == stored.team_a.session

    # Log out: the login cookie goes, the provider's session ends, and the way back to the
    # server needs a new login (the provider's form, which the mock otherwise skips).
    provider.set_claims({"__login_form": True})
    navigations.clear()
    page.goto(f"{server.url}/logout")
    assert page.url == f"{provider.url}/login-form"
    assert LOGIN_COOKIE not in _cookies(page)
    assert any(url.startswith(f"{provider.url}/endsession?") for url in navigations)

    navigations.clear()
    page.goto(f"{server.url}/#/jobs")
    assert page.url.split("#")[0] == f"{provider.url}/login-form"  # redirects keep the fragment
    assert page.locator("h1").inner_text() == "provider login form"
    assert any(url.startswith(f"{server.url}/login?next=/") for url in navigations)
    again = page.request.get(f"{server.url}/clusters", headers={"Accept": "application/json"}, max_redirects=0)
    assert again.status == 401


# ------------------------------------------------------------------ API clients


@pytest.fixture(scope="module")
def stub() -> Iterator[AuthApiStub]:
    with auth_api_stub() as running:
        running.tokens[BOB_TOKEN] = ("bob", ("team-b-devs",))
        running.tokens[CAROL_TOKEN] = ("carol", ("team-b-devs",))
        yield running


@pytest.fixture(scope="module")
def api_server(stored: Stored, provider: MockOidcProvider, stub: AuthApiStub) -> Iterator[HistoryServerProcess]:
    kubeconfig = stored.root / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(stub.kubeconfig()))
    args = ("--auth=oidc,kubernetes", "--kubernetes=kubeconfig", f"--kubeconfig={kubeconfig}")
    with _server(stored, provider, "api", *args) as server:
        yield server


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "Accept": "application/json"}


def test_bearer_token_of_a_team_b_user_reads_only_team_b(api_server: HistoryServerProcess, stored: Stored) -> None:
    url = api_server.url
    listed = requests.get(f"{url}/clusters", headers=_bearer(BOB_TOKEN), timeout=TIMEOUT)
    assert listed.status_code == 200, listed.text
    assert [(c["namespace"], c["name"], c["sessionName"]) for c in listed.json()] == [
        ("team-b", TEAM_B.name, stored.team_b.session)
    ]
    assert "team-a" not in listed.text and stored.team_a.session not in listed.text

    team_a = f"{url}/enter_cluster/team-a/raycluster/{TEAM_A.name}/{stored.team_a.session}"
    refused = requests.get(team_a, headers=_bearer(BOB_TOKEN), timeout=TIMEOUT)
    assert refused.status_code == 403
    assert refused.headers["Content-Type"].startswith("application/json")
    assert "bob may not read namespace team-a" in refused.json()["msg"]
    assert "Set-Cookie" not in refused.headers

    # Its own namespace opens; selection cookies naming team-a are no capability.
    client = requests.Session()
    client.headers.update(_bearer(BOB_TOKEN))
    team_b = f"{url}/enter_cluster/team-b/raycluster/{TEAM_B.name}/{stored.team_b.session}"
    entered = client.get(team_b, timeout=TIMEOUT)
    assert entered.status_code == 200, entered.text
    assert entered.json()["namespace"] == "team-b"
    assert client.get(f"{url}/api/jobs/", timeout=TIMEOUT).status_code == 200
    forged = {COOKIE_NAMESPACE: "team-a", COOKIE_CLUSTER: TEAM_A.name, COOKIE_SESSION: stored.team_a.session}
    stolen = requests.get(f"{url}/api/jobs/", headers=_bearer(BOB_TOKEN), cookies=forged, timeout=TIMEOUT)
    assert stolen.status_code == 403
    assert "namespace team-a" in stolen.json()["msg"]


def test_no_credentials_is_401_json_and_a_browser_goes_to_the_login(api_server: HistoryServerProcess) -> None:
    url = api_server.url
    anonymous = requests.get(f"{url}/clusters", headers={"Accept": "application/json"}, timeout=TIMEOUT)
    assert anonymous.status_code == 401
    assert anonymous.headers["Content-Type"].startswith("application/json")
    assert anonymous.headers["WWW-Authenticate"].startswith("Bearer")
    assert anonymous.json()["result"] is False and anonymous.json()["msg"]
    browser = requests.get(f"{url}/clusters", headers={"Accept": "text/html"}, allow_redirects=False, timeout=TIMEOUT)
    assert browser.status_code == 302
    assert browser.headers["Location"].startswith("/login?next=/clusters")
    bad = requests.get(f"{url}/clusters", headers=_bearer("not-a-token-anyone-knows"), timeout=TIMEOUT)
    assert bad.status_code == 401


def test_kubernetes_api_down_is_503_for_a_token_not_yet_reviewed(
    api_server: HistoryServerProcess, stub: AuthApiStub, stored: Stored
) -> None:
    url = api_server.url
    warm = requests.get(f"{url}/clusters", headers=_bearer(BOB_TOKEN), timeout=TIMEOUT)
    assert warm.status_code == 200
    reviews = len(stub.token_reviews)
    stub.down = True
    try:
        down = requests.get(f"{url}/clusters", headers=_bearer(CAROL_TOKEN), timeout=TIMEOUT)
        assert down.status_code == 503, down.text
        assert int(down.headers["Retry-After"]) > 0
        assert down.headers["Content-Type"].startswith("application/json")
        assert "Kubernetes API" in down.json()["msg"]
        assert stored.team_b.session not in down.text
        # A token reviewed before is cached (by its hash): its caller still reads team-b.
        cached = requests.get(f"{url}/clusters", headers=_bearer(BOB_TOKEN), timeout=TIMEOUT)
        assert cached.status_code == 200
        assert [c["namespace"] for c in cached.json()] == ["team-b"]
    finally:
        stub.down = False
    assert len(stub.token_reviews) == reviews  # nothing answered while down
    back = requests.get(f"{url}/clusters", headers=_bearer(CAROL_TOKEN), timeout=TIMEOUT)
    assert back.status_code == 200
    assert [c["namespace"] for c in back.json()] == ["team-b"]
