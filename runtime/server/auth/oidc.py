"""``--auth oidc``: browser login with the organisation's identity provider.

Authorization-code flow with PKCE (S256), state and nonce:

* ``GET /login?next=/path`` (``auth.login``) seals state, nonce, PKCE verifier and the
  same-origin path to return to in a short-lived cookie and redirects to the provider.
* ``GET <path of --oidc-redirect-url>`` (``auth.callback``) checks the state against that
  cookie, exchanges the code, verifies the ID token (signature by the provider's JWKS,
  issuer, audience, expiry, nonce) and sets the login cookie: user (e-mail, else
  subject), groups (``--oidc-groups-claim``) and expiry (8 h at most, capped by the ID
  token's ``exp``) -- sealed, never a token.
* ``GET|POST /logout`` (``auth.logout``) clears it, then goes to the provider's
  ``end_session_endpoint`` when it advertises one (with ``post_logout_redirect_uri`` =
  the server's ``/``, which must be registered there), else to ``/``.

:class:`OidcAuthenticator` reads the login cookie on every request; a cookie that does
not open is no login (the gate then redirects a browser here, or answers 401).
"""

from __future__ import annotations

import hmac
import logging
import re
import time
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from authlib.common.security import generate_token
from flask import Blueprint, Response, make_response, redirect, request

from runtime.server.auth.login_cookie import CookieTooLargeError, LoginState, SealedCookies
from runtime.server.auth.model import AuthUnavailableError, Identity
from runtime.server.auth.oidc_provider import LoginError, OidcProvider
from runtime.server.auth.oidc_settings import OidcSettings

logger = logging.getLogger(__name__)

LOGIN_URL = "/login"
LOGOUT_URL = "/logout"
MAX_NEXT = 2048
#: A login shorter than this is refused (already expired, accepted only within the clock leeway).
MIN_SESSION = 1
#: Matched with ``fullmatch``: ``$`` would also match before a trailing newline ("/x\n").
_SAFE_PATH = re.compile(r"/(?![/\\])[^\x00-\x1f\x7f\\]*")


def safe_next(value: str | None) -> str:
    """``value`` if it is a path on this server, else ``/`` (no open redirect)."""
    if not value or len(value) > MAX_NEXT or not _SAFE_PATH.fullmatch(value):
        return "/"
    parts = urlsplit(value)
    if parts.scheme or parts.netloc:
        return "/"
    return value


def login_redirect(login_url: str) -> Response:
    """What the gate answers a browser without a login: the login page, remembering where it was."""
    # The path the browser asked for: under /sessions/... the session scope hands the
    # views a shortened PATH_INFO and keeps the removed part in SCRIPT_NAME.
    target = request.script_root + (request.full_path if request.query_string else request.path)
    return make_response(redirect(f"{login_url}?next={quote(safe_next(target), safe='/')}", code=302))


def identity_from_claims(claims: dict[str, Any], groups_claim: str) -> Identity:
    """User: the e-mail (unless the provider says it is unverified), else the subject.

    An absent ``email_verified`` counts as verified (Entra ID never sends it); any value
    but ``true`` (JSON or a string, as some providers send) counts as unverified."""
    email = claims.get("email")
    said = claims.get("email_verified", True)
    verified = said is True or (isinstance(said, str) and said.lower() == "true")
    user = email if isinstance(email, str) and email and verified else str(claims["sub"])
    raw: Any = claims.get(groups_claim)
    if raw is None and "." in groups_claim:  # a nested claim, e.g. realm_access.roles
        raw = claims
        for part in groups_claim.split("."):
            raw = raw.get(part) if isinstance(raw, dict) else None
    if isinstance(raw, str):
        groups: tuple[str, ...] = (raw,)
    elif isinstance(raw, list):
        groups = tuple(str(group) for group in raw if isinstance(group, str) and group)
    else:
        groups = ()
    return Identity(user=user, groups=groups, via="oidc")


class OidcAuthenticator:
    """The login cookie -> :class:`Identity`, or None (no valid login)."""

    name = "oidc"

    def __init__(self, settings: OidcSettings) -> None:
        self.settings = settings
        self.cookies = SealedCookies(settings.cookie_keys, settings.secure_cookies)
        self.provider = OidcProvider(settings)

    def identify(self) -> Identity | None:
        return self.cookies.open_session(request.cookies.get(self.cookies.session_name))


def _no_store(response: Response) -> Response:
    response.headers["Cache-Control"] = "no-store"
    return response


def oidc_blueprint(authenticator: OidcAuthenticator) -> Blueprint:
    settings, cookies, provider = authenticator.settings, authenticator.cookies, authenticator.provider
    blueprint = Blueprint("auth", __name__)

    @blueprint.get(LOGIN_URL)
    def login() -> Response:
        started = LoginState(
            state=generate_token(32),
            nonce=generate_token(32),
            code_verifier=generate_token(64),
            next_path=safe_next(request.args.get("next")),
        )
        url = provider.authorization_url(started.state, started.nonce, started.code_verifier)
        response = make_response(redirect(url, code=302))
        cookies.set(response, cookies.state_name, cookies.seal_state(started), max_age=600)
        return _no_store(response)

    @blueprint.get(settings.callback_path)
    def callback() -> Response:
        started = cookies.open_state(request.cookies.get(cookies.state_name))
        if started is None:
            raise LoginError("this login expired or was started elsewhere: start again at /login")
        state = request.args.get("state", "")
        if not hmac.compare_digest(state.encode(), started.state.encode()):
            raise LoginError("the login's state does not match: start again at /login")
        if "error" in request.args:
            error = re.sub(r"[^A-Za-z0-9_.-]", "", request.args.get("error", ""))[:64]
            raise LoginError(f"the identity provider refused the login ({error}): start again at /login")
        code = request.args.get("code", "")
        if not code:
            raise LoginError("the identity provider sent no authorization code")
        token = provider.exchange(code, started.code_verifier)
        access_token = token.get("access_token")
        claims = provider.verify_id_token(
            token["id_token"], started.nonce, access_token if isinstance(access_token, str) else None
        )
        who = identity_from_claims(claims, settings.groups_claim)
        now = time.time()
        expires = min(now + settings.session_lifetime, float(claims["exp"]))
        if expires < now + MIN_SESSION:  # accepted within the clock leeway, but a login of no use
            raise LoginError("the ID token expires already: check the clocks of this server and the provider")
        try:
            sealed = cookies.seal_session(who, expires)
        except CookieTooLargeError:
            logger.error("OIDC: login of %s refused: %d groups do not fit in a cookie", who.user, len(who.groups))
            raise LoginError(
                f"too many groups ({len(who.groups)}) in the {settings.groups_claim!r} claim to keep in a cookie: "
                "have the identity provider send only the relevant groups"
            ) from None
        logger.info("OIDC: %s logged in (%d groups, for %d s)", who.user, len(who.groups), int(expires - now))
        response = make_response(redirect(started.next_path, code=302))
        cookies.set(response, cookies.session_name, sealed, max_age=int(expires - now))
        cookies.clear(response, cookies.state_name)
        return _no_store(response)

    @blueprint.route(LOGOUT_URL, methods=["GET", "POST"])
    def logout() -> Response:
        target = "/"
        try:  # logging out never waits on a provider that is down: the cookie goes anyway
            end_session = provider.metadata().get("end_session_endpoint")
        except AuthUnavailableError:
            end_session = None
        if isinstance(end_session, str) and end_session.startswith(("https://", "http://")):
            back = settings.public_origin + "/"
            query = urlencode({"client_id": settings.client_id, "post_logout_redirect_uri": back})
            target = f"{end_session}{'&' if '?' in end_session else '?'}{query}"
        response = make_response(redirect(target, code=303 if request.method == "POST" else 302))
        cookies.clear(response, cookies.session_name)
        cookies.clear(response, cookies.state_name)
        return _no_store(response)

    return blueprint


def oidc_access(settings: OidcSettings) -> tuple[OidcAuthenticator, Blueprint]:
    """The authenticator for ``AccessControl.authenticators`` and the ``auth`` blueprint to register."""
    authenticator = OidcAuthenticator(settings)
    return authenticator, oidc_blueprint(authenticator)
