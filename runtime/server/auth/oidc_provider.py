"""Talking to the identity provider: discovery, JWKS, the code exchange, ID-token checks.

Authlib does the protocol: the authorization URL with PKCE (S256) and the token request
(:class:`authlib.integrations.requests_client.OAuth2Session`), and the OpenID claims
rules (:class:`authlib.oidc.core.CodeIDToken`: nonce, ``azp``, ``at_hash``); joserfc
(Authlib's JOSE layer) checks the signature against the provider's JWKS. We add what a
server-side client must decide itself: which issuer and audience are acceptable (exactly
ours), which algorithms (the provider's asymmetric ones, never ``none`` or HMAC), and
failing closed: a provider that does not answer is :class:`AuthUnavailableError` (503),
a token that does not verify is a failed login.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import requests
from authlib.integrations.requests_client import OAuth2Session
from authlib.oidc.core import CodeIDToken
from joserfc import jwt
from joserfc.errors import InvalidKeyIdError, JoseError
from joserfc.jwk import KeySet
from joserfc.jws import JWSRegistry

from runtime.server.auth.model import AuthError, AuthUnavailableError
from runtime.server.auth.oidc_settings import OidcSettings

logger = logging.getLogger(__name__)

HTTP_TIMEOUT = 5.0
#: Discovery and JWKS are re-read this often (an unknown key id re-reads the JWKS at once).
METADATA_TTL = 3600.0
JWKS_MIN_REFRESH = 30.0
#: Clock skew tolerated on ``exp`` / ``iat`` / ``nbf``.
LEEWAY = 60
ASYMMETRIC_ALGORITHMS = (
    "RS256",
    "RS384",
    "RS512",
    "PS256",
    "PS384",
    "PS512",
    "ES256",
    "ES384",
    "ES512",
    "EdDSA",
)


class LoginError(AuthError):
    """The login callback cannot complete (bad state, refused or unverifiable token): 400."""

    status = 400


def _unavailable(what: str, error: Exception | str) -> AuthUnavailableError:
    reason = type(error).__name__ if isinstance(error, Exception) else error
    logger.warning("OIDC: %s failed: %s", what, reason)
    return AuthUnavailableError(f"the identity provider did not answer ({what}): try again shortly")


class OidcProvider:
    """One issuer, its metadata and keys cached per process."""

    def __init__(self, settings: OidcSettings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._metadata: dict[str, Any] | None = None
        self._metadata_at = 0.0
        self._jwks: KeySet | None = None
        self._jwks_at = 0.0

    def _get_json(self, what: str, url: str) -> dict[str, Any]:
        try:
            response = requests.get(url, timeout=HTTP_TIMEOUT, headers={"Accept": "application/json"})
        except requests.RequestException as error:
            raise _unavailable(what, error) from None
        if response.status_code != 200:
            raise _unavailable(what, f"HTTP {response.status_code}")
        try:
            document = response.json()
        except ValueError:
            document = None
        if not isinstance(document, dict):
            raise _unavailable(what, "not a JSON object")
        return document

    def metadata(self) -> dict[str, Any]:
        """The discovery document (cached); AuthUnavailableError when it cannot be read or is wrong."""
        with self._lock:
            if self._metadata is not None and time.monotonic() - self._metadata_at < METADATA_TTL:
                return self._metadata
        document = self._get_json("discovery", self.settings.discovery_url)
        issuer = document.get("issuer")
        if not isinstance(issuer, str) or issuer.rstrip("/") != self.settings.issuer.rstrip("/"):
            raise _unavailable("discovery", "the document names another issuer")
        for key in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
            if not isinstance(document.get(key), str):
                raise _unavailable("discovery", f"no {key}")
        with self._lock:
            self._metadata, self._metadata_at = document, time.monotonic()
        return document

    def _key_set(self, force: bool) -> KeySet:
        with self._lock:
            fresh = time.monotonic() - self._jwks_at < (JWKS_MIN_REFRESH if force else METADATA_TTL)
            if self._jwks is not None and fresh:
                return self._jwks
        document = self._get_json("JWKS", str(self.metadata()["jwks_uri"]))
        try:
            keys = KeySet.import_key_set(document)  # type: ignore[arg-type]
        except (JoseError, ValueError, TypeError, KeyError):
            raise _unavailable("JWKS", "not a key set") from None
        with self._lock:
            self._jwks, self._jwks_at = keys, time.monotonic()
        return keys

    def _session(self, code_verifier: str | None = None) -> OAuth2Session:
        supported = self.metadata().get("token_endpoint_auth_methods_supported") or ["client_secret_basic"]
        method = "client_secret_basic"
        if "client_secret_basic" not in supported and "client_secret_post" in supported:
            method = "client_secret_post"
        return OAuth2Session(
            client_id=self.settings.client_id,
            client_secret=self.settings.client_secret,
            scope=self.settings.scopes,
            redirect_uri=self.settings.redirect_url,
            token_endpoint_auth_method=method,
            code_challenge_method="S256",
        )

    def authorization_url(self, state: str, nonce: str, code_verifier: str) -> str:
        endpoint = str(self.metadata()["authorization_endpoint"])
        with self._session() as session:
            url, _ = session.create_authorization_url(endpoint, state=state, nonce=nonce, code_verifier=code_verifier)
        return str(url)

    def exchange(self, code: str, code_verifier: str) -> dict[str, Any]:
        """The token response for ``code``: LoginError if refused, AuthUnavailableError if unreachable."""
        endpoint = str(self.metadata()["token_endpoint"])
        with self._session() as session:
            try:
                token = session.fetch_token(
                    endpoint,
                    grant_type="authorization_code",
                    code=code,
                    code_verifier=code_verifier,
                    timeout=HTTP_TIMEOUT,
                )
            except requests.RequestException as error:
                raise _unavailable("token endpoint", error) from None
            except Exception as error:  # Authlib's OAuthError and friends: the provider refused the code
                logger.info("OIDC: the token endpoint refused the code: %s", type(error).__name__)
                raise LoginError("the identity provider refused the login: start again at /login") from None
        if not isinstance(token, dict) or not isinstance(token.get("id_token"), str):
            raise LoginError("the identity provider returned no ID token (is the 'openid' scope allowed?)")
        return dict(token)

    def verify_id_token(self, id_token: str, nonce: str, access_token: str | None) -> dict[str, Any]:
        """The claims of a valid ID token for us; LoginError otherwise."""
        advertised = self.metadata().get("id_token_signing_alg_values_supported") or ["RS256"]
        algorithms = [alg for alg in advertised if alg in ASYMMETRIC_ALGORITHMS] or ["RS256"]
        registry = JWSRegistry(algorithms=algorithms, strict_check_header=False)
        try:
            try:
                decoded = jwt.decode(id_token, self._key_set(force=False), algorithms=algorithms, registry=registry)
            except InvalidKeyIdError:  # keys rotated since we read them
                decoded = jwt.decode(id_token, self._key_set(force=True), algorithms=algorithms, registry=registry)
        except (JoseError, ValueError) as error:
            logger.info("OIDC: ID token signature not accepted: %s", type(error).__name__)
            raise LoginError("the ID token's signature does not verify") from None
        options: dict[str, Any] = {
            "iss": {"essential": True, "value": self.metadata()["issuer"]},
            "aud": {"essential": True, "value": self.settings.client_id},
            "exp": {"essential": True},
            "sub": {"essential": True},
        }
        params: dict[str, Any] = {"nonce": nonce, "client_id": self.settings.client_id}
        if access_token:
            params["access_token"] = access_token
        claims = CodeIDToken(decoded.claims, decoded.header, options, params)
        try:
            claims.validate(now=int(time.time()), leeway=LEEWAY)
        except (JoseError, ValueError, TypeError) as error:
            logger.info("OIDC: ID token claims not accepted: %s", error)
            raise LoginError(f"the ID token is not valid for this server ({type(error).__name__})") from None
        return dict(claims)
