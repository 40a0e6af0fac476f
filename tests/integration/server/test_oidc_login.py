"""``--auth oidc`` in headless Chromium: a real OIDC provider on loopback (npm
``oauth2-mock-server``), the real gate with a static policy on a minimal Flask app. Log in,
land on an allowed namespace's page, get 403 on another, log out. Screenshots go to
``$ARTIFACTS_DIR`` (or ``.test-artifacts/``) ``/oidc``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.emulators.base import REPO_ROOT
from tests.support.chromium import chromium_page
from tests.support.oidc_provider import MockOidcProvider, ServedApp, mock_oidc_provider, serve_gated_app

pytestmark = pytest.mark.integration

ARTIFACTS = Path(os.environ.get("ARTIFACTS_DIR", REPO_ROOT / ".test-artifacts")) / "oidc"
LOGIN_COOKIE = "ray_history_login"


@pytest.fixture
def provider(tmp_path: Path) -> Iterator[MockOidcProvider]:
    with mock_oidc_provider(tmp_path) as running:
        running.set_claims({"email": "alice@example.com", "groups": ["team-a-devs"]})
        yield running


@pytest.fixture
def app(provider: MockOidcProvider, tmp_path: Path) -> Iterator[ServedApp]:
    with serve_gated_app(provider.url, tmp_path) as served:
        yield served


@pytest.fixture
def page() -> Iterator[Any]:
    with chromium_page(ARTIFACTS, 20_000) as opened:
        yield opened


def _login_cookie(page: Any) -> dict[str, Any] | None:
    found = [c for c in page.context.cookies() if c["name"] == LOGIN_COOKIE]
    return found[0] if found else None


def test_log_in_read_an_allowed_namespace_be_refused_another_log_out(
    page: Any, app: ServedApp, provider: MockOidcProvider
) -> None:
    # Not logged in: the gate sends the browser to /login, the provider logs it in and
    # the callback brings it back to the page it asked for.
    seen: list[str] = []
    page.on("request", lambda r: seen.append(r.url) if r.is_navigation_request() else None)
    answer = page.goto(f"{app.url}/ns/team-a")
    assert answer is not None and answer.status == 200
    assert page.url == f"{app.url}/ns/team-a"
    assert page.locator("h1").inner_text() == "namespace team-a"
    assert page.locator("#user").inner_text() == "alice@example.com"
    assert any(url.startswith(f"{app.url}/login?next=/ns/team-a") for url in seen)
    assert any(url.startswith(f"{provider.url}/authorize?") for url in seen)
    assert any(url.startswith(f"{app.url}/oauth2/callback?") for url in seen)
    cookie = _login_cookie(page)
    assert cookie is not None and cookie["httpOnly"] and cookie["sameSite"] == "Lax"
    assert page.evaluate("document.cookie").find(LOGIN_COOKIE) == -1  # not readable by scripts
    page.screenshot(path=str(ARTIFACTS / "01-allowed-namespace.png"))

    # Another team's namespace: 403 naming it, and none of its data.
    refused = page.goto(f"{app.url}/ns/team-b")
    assert refused is not None and refused.status == 403
    body = page.locator("body").inner_text()
    assert "may not read namespace team-b" in body and "namespace team-b</h1>" not in page.content()
    page.screenshot(path=str(ARTIFACTS / "02-other-namespace-403.png"))

    # Log out: the cookie goes, the provider's session ends, and the next page needs a
    # new login: the provider's login form (which the mock otherwise skips).
    provider.set_claims({"__login_form": True})
    page.goto(f"{app.url}/logout")
    assert page.url == f"{provider.url}/login-form"
    assert page.locator("h1").inner_text() == "provider login form"
    assert _login_cookie(page) is None
    assert any(url.startswith(f"{provider.url}/endsession?") for url in seen)
    page.screenshot(path=str(ARTIFACTS / "03-logged-out.png"))
    again = page.request.get(f"{app.url}/ns/team-a", headers={"Accept": "application/json"}, max_redirects=0)
    assert again.status == 401
