"""Who is asking, and the three ways a check can refuse: 401, 403, 503.

Every failure of an authentication or authorization *mechanism* (API server, identity
provider or JWKS unreachable, a malformed answer) is :class:`AuthUnavailableError`, answered
503 with ``Retry-After``: the server fails closed, it never allows on error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

#: ``via`` of an identity the Kubernetes API established (TokenReview): its names are
#: Kubernetes' own. Every other authenticated identity comes from an identity provider.
VIA_KUBERNETES = "kubernetes"

#: ``Identity.extra``: sorted keys, each with its values, hashable (the decision cache keys on it).
Extra = tuple[tuple[str, tuple[str, ...]], ...]


@dataclass(frozen=True)
class Identity:
    """An authenticated caller.

    Attributes:
        user: the user name Kubernetes RBAC knows (TokenReview's ``user.username``,
            the OIDC / IAP / ALB e-mail or subject, with ``--oidc-username-prefix``).
        groups: its groups (RBAC groups, the OIDC groups claim, with ``--oidc-groups-prefix``).
        via: the authenticator that established it (``kubernetes``, ``oidc``, ``iap``, ``alb``, ``none``).
        uid: TokenReview's ``user.uid`` ("" for other authenticators).
        extra: TokenReview's ``user.extra`` (e.g. OpenShift token scopes), see :func:`extra_of`.
    """

    user: str
    groups: tuple[str, ...] = ()
    via: str = "none"
    uid: str = ""
    extra: Extra = ()

    def extra_dict(self) -> dict[str, list[str]]:
        """``extra`` in the shape of a SubjectAccessReview's ``spec.extra``."""
        return {key: list(values) for key, values in self.extra}


def extra_of(raw: Mapping[str, Sequence[str] | None] | None) -> Extra:
    """A TokenReview's ``user.extra`` as :attr:`Identity.extra` (keys sorted, values kept in order)."""
    if not raw:
        return ()
    return tuple((str(key), tuple(str(value) for value in (raw[key] or ()))) for key in sorted(raw))


#: The caller of a server started with ``--auth none`` (the local quickstart).
ANONYMOUS = Identity(user="system:anonymous", groups=("system:unauthenticated",), via="none")


class AuthError(Exception):
    """A refused request; ``status`` is the HTTP status it is answered with."""

    status = 401

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class UnauthenticatedError(AuthError):
    """No credentials, or credentials that do not establish an identity (401)."""

    status = 401


class ForbiddenError(AuthError):
    """An identity that may not read the namespace it asked for (403)."""

    status = 403


class AuthUnavailableError(AuthError):
    """The mechanism that would decide could not be asked (503, ``Retry-After``)."""

    status = 503
    retry_after = 5
