"""The sealed cookies of the OIDC login: the login session and the login in progress.

Both are Fernet tokens (encrypted *and* authenticated) holding a small JSON document with
a ``purpose`` (so one can never be replayed as the other) and an ``exp``. The login
session holds only the user, its groups and the expiry -- never a token of the identity
provider. A cookie that does not open (tampered, sealed with another key, expired,
malformed) is no login at all.

Attributes set on both: ``HttpOnly``, ``SameSite=Lax``, ``Path=/``, and ``Secure`` with
the ``__Host-`` name prefix unless the server is reached over plain-HTTP loopback.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from flask import Response

from runtime.server.auth.model import Identity

logger = logging.getLogger(__name__)

SESSION_NAME = "ray_history_login"
STATE_NAME = "ray_history_oidc_login"
#: A login started at the identity provider must come back within this many seconds.
STATE_LIFETIME = 600
#: Browsers drop cookies over 4096 bytes (name, value and attributes).
MAX_COOKIE_VALUE = 3800


class CookieTooLargeError(ValueError):
    """The sealed value would not fit in a cookie (too many groups)."""


@dataclass(frozen=True)
class LoginState:
    """A login in progress: what the callback checks, and where to go afterwards."""

    state: str
    nonce: str
    code_verifier: str
    next_path: str


class SealedCookies:
    """Seal and open the login cookies with the configured keys (the first seals)."""

    def __init__(self, keys: tuple[bytes, ...], secure: bool) -> None:
        if not keys:
            raise ValueError("no cookie key")
        self._fernet = MultiFernet([Fernet(key) for key in keys])
        self.secure = secure
        prefix = "__Host-" if secure else ""
        self.session_name = prefix + SESSION_NAME
        self.state_name = prefix + STATE_NAME

    def _seal(self, purpose: str, exp: float, body: dict[str, Any]) -> str:
        document = {"purpose": purpose, "exp": int(exp), **body}
        sealed = self._fernet.encrypt(json.dumps(document, separators=(",", ":")).encode()).decode()
        if len(sealed) > MAX_COOKIE_VALUE:
            raise CookieTooLargeError(
                f"the sealed {purpose} cookie is {len(sealed)} bytes (at most {MAX_COOKIE_VALUE})"
            )
        return sealed

    def _open(self, purpose: str, sealed: str | None, now: float) -> dict[str, Any] | None:
        if not sealed or len(sealed) > MAX_COOKIE_VALUE * 2:
            return None
        try:
            document = json.loads(self._fernet.decrypt(sealed.encode()))
        except (InvalidToken, ValueError, UnicodeDecodeError):
            return None
        if not isinstance(document, dict) or document.get("purpose") != purpose:
            return None
        exp = document.get("exp")
        if not isinstance(exp, int) or exp <= now:
            return None
        return document

    # The login session.

    def seal_session(self, who: Identity, exp: float) -> str:
        return self._seal("session", exp, {"user": who.user, "groups": list(who.groups)})

    def open_session(self, sealed: str | None, now: float | None = None) -> Identity | None:
        document = self._open("session", sealed, time.time() if now is None else now)
        if document is None:
            return None
        user, groups = document.get("user"), document.get("groups")
        if not isinstance(user, str) or not user or not isinstance(groups, list):
            return None
        if not all(isinstance(group, str) for group in groups):
            return None
        return Identity(user=user, groups=tuple(groups), via="oidc")

    # The login in progress.

    def seal_state(self, login: LoginState, now: float | None = None) -> str:
        exp = (time.time() if now is None else now) + STATE_LIFETIME
        return self._seal(
            "state",
            exp,
            {
                "state": login.state,
                "nonce": login.nonce,
                "verifier": login.code_verifier,
                "next": login.next_path,
            },
        )

    def open_state(self, sealed: str | None, now: float | None = None) -> LoginState | None:
        document = self._open("state", sealed, time.time() if now is None else now)
        if document is None:
            return None
        values = [document.get(key) for key in ("state", "nonce", "verifier", "next")]
        if not all(isinstance(value, str) and value for value in values):
            return None
        state, nonce, verifier, next_path = (str(value) for value in values)
        return LoginState(state=state, nonce=nonce, code_verifier=verifier, next_path=next_path)

    # Setting and clearing them on a response.

    def set(self, response: Response, name: str, value: str, max_age: int) -> None:
        response.set_cookie(
            name, value, max_age=max(max_age, 0), path="/", secure=self.secure, httponly=True, samesite="Lax"
        )

    def clear(self, response: Response, name: str) -> None:
        response.delete_cookie(name, path="/", secure=self.secure, httponly=True, samesite="Lax")
