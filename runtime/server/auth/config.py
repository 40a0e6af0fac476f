"""Access-control settings (``--auth``, ``--authz`` and friends), validated into one value.

``none`` is the default for the local quickstart only: it cannot be combined with another
authenticator, and ``--authz none`` is accepted only with it, so an authenticated server
always authorizes too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from runtime.server.auth.kubernetes import ResourceCheck
from runtime.server.auth.provider_names import ProviderNames, parse_prefix

#: Implemented authenticators (#16). ``oidc`` needs the ``--oidc-*`` flags too
#: (:func:`runtime.server.auth.oidc_settings.parse_oidc`), ``trusted-header`` the
#: ``--trusted-header`` ones (:func:`runtime.server.auth.front_door_settings.parse_front_door`).
AUTH_MODES = ("none", "kubernetes", "oidc", "trusted-header")
AUTHZ_MODES = ("none", "kubernetes", "static")
#: The authenticators whose names come from an identity provider (the prefixes apply to them).
PROVIDER_MODES = ("oidc", "trusted-header")


@dataclass(frozen=True)
class AuthConfig:
    """How callers are identified and what they may read.

    Attributes:
        modes: authenticators in the order they are tried (``("none",)`` = none).
        authz: ``none``, ``kubernetes`` (SubjectAccessReview) or ``static`` (policy file).
        resource: what "may read a namespace" means for ``kubernetes`` authorization.
        policy_file: the ``static`` policy.
        provider_names: the prefixes put before identity-provider names (``--oidc-*-prefix``).
    """

    modes: tuple[str, ...] = ("none",)
    authz: str = "none"
    resource: ResourceCheck = field(default_factory=ResourceCheck)
    policy_file: Path | None = None
    provider_names: ProviderNames = field(default_factory=ProviderNames)

    @property
    def enabled(self) -> bool:
        return self.modes != ("none",)


def parse_auth(
    auth: str,
    authz: str,
    resource: str | None = None,
    policy_file: str | None = None,
    *,
    username_prefix: str | None = None,
    groups_prefix: str | None = None,
) -> AuthConfig:
    """Validate the flags' values; ValueError naming the flag otherwise."""
    modes = tuple(part.strip() for part in (auth or "none").split(",") if part.strip()) or ("none",)
    for mode in modes:
        if mode not in AUTH_MODES:
            raise ValueError(f"--auth: {mode!r} is not one of {', '.join(AUTH_MODES)}")
    if len(set(modes)) != len(modes):
        raise ValueError(f"--auth: {auth!r} names a mode twice")
    if "none" in modes and len(modes) > 1:
        raise ValueError("--auth: none cannot be combined with another mode")
    chosen = authz or ("none" if modes == ("none",) else "")
    if chosen not in AUTHZ_MODES:
        raise ValueError(f"--authz: {authz!r} is not one of {', '.join(AUTHZ_MODES)} (required with --auth {auth})")
    if chosen == "none" and modes != ("none",):
        raise ValueError("--authz none is only allowed with --auth none: an authenticated server must authorize")
    if chosen != "none" and modes == ("none",):
        raise ValueError(f"--authz {chosen} needs --auth (who is asking?): add {', '.join(AUTH_MODES[1:])}")
    if chosen == "static" and not policy_file:
        raise ValueError("--authz-policy: a policy file is required with --authz static")
    if policy_file and chosen != "static":
        raise ValueError("--authz-policy: only used with --authz static")
    try:
        check = ResourceCheck.parse(resource) if resource else ResourceCheck()
    except ValueError as error:
        raise ValueError(f"--authz-resource: {error}") from None
    prefixes = {"--oidc-username-prefix": username_prefix, "--oidc-groups-prefix": groups_prefix}
    for flag, value in prefixes.items():
        if value and not set(modes) & set(PROVIDER_MODES):
            raise ValueError(f"{flag}: only used with --auth {' or '.join(PROVIDER_MODES)}")
    names = ProviderNames(
        username_prefix=parse_prefix("--oidc-username-prefix", username_prefix),
        groups_prefix=parse_prefix("--oidc-groups-prefix", groups_prefix),
    )
    return AuthConfig(
        modes=modes,
        authz=chosen,
        resource=check,
        policy_file=Path(policy_file) if policy_file else None,
        provider_names=names,
    )
