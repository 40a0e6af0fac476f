"""``--auth oidc`` end to end over real HTTP: a real OIDC provider on loopback (npm
``oauth2-mock-server``), the real gate on a minimal Flask app, and ``requests`` following
every redirect by hand: login, the sealed cookie, tampering, expiry, logout, state,
nonce, audience, issuer and signature checks, and a provider that is down (503).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

import pytest
import requests

from tests.support.oidc_provider import CLIENT_ID, MockOidcProvider, ServedApp, mock_oidc_provider, serve_gated_app

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
