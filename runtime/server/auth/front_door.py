"""``--auth trusted-header``: the identity a front door asserts, verified as a signed JWT.

Two front doors are supported, one per server (``--trusted-header iap|alb``):

* **Google Cloud IAP** (GKE Ingress / Gateway, Cloud Load Balancing): header
  ``x-goog-iap-jwt-assertion``, ES256, keys from Google's JWKS
  (``--iap-jwks-url``), issuer ``https://cloud.google.com/iap``, audience
  ``--iap-audience`` (``/projects/NUMBER/global/backendServices/ID`` or
  ``/projects/NUMBER/apps/PROJECT_ID``). ``exp`` and ``iat`` are checked with 30 s
  leeway and a lifetime of at most 10 minutes plus leeway, as Google documents. The user
  is the ``email`` claim (an ``accounts.google.com:`` prefix removed); IAP asserts no
  groups.
* **AWS ALB OIDC**: header ``x-amzn-oidc-data``, ES256, the JWT header's ``signer`` must
  be the configured load balancer (``--alb-arn``); the PEM public key for the header's
  ``kid`` comes from ``https://public-keys.auth.elb.REGION.amazonaws.com/KID``
  (``--alb-key-url``). ALB encodes the segments with base64url *padding* and signs the
  padded text, so the signature is checked here over the segments exactly as received
  (no JWT library's segment parser decides whether ``=`` is acceptable). ``exp`` is
  checked with leeway. The user is ``email`` (else ``sub``); groups come from
  ``--trusted-header-groups-claim`` when set and present.

The unsigned identity headers (``x-goog-authenticated-user-email``,
``x-amzn-oidc-identity``) are never read. Fail closed: a present header that does not
verify is a 401 (it never falls through to another authenticator); keys that cannot be
fetched are a 503. Only ES256 is accepted. Tokens are never logged.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import math
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import jwt
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from flask import request

from runtime.server.auth.front_door_settings import (
    ALB_KEY_URL,
    IAP_JWKS_URL,
    KINDS,
    FrontDoorSettings,
    parse_front_door,
)
from runtime.server.auth.model import AuthUnavailableError, Identity, UnauthenticatedError
from runtime.server.auth.ttl_cache import TtlCache

logger = logging.getLogger(__name__)

__all__ = [
    "ALB_KEY_URL",
    "IAP_JWKS_URL",
    "KINDS",
    "AlbAuthenticator",
    "FrontDoorSettings",
    "IapAuthenticator",
    "front_door_authenticator",
    "parse_front_door",
]

IAP_HEADER = "x-goog-iap-jwt-assertion"
ALB_HEADER = "x-amzn-oidc-data"
IAP_ISSUER = "https://cloud.google.com/iap"
#: Seconds of clock skew tolerated on exp/iat (Google documents 30 s for IAP).
LEEWAY_SECONDS = 30.0
#: IAP assertions live at most 10 minutes (+ 2 x skew).
IAP_MAX_LIFETIME = 600.0
#: Seconds per key fetch: a dead key server answers 503 quickly.
FETCH_TIMEOUT = 5.0
MAX_TOKEN_BYTES = 16 * 1024
MAX_KEY_BYTES = 64 * 1024
ALB_KEY_CACHE_SECONDS = 24 * 3600.0

#: ALB key ids are UUIDs; anything else never reaches the key URL's path.
_KID = re.compile(r"[A-Za-z0-9-]{1,128}")
_SEGMENT = re.compile(rb"[A-Za-z0-9_-]+={0,2}")


def _header_token(name: str) -> str | None:
    """The header's value; None when absent. Present but empty or oversized is a 401."""
    value = request.headers.get(name)
    if value is None:
        return None
    value = value.strip()
    if not value or len(value) > MAX_TOKEN_BYTES:
        raise UnauthenticatedError(f"the {name} header is not a signed assertion")
    return value


def _refused(name: str, reason: str) -> UnauthenticatedError:
    logger.info("front-door assertion refused (%s): %s", name, reason)
    return UnauthenticatedError(f"the {name} assertion did not verify: {reason}")


#: Why PyJWT refused an IAP assertion, in the words of the 401 (never the token itself).
_IAP_REFUSALS: tuple[tuple[type[Exception], str], ...] = (
    (jwt.ExpiredSignatureError, "expired"),
    (jwt.InvalidAudienceError, "wrong audience"),
    (jwt.InvalidIssuerError, "wrong issuer"),
    (jwt.InvalidSignatureError, "bad signature"),
    (jwt.ImmatureSignatureError, "issued in the future"),
)


class IapAuthenticator:
    """``x-goog-iap-jwt-assertion`` checked against Google's JWKS."""

    name = "trusted-header"

    def __init__(self, settings: FrontDoorSettings) -> None:
        self.settings = settings
        self._jwks = jwt.PyJWKClient(settings.iap_jwks_url, cache_jwk_set=True, lifespan=3600, timeout=FETCH_TIMEOUT)
        self._lock = threading.Lock()
        self._last_refresh = float("-inf")

    def _key(self, kid: str) -> Any:
        """The public key for ``kid``; an unknown kid refetches the JWKS at most once per ``refresh_seconds``."""
        with self._lock:
            try:
                found = self._match(self._jwks.get_signing_keys(), kid)
                now = time.monotonic()
                if found is None and now - self._last_refresh >= self.settings.refresh_seconds:
                    self._last_refresh = now
                    found = self._match(self._jwks.get_signing_keys(refresh=True), kid)
            except (jwt.PyJWKClientError, jwt.PyJWKSetError, jwt.PyJWKError) as error:
                logger.warning("IAP keys unavailable from %s: %s", self.settings.iap_jwks_url, type(error).__name__)
                raise AuthUnavailableError("cannot check the IAP assertion: its signing keys are unavailable") from None
        if found is None:
            raise _refused(IAP_HEADER, "unknown signing key")
        return found

    @staticmethod
    def _match(keys: list[jwt.PyJWK], kid: str) -> Any:
        for key in keys:
            if key.key_id == kid:
                return key.key
        return None

    def identify(self) -> Identity | None:
        token = _header_token(IAP_HEADER)
        if token is None:
            return None
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise _refused(IAP_HEADER, "malformed") from None
        kid = header.get("kid")
        if header.get("alg") != "ES256" or not isinstance(kid, str) or not kid:
            raise _refused(IAP_HEADER, "only ES256 with a key id is accepted")
        key = self._key(kid)
        if not isinstance(key, ec.EllipticCurvePublicKey) or not isinstance(key.curve, ec.SECP256R1):
            raise _refused(IAP_HEADER, "the key id names no P-256 key")
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=["ES256"],
                audience=self.settings.iap_audience,
                issuer=IAP_ISSUER,
                leeway=LEEWAY_SECONDS,
                options={"require": ["exp", "iat", "aud", "iss"], "verify_iat": True},
            )
        except jwt.PyJWTError as error:
            reason = next((text for kind, text in _IAP_REFUSALS if isinstance(error, kind)), "malformed claims")
            raise _refused(IAP_HEADER, reason) from None
        issued, expires = claims["iat"], claims["exp"]
        if not isinstance(issued, int | float) or issued > time.time() + LEEWAY_SECONDS:
            raise _refused(IAP_HEADER, "issued in the future")
        if expires - issued > IAP_MAX_LIFETIME + 2 * LEEWAY_SECONDS:
            raise _refused(IAP_HEADER, "lifetime longer than IAP issues")
        email = claims.get("email")
        if not isinstance(email, str) or not email.strip():
            raise _refused(IAP_HEADER, "no email claim")
        return Identity(user=email.strip().removeprefix("accounts.google.com:"), groups=(), via="iap")


def _b64_segment(segment: bytes) -> bytes:
    """One base64url segment, padded (as ALB sends) or not; anything else is malformed."""
    if not _SEGMENT.fullmatch(segment):
        raise ValueError("not base64url")
    bare = segment.rstrip(b"=")
    if len(bare) % 4 == 1 or (len(bare) != len(segment) and len(segment) % 4):
        raise ValueError("bad padding")
    return base64.urlsafe_b64decode(bare + b"=" * (-len(bare) % 4))


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class AlbAuthenticator:
    """``x-amzn-oidc-data`` checked against the ALB's regional public key for its ``kid``."""

    name = "trusted-header"

    def __init__(self, settings: FrontDoorSettings) -> None:
        self.settings = settings
        self._keys: TtlCache[str, ec.EllipticCurvePublicKey] = TtlCache(max_entries=64)
        self._opener = urllib.request.build_opener(_NoRedirect())

    def _key(self, kid: str) -> ec.EllipticCurvePublicKey:
        cached = self._keys.get(kid)
        if cached is not None:
            return cached
        url = self.settings.alb_key_url.format(region=self.settings.alb_region, kid=urllib.parse.quote(kid, safe=""))
        try:
            with self._opener.open(url, timeout=FETCH_TIMEOUT) as response:
                pem = response.read(MAX_KEY_BYTES + 1)
        except urllib.error.HTTPError as error:
            error.close()
            if 400 <= error.code < 500:  # no such key: not a token this ALB signed
                raise _refused(ALB_HEADER, "unknown signing key") from None
            logger.warning("ALB key server answered HTTP %s", error.code)
            raise AuthUnavailableError("cannot check the ALB assertion: its signing key is unavailable") from None
        except (OSError, ValueError) as error:  # URLError, timeouts, connection resets
            logger.warning("ALB key server unreachable: %s", type(error).__name__)
            raise AuthUnavailableError("cannot check the ALB assertion: its signing key is unavailable") from None
        try:
            if len(pem) > MAX_KEY_BYTES:
                raise ValueError("oversized")
            key = serialization.load_pem_public_key(pem)
        except ValueError:
            logger.warning("ALB key server returned no PEM public key")
            raise AuthUnavailableError("cannot check the ALB assertion: its signing key is unreadable") from None
        if not isinstance(key, ec.EllipticCurvePublicKey) or not isinstance(key.curve, ec.SECP256R1):
            logger.warning("ALB key server returned a key that is not P-256")
            raise AuthUnavailableError("cannot check the ALB assertion: its signing key is not P-256")
        self._keys.put(kid, key, ALB_KEY_CACHE_SECONDS)
        return key

    def _parse(self, token: str) -> tuple[dict[str, Any], dict[str, Any], bytes, bytes]:
        raw = token.encode("ascii", "strict") if token.isascii() else b""
        parts = raw.split(b".")
        if len(parts) != 3:
            raise _refused(ALB_HEADER, "malformed")
        try:
            header, payload, signature = (_b64_segment(part) for part in parts)
            header_json, payload_json = json.loads(header), json.loads(payload)
        except (ValueError, binascii.Error, RecursionError):
            raise _refused(ALB_HEADER, "malformed") from None
        if not isinstance(header_json, dict) or not isinstance(payload_json, dict):
            raise _refused(ALB_HEADER, "malformed")
        return header_json, payload_json, parts[0] + b"." + parts[1], signature

    def identify(self) -> Identity | None:
        token = _header_token(ALB_HEADER)
        if token is None:
            return None
        header, claims, signing_input, signature = self._parse(token)
        if header.get("alg") != "ES256":
            raise _refused(ALB_HEADER, "only ES256 is accepted")
        if not self.settings.alb_signer_matches(header.get("signer")):
            raise _refused(ALB_HEADER, "signed for another load balancer")
        kid = header.get("kid")
        if not isinstance(kid, str) or not _KID.fullmatch(kid):
            raise _refused(ALB_HEADER, "no usable key id")
        key = self._key(kid)
        if len(signature) != 64:
            raise _refused(ALB_HEADER, "bad signature")
        der = encode_dss_signature(int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big"))
        try:
            key.verify(der, signing_input, ec.ECDSA(hashes.SHA256()))
        except InvalidSignature:
            raise _refused(ALB_HEADER, "bad signature") from None
        expires = claims.get("exp", header.get("exp"))
        if isinstance(expires, str) and expires.isdigit():
            expires = int(expires)
        if isinstance(expires, bool) or not isinstance(expires, int | float) or not math.isfinite(expires):
            raise _refused(ALB_HEADER, "no expiry")
        if time.time() > expires + LEEWAY_SECONDS:
            raise _refused(ALB_HEADER, "expired")
        user = claims.get("email") or claims.get("sub")
        if not isinstance(user, str) or not user.strip():
            raise _refused(ALB_HEADER, "no email or sub claim")
        return Identity(user=user.strip(), groups=self._groups(claims), via="alb")

    def _groups(self, claims: dict[str, Any]) -> tuple[str, ...]:
        if not self.settings.groups_claim:
            return ()
        value = claims.get(self.settings.groups_claim)
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list):
            return ()
        return tuple(item for item in value if isinstance(item, str) and item)


def front_door_authenticator(settings: FrontDoorSettings | None) -> IapAuthenticator | AlbAuthenticator:
    """The ``trusted-header`` authenticator ``settings`` describe (``build_access_control`` calls this).

    Raises:
        ValueError: naming the flag, when ``--auth trusted-header`` has no ``--trusted-header``.
    """
    if settings is None:
        raise ValueError("--trusted-header: iap or alb is required with --auth trusted-header")
    if settings.kind == "iap":
        return IapAuthenticator(settings)
    return AlbAuthenticator(settings)
