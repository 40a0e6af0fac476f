"""The names an identity provider asserts, made safe to hand to an authorizer.

An OIDC login or a front door (IAP, ALB) names a user and groups chosen by whoever runs
the identity provider, and ``--authz kubernetes`` hands them to a SubjectAccessReview. The
``system:`` namespace of names is Kubernetes' own (``system:masters`` is bound to
cluster-admin, ``system:serviceaccount:NS:NAME`` is a service account), so, as the
kube-apiserver's own JWT authenticator can be configured to:

* a user or group from an identity provider that starts with ``system:`` is refused
  (403), never reviewed -- always, prefixes or not (kube-apiserver: the
  ``userValidationRules`` ``!user.username.startsWith('system:')`` Kubernetes documents);
* ``--oidc-username-prefix`` / ``--oidc-groups-prefix`` (the kube-apiserver flags of the
  same names) are put in front of the provider's names before any review, so they cannot
  collide with Kubernetes users and groups at all (``oidc:alice@example.com``).

Identities from a Kubernetes TokenReview are Kubernetes' own and are left as they are.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from runtime.server.auth.model import ForbiddenError, Identity

logger = logging.getLogger(__name__)

#: Kubernetes reserves names with this prefix for itself (users, groups, service accounts).
RESERVED = "system:"


def parse_prefix(flag: str, value: str | None) -> str:
    """A prefix flag's value ("" = none).

    Raises:
        ValueError: naming the flag, for a prefix that is itself reserved or holds whitespace
            or control characters (RBAC subjects would never match it).
    """
    text = value or ""
    if text.startswith(RESERVED):
        raise ValueError(f"{flag}: {text!r} starts with {RESERVED!r}, which Kubernetes reserves for itself")
    if any(char.isspace() or not char.isprintable() for char in text):
        raise ValueError(f"{flag}: {text!r} may not contain whitespace or control characters")
    return text


@dataclass(frozen=True)
class ProviderNames:
    """How an identity provider's names become the names authorized.

    Attributes:
        username_prefix: ``--oidc-username-prefix``, put before the user name.
        groups_prefix: ``--oidc-groups-prefix``, put before each group.
    """

    username_prefix: str = ""
    groups_prefix: str = ""

    def __post_init__(self) -> None:
        # Checked here too, not only when parsing flags: a reserved prefix would undo the point.
        parse_prefix("--oidc-username-prefix", self.username_prefix)
        parse_prefix("--oidc-groups-prefix", self.groups_prefix)

    def apply(self, who: Identity) -> Identity:
        """``who`` with the prefixes applied.

        Raises:
            ForbiddenError: the provider named a user or group Kubernetes reserves (``system:...``).
        """
        reserved = [name for name in (who.user, *who.groups) if name.startswith(RESERVED)]
        if reserved:
            kind = "user" if reserved[0] == who.user else "group"
            # Names only: no token or cookie ever reaches this log line.
            logger.warning(
                "refused a %s identity: its %s %r starts with %r (reserved by Kubernetes)",
                who.via,
                kind,
                reserved[0],
                RESERVED,
            )
            raise ForbiddenError(
                f"refused: the identity provider named the {kind} {reserved[0]!r}; names starting with "
                f"{RESERVED!r} are reserved by Kubernetes and never accepted from an identity provider"
            )
        if not self.username_prefix and not self.groups_prefix:
            return who
        return replace(
            who,
            user=self.username_prefix + who.user,
            groups=tuple(self.groups_prefix + group for group in who.groups),
        )
