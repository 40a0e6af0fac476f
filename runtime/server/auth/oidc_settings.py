"""``--auth oidc`` settings: the ``--oidc-*`` flags, validated into one value.

The client secret is read from a file (``--oidc-client-secret-file``, e.g. a mounted
Kubernetes Secret), never from a flag's or an environment variable's value, and never
appears in a ``repr``, a log line or an error message.

The login cookie is sealed (Fernet: AES-128-CBC + HMAC-SHA256) with keys from
``--oidc-cookie-key-file`` (one secret of at least 32 characters per line: the first
seals, every line opens, so keys rotate without logging everyone out) or, without that
flag, with a key derived (HKDF-SHA256) from the client secret: replicas sharing the
client secret share the key, and rotating the secret ends every login session.
"""

from __future__ import annotations

import base64
import ipaddress
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

#: How long a login lasts at most (the ID token's own ``exp`` caps it further).
SESSION_LIFETIME = 8 * 3600.0
MIN_COOKIE_SECRET = 32
MIN_DERIVING_SECRET = 16
LOOPBACK_NAMES = frozenset({"localhost"})


def is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _url(flag: str, value: str | None, *, need_path: bool = False) -> str:
    text = (value or "").strip()
    if not text:
        raise ValueError(f"{flag}: required with --auth oidc")
    parts = urlsplit(text)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise ValueError(f"{flag}: {text!r} is not an absolute http(s) URL")
    if parts.scheme == "http" and not is_loopback(parts.hostname):
        raise ValueError(f"{flag}: {text!r} must use https (plain http only for localhost / 127.0.0.1)")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise ValueError(f"{flag}: {text!r} may not have a query, fragment or user info")
    if need_path and parts.path in ("", "/"):
        raise ValueError(f"{flag}: {text!r} needs the callback path, e.g. https://host/oauth2/callback")
    return text


def _derive(secret: bytes, info: bytes, salt: bytes) -> bytes:
    """A Fernet key (urlsafe base64 of 32 bytes) derived from ``secret``."""
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=salt, info=info).derive(secret)
    return base64.urlsafe_b64encode(key)


def _read_secret(flag: str, path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        # The reason names the file, never its content.
        raise ValueError(f"{flag}: cannot read {path}: {getattr(error, 'strerror', None) or error}") from None


@dataclass(frozen=True)
class OidcSettings:
    """One OIDC client (the history server) of one issuer.

    Attributes:
        issuer: the issuer URL; discovery is at ``{issuer}/.well-known/openid-configuration``.
        client_id: the client registered at the issuer.
        client_secret: its secret (read from ``--oidc-client-secret-file``; not in ``repr``).
        redirect_url: the external callback URL registered at the issuer.
        groups_claim: the ID-token claim holding the user's groups.
        cookie_keys: Fernet keys sealing the cookies; the first seals, all open (not in ``repr``).
        session_lifetime: seconds a login lasts at most.
        scopes: the scopes asked for.
    """

    issuer: str
    client_id: str
    client_secret: str = field(repr=False)
    redirect_url: str
    cookie_keys: tuple[bytes, ...] = field(repr=False)
    groups_claim: str = "groups"
    session_lifetime: float = SESSION_LIFETIME
    scopes: str = "openid email profile"

    @property
    def discovery_url(self) -> str:
        return self.issuer.rstrip("/") + "/.well-known/openid-configuration"

    @property
    def callback_path(self) -> str:
        return urlsplit(self.redirect_url).path

    @property
    def public_origin(self) -> str:
        parts = urlsplit(self.redirect_url)
        return f"{parts.scheme}://{parts.netloc}"

    @property
    def secure_cookies(self) -> bool:
        """``Secure`` cookies unless the server is reached over plain HTTP on loopback."""
        parts = urlsplit(self.redirect_url)
        return not (parts.scheme == "http" and is_loopback(parts.hostname))


def parse_oidc(
    issuer: str | None,
    client_id: str | None,
    secret_file: str | None,
    groups_claim: str | None = "groups",
    redirect_url: str | None = None,
    *,
    cookie_key_file: str | None = None,
) -> OidcSettings:
    """Validate the ``--oidc-*`` flags (call it when ``--auth`` includes ``oidc``).

    Raises:
        ValueError: naming the flag that is missing or wrong.
    """
    issuer_url = _url("--oidc-issuer", issuer)
    client = (client_id or "").strip()
    if not client:
        raise ValueError("--oidc-client-id: required with --auth oidc")
    if not secret_file:
        raise ValueError("--oidc-client-secret-file: required with --auth oidc (a file holding the client secret)")
    secret = _read_secret("--oidc-client-secret-file", secret_file).strip()
    if not secret:
        raise ValueError(f"--oidc-client-secret-file: {secret_file} is empty")
    claim = (groups_claim or "").strip()
    if not claim:
        raise ValueError("--oidc-groups-claim: must name a claim (default: groups)")
    redirect = _url("--oidc-redirect-url", redirect_url, need_path=True)
    if cookie_key_file:
        lines = [line.strip() for line in _read_secret("--oidc-cookie-key-file", cookie_key_file).splitlines()]
        secrets = [line for line in lines if line]
        if not secrets or any(len(line) < MIN_COOKIE_SECRET for line in secrets):
            raise ValueError(
                f"--oidc-cookie-key-file: {cookie_key_file} needs one secret of at least {MIN_COOKIE_SECRET} "
                "characters per line (e.g. `openssl rand -base64 48`)"
            )
        keys = tuple(_derive(line.encode(), b"ray-history oidc cookie key v1", b"") for line in secrets)
    else:
        if len(secret) < MIN_DERIVING_SECRET:
            raise ValueError(
                "--oidc-cookie-key-file: the client secret is too short to derive the cookie key from; "
                f"give a key file (a secret of at least {MIN_COOKIE_SECRET} characters)"
            )
        keys = (_derive(secret.encode(), b"ray-history oidc cookie key from client secret v1", client.encode()),)
    return OidcSettings(
        issuer=issuer_url,
        client_id=client,
        client_secret=secret,
        redirect_url=redirect,
        cookie_keys=keys,
        groups_claim=claim,
    )
