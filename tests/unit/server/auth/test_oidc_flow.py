"""``--auth oidc`` end to end over real HTTP: a real OIDC provider on loopback (npm
``oauth2-mock-server``), the real gate on a minimal Flask app, and ``requests`` following
every redirect by hand: login, the sealed cookie, tampering, expiry, logout, state,
nonce, audience, issuer and signature checks, and a provider that is down (503). With
``--authz kubernetes`` (the SubjectAccessReview stand-in): what the provider's names become.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

import pytest
import requests
from flask import Blueprint, Flask, Response, g, jsonify
from werkzeug.serving import make_server

from runtime.server.auth import build_access_control, install, parse_auth, parse_oidc
from runtime.server.auth.model import Identity
from tests.support.k8s_auth_stub import AuthApiStub, auth_api_stub
from tests.support.oidc_provider import (
    CLIENT_ID,
    CLIENT_SECRET,
    MockOidcProvider,
    ServedApp,
    mock_oidc_provider,
    serve_gated_app,
)

JSON = {"Accept": "application/json"}
HTML = {"Accept": "text/html,application/xhtml+xml"}
ALICE = {"email": "alice@example.com", "groups": ["team-a-devs"]}
COOKIE = "ray_history_login"


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MockOidcProvider]:
    with mock_oidc_provider(tmp_path_factory.mktemp("oidc")) as running:
        yield running


@pytest.fixture
def app(provider: MockOidcProvider, tmp_path: Path) -> Iterator[ServedApp]:
    provider.set_claims(ALICE)
    with serve_gated_app(provider.url, tmp_path) as served:
        yield served


def _fresh(method: str, url: str, **kwargs: object) -> requests.Response:
    """One request without a cookie jar (cookies as given in headers only)."""
    return requests.request(method, url, timeout=30, **kwargs)  # type: ignore[arg-type]


def _to_provider(session: requests.Session, app: ServedApp, next_path: str = "/data/team-a") -> requests.Response:
    """GET /login: the answer redirecting to the provider's authorization endpoint."""
    started = session.get(f"{app.url}/login", params={"next": next_path}, allow_redirects=False)
    assert started.status_code == 302, started.text
    return started


def _login(session: requests.Session, app: ServedApp, next_path: str = "/data/team-a") -> requests.Response:
    """The whole login, by hand; returns the callback's answer."""
    at_provider = session.get(_to_provider(session, app, next_path).headers["Location"], allow_redirects=False)
    assert at_provider.status_code == 302
    callback = at_provider.headers["Location"]
    assert callback.startswith(f"{app.url}/oauth2/callback?")
    return session.get(callback, allow_redirects=False)


def _set_cookie(response: requests.Response, name: str) -> str:
    lines = [line for line in response.raw.headers.getlist("Set-Cookie") if line.startswith(f"{name}=")]
    assert len(lines) == 1, response.raw.headers.getlist("Set-Cookie")
    return lines[0]


def test_login_sets_a_sealed_cookie_and_the_gate_knows_the_user(app: ServedApp) -> None:
    session = requests.Session()
    done = _login(session, app)
    assert (done.status_code, done.headers["Location"]) == (302, "/data/team-a")
    header = _set_cookie(done, COOKIE)
    attributes = {part.strip().split("=")[0].lower() for part in header.split(";")[1:]}
    assert {"httponly", "path", "max-age", "samesite"} <= attributes
    assert "samesite=lax" in header.lower() and "secure" not in attributes  # plain-HTTP loopback
    max_age = int(header.lower().split("max-age=")[1].split(";")[0])
    assert 3500 < max_age <= 3600  # capped by the ID token's exp (1 h), not 8 h
    value = session.cookies[COOKIE]
    assert "alice" not in value and "team-a" not in value and "eyJ" not in value  # sealed, no JWT inside
    answer = session.get(f"{app.url}/data/team-a", headers=JSON)
    assert answer.status_code == 200
    assert answer.json() == {
        "namespace": "team-a",
        "user": "alice@example.com",
        "groups": ["team-a-devs"],
        "via": "oidc",
    }
    assert session.get(f"{app.url}/data/team-b", headers=JSON).status_code == 403
    assert not session.cookies.get("ray_history_oidc_login")  # the login in progress is cleared


def test_authorization_request_uses_pkce_s256_state_and_nonce(app: ServedApp, provider: MockOidcProvider) -> None:
    location = _to_provider(requests.Session(), app).headers["Location"]
    assert location.startswith(f"{provider.url}/authorize?")
    query = {key: values[0] for key, values in parse_qs(urlsplit(location).query).items()}
    assert query["response_type"] == "code" and query["client_id"] == CLIENT_ID
    assert query["redirect_uri"] == f"{app.url}/oauth2/callback"
    assert query["code_challenge_method"] == "S256" and len(query["code_challenge"]) == 43
    assert len(query["state"]) >= 32 and len(query["nonce"]) >= 32
    assert "openid" in query["scope"].split()
    second = {
        k: v[0] for k, v in parse_qs(urlsplit(_to_provider(requests.Session(), app).headers["Location"]).query).items()
    }
    assert second["state"] != query["state"] and second["code_challenge"] != query["code_challenge"]


def test_tampered_cookie_is_no_login(app: ServedApp) -> None:
    session = requests.Session()
    _login(session, app)
    value = session.cookies[COOKIE]
    flipped = value[:40] + ("A" if value[40] != "A" else "B") + value[41:]
    headers = {"Cookie": f"{COOKIE}={flipped}"}
    api = _fresh("GET", f"{app.url}/data/team-a", headers={**headers, **JSON}, allow_redirects=False)
    assert api.status_code == 401 and "authentication required" in api.json()["msg"]
    browser = _fresh("GET", f"{app.url}/data/team-a", headers={**headers, **HTML}, allow_redirects=False)
    assert (browser.status_code, browser.headers["Location"]) == (302, "/login?next=/data/team-a")
    # The login-in-progress cookie is sealed too, but for another purpose: never a login.
    state = _to_provider(requests.Session(), app).cookies["ray_history_oidc_login"]
    replay = _fresh("GET", f"{app.url}/data/team-a", headers={"Cookie": f"{COOKIE}={state}", **JSON})
    assert replay.status_code == 401


def test_expired_cookie_is_logged_out(app: ServedApp, provider: MockOidcProvider) -> None:
    provider.set_claims({**ALICE, "__exp_in": 3})
    session = requests.Session()
    done = _login(session, app)
    assert done.status_code == 302
    value = session.cookies[COOKIE]
    assert _fresh("GET", f"{app.url}/data/team-a", headers={"Cookie": f"{COOKIE}={value}", **JSON}).status_code == 200
    time.sleep(3.2)
    # Sent again after its expiry (as a client ignoring Max-Age would): not a login any more.
    late = _fresh("GET", f"{app.url}/data/team-a", headers={"Cookie": f"{COOKIE}={value}", **JSON})
    assert late.status_code == 401


def test_logout_clears_the_cookie_and_ends_the_provider_session(app: ServedApp, provider: MockOidcProvider) -> None:
    session = requests.Session()
    _login(session, app)
    out = session.get(f"{app.url}/logout", allow_redirects=False)
    assert out.status_code == 302
    target = urlsplit(out.headers["Location"])
    assert f"{target.scheme}://{target.netloc}{target.path}" == f"{provider.url}/endsession"
    assert parse_qs(target.query) == {"client_id": [CLIENT_ID], "post_logout_redirect_uri": [f"{app.url}/"]}
    assert "max-age=0" in _set_cookie(out, COOKIE).lower()
    assert COOKIE not in session.cookies
    assert session.get(f"{app.url}/data/team-a", headers=JSON).status_code == 401
    # Logging out works without a (valid) login too, by GET or POST.
    for method in ("GET", "POST"):
        anonymous = _fresh(
            method, f"{app.url}/logout", headers={"Cookie": f"{COOKIE}=garbage", **JSON}, allow_redirects=False
        )
        assert anonymous.status_code in (302, 303)


def test_state_mismatch_and_missing_login_state_are_refused(app: ServedApp) -> None:
    session = requests.Session()
    at_provider = session.get(_to_provider(session, app).headers["Location"], allow_redirects=False)
    callback = urlsplit(at_provider.headers["Location"])
    query = {key: values[0] for key, values in parse_qs(callback.query).items()}
    forged = urlunsplit(callback._replace(query=urlencode({**query, "state": "x" * 43})))
    refused = session.get(forged, allow_redirects=False)
    assert refused.status_code == 400 and "state does not match" in refused.json()["msg"]
    assert COOKIE not in session.cookies
    # The genuine callback, but in a browser that never started this login (login CSRF).
    stranger = _fresh("GET", at_provider.headers["Location"], allow_redirects=False)
    assert stranger.status_code == 400 and "expired or was started elsewhere" in stranger.json()["msg"]
    # The provider answering with an error.
    denied = session.get(
        f"{app.url}/oauth2/callback", params={"state": query["state"], "error": "access_denied"}, allow_redirects=False
    )
    assert denied.status_code == 400 and "access_denied" in denied.json()["msg"]


@pytest.mark.parametrize(
    ("claims", "why"),
    [
        ({"aud": "another-client"}, "audience"),
        ({"iss": "http://127.0.0.1:1/evil"}, "issuer"),
        ({"nonce": "a-replayed-nonce"}, "nonce"),
        ({"__tamper_signature": True}, "signature"),
        ({"__exp_in": -600}, "expired"),
        ({"__exp_in": -30}, "expired within the clock leeway"),
    ],
)
def test_id_tokens_not_for_us_are_refused(
    app: ServedApp, provider: MockOidcProvider, claims: dict[str, object], why: str
) -> None:
    provider.set_claims({**ALICE, **claims})
    session = requests.Session()
    refused = _login(session, app)
    assert refused.status_code == 400, why
    assert "ID token" in refused.json()["msg"]
    assert COOKIE not in session.cookies


def test_open_redirects_are_not_followed(app: ServedApp) -> None:
    for evil in ("//evil.example.com/x", "https://evil.example.com/", "/\\evil.example.com", "javascript:alert(1)"):
        done = _login(requests.Session(), app, next_path=evil)
        assert (done.status_code, done.headers["Location"]) == (302, "/"), evil
    kept = _login(requests.Session(), app, next_path="/ns/team-a?tab=logs")
    assert kept.headers["Location"] == "/ns/team-a?tab=logs"


def test_browser_without_login_is_sent_to_login_and_back(app: ServedApp) -> None:
    session = requests.Session()
    first = session.get(f"{app.url}/ns/team-a?tab=logs", headers=HTML, allow_redirects=False)
    assert (first.status_code, first.headers["Location"]) == (302, "/login?next=/ns/team-a%3Ftab%3Dlogs")
    started = session.get(f"{app.url}{first.headers['Location']}", allow_redirects=False)
    at_provider = session.get(started.headers["Location"], allow_redirects=False)
    done = session.get(at_provider.headers["Location"], allow_redirects=False)
    assert done.headers["Location"] == "/ns/team-a?tab=logs"
    page = session.get(f"{app.url}{done.headers['Location']}", headers=HTML, allow_redirects=False)
    assert page.status_code == 200 and "namespace team-a" in page.text


def test_groups_from_the_claim_authorize(app: ServedApp, provider: MockOidcProvider) -> None:
    provider.set_claims({"email": "bob@example.com", "groups": ["team-b-devs", "other"]})
    session = requests.Session()
    _login(session, app, "/data/team-b")
    assert session.get(f"{app.url}/data/team-b", headers=JSON).json()["groups"] == ["team-b-devs", "other"]
    assert session.get(f"{app.url}/data/team-a", headers=JSON).status_code == 403


def test_too_many_groups_for_a_cookie_fail_the_login_clearly(app: ServedApp, provider: MockOidcProvider) -> None:
    provider.set_claims({**ALICE, "groups": [f"group-number-{i:04d}" for i in range(400)]})
    refused = _login(requests.Session(), app)
    assert refused.status_code == 400 and "too many groups (400)" in refused.json()["msg"]


def test_provider_down_at_login_is_503(tmp_path: Path) -> None:
    with serve_gated_app("http://127.0.0.1:9", tmp_path) as served:  # discard port: nothing listens
        answer = _fresh("GET", f"{served.url}/login", allow_redirects=False)
        assert answer.status_code == 503 and answer.headers["Retry-After"] == "5"
        assert "identity provider did not answer (discovery)" in answer.json()["msg"]
        # Logging out still works (and does not wait on the provider for long).
        assert _fresh("GET", f"{served.url}/logout", allow_redirects=False).headers["Location"] == "/"


def test_provider_down_at_callback_is_503(tmp_path: Path) -> None:
    with mock_oidc_provider(tmp_path) as own:
        own.set_claims(ALICE)
        with serve_gated_app(own.url, tmp_path) as served:
            session = requests.Session()
            at_provider = session.get(_to_provider(session, served).headers["Location"], allow_redirects=False)
            own.stop()
            answer = session.get(at_provider.headers["Location"], allow_redirects=False)
            assert answer.status_code == 503 and answer.headers["Retry-After"] == "5"
            assert COOKIE not in session.cookies


def test_login_with_a_trailing_newline_in_next_completes(app: ServedApp) -> None:
    """``/data/team-a%0A`` sends the browser to /login?next=...%0A; the login must still end in a redirect."""
    session = requests.Session()
    first = session.get(f"{app.url}/data/team-a%0A", headers=HTML, allow_redirects=False)
    assert first.status_code == 302 and first.headers["Location"].startswith("/login?next=")
    started = session.get(f"{app.url}{first.headers['Location']}", allow_redirects=False)
    at_provider = session.get(started.headers["Location"], allow_redirects=False)
    done = session.get(at_provider.headers["Location"], allow_redirects=False)
    assert (done.status_code, done.headers["Location"]) == (302, "/"), done.text[:200]
    assert COOKIE in session.cookies


# --- --authz kubernetes: the provider's names in the SubjectAccessReview ----------------


@pytest.fixture
def stub() -> Iterator[AuthApiStub]:
    with auth_api_stub() as api:
        # The binding every cluster has: cluster-admin for the group system:masters.
        api.access = {("system:masters", "kube-system"), ("system:masters", "team-secret")}
        yield api


@contextmanager
def kube_gated_app(provider: MockOidcProvider, stub: AuthApiStub, workdir: Path, **prefixes: str) -> Iterator[str]:
    """``--auth oidc --authz kubernetes`` (with ``prefixes`` for parse_auth) over real HTTP."""
    server = make_server("127.0.0.1", 0, Flask(__name__), threaded=True)
    url = f"http://127.0.0.1:{server.server_port}"
    secret = workdir / "secret"
    secret.write_text(CLIENT_SECRET)
    settings = parse_oidc(provider.url, CLIENT_ID, str(secret), "groups", f"{url}/oauth2/callback")
    config = parse_auth("oidc", "kubernetes", **prefixes)
    app = Flask(__name__)
    data = Blueprint("data", __name__)

    @data.get("/data/<namespace>")
    def read(namespace: str) -> Response:
        who: Identity = g.identity
        return jsonify({"secret": f"logs of {namespace}", "user": who.user, "groups": list(who.groups)})

    app.register_blueprint(data)
    install(app, build_access_control(config, stub.api_client, oidc=settings))
    server.app = app  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield url
    finally:
        server.shutdown()
        thread.join(timeout=10)


def _login_at(url: str, session: requests.Session) -> requests.Response:
    started = session.get(f"{url}/login", params={"next": "/"}, allow_redirects=False, timeout=30)
    at_provider = session.get(started.headers["Location"], allow_redirects=False, timeout=30)
    return session.get(at_provider.headers["Location"], allow_redirects=False, timeout=30)


@pytest.mark.hostile
@pytest.mark.parametrize(
    ("claims", "named"),
    [
        ({"email": "mallory@example.com", "groups": ["system:masters"]}, "group 'system:masters'"),
        ({"email": None, "sub": "system:serviceaccount:kube-system:default", "groups": []}, "user 'system:service"),
    ],
    ids=["group-system-masters", "sub-service-account"],
)
def test_identity_provider_cannot_name_a_kubernetes_system_subject(  # noqa: PLR0917 - pytest fixtures and parameters
    provider: MockOidcProvider,
    stub: AuthApiStub,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    claims: dict[str, object],
    named: str,
) -> None:
    """An IdP group system:masters (cluster-admin by RBAC) or a sub naming a service account: 403, never reviewed."""
    provider.set_claims(claims)
    stub.access |= {("system:serviceaccount:kube-system:default", "team-secret")}
    with kube_gated_app(provider, stub, tmp_path) as url:
        session = requests.Session()
        assert _login_at(url, session).status_code == 302
        answer = session.get(f"{url}/data/team-secret", headers=JSON, timeout=30)
    assert answer.status_code == 403, answer.text
    assert named in answer.json()["msg"] and "logs of" not in answer.text
    sent = [review["spec"] for review in stub.access_reviews]
    assert not any(str(spec.get("user")).startswith("system:") for spec in sent), sent
    assert not any("system:masters" in spec.get("groups", []) for spec in sent), sent
    assert "reserved by Kubernetes" in caplog.text and session.cookies[COOKIE] not in caplog.text


def test_identity_provider_prefixes_apply_before_the_subject_access_review(
    provider: MockOidcProvider, stub: AuthApiStub, tmp_path: Path
) -> None:
    provider.set_claims(ALICE)
    stub.access = {("oidc:team-a-devs", "team-a"), ("alice@example.com", "team-b")}
    with kube_gated_app(provider, stub, tmp_path, username_prefix="oidc:", groups_prefix="oidc:") as url:
        session = requests.Session()
        assert _login_at(url, session).status_code == 302
        allowed = session.get(f"{url}/data/team-a", headers=JSON, timeout=30)
        unprefixed_binding = session.get(f"{url}/data/team-b", headers=JSON, timeout=30)
    assert allowed.status_code == 200, allowed.text
    assert (allowed.json()["user"], allowed.json()["groups"]) == ("oidc:alice@example.com", ["oidc:team-a-devs"])
    assert unprefixed_binding.status_code == 403  # the bare provider name is no Kubernetes user
    assert {(spec["user"], tuple(spec["groups"])) for spec in (r["spec"] for r in stub.access_reviews)} == {
        ("oidc:alice@example.com", ("oidc:team-a-devs",))
    }
