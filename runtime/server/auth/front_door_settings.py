"""The ``trusted-header`` flags (``--trusted-header iap|alb`` and companions), validated.

Key URLs must be ``https://`` (``http://`` only on loopback, for tests): a key fetched in
clear text could be swapped by anyone on the path. ALB ARNs outside the ``aws`` partition
(GovCloud, China) need ``--alb-key-url``: their key endpoints differ.
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse
from dataclasses import dataclass

KINDS = ("iap", "alb")
IAP_JWKS_URL = "https://www.gstatic.com/iap/verify/public_key-jwk"
ALB_KEY_URL = "https://public-keys.auth.elb.{region}.amazonaws.com/{kid}"

_IAP_AUDIENCE = re.compile(r"/projects/\d+/(global/backendServices/\d+|apps/[a-z][a-z0-9:.-]*)")
#: The id may be ``*``: a name is unique per account and region, and the id exists only once
#: the ingress controller has made the load balancer, after the deploy that configures the server.
_ALB_ARN = re.compile(
    r"arn:(aws[a-z-]*):elasticloadbalancing:([a-z0-9-]+):\d{12}:loadbalancer/app/[\w-]+/([0-9a-f]+|\*)"
)
_ALB_ID = re.compile(r"[0-9a-f]+")
_REGION = re.compile(r"[a-z]{2}(-[a-z]+)+-\d")


@dataclass(frozen=True)
class FrontDoorSettings:
    """What ``--trusted-header`` and its companion flags say (see :func:`parse_front_door`).

    Attributes:
        kind: ``iap`` or ``alb``.
        iap_audience: the ``aud`` IAP assertions must carry.
        alb_arn: the load balancer whose ``signer`` ALB tokens must carry.
        alb_region: its region (derived from the ARN).
        groups_claim: the ALB payload claim holding the caller's groups ("" = none).
        iap_jwks_url: Google's JWKS (a mirror for air-gapped setups and tests).
        alb_key_url: the ALB key URL template with ``{region}`` and ``{kid}``.
        refresh_seconds: an unknown IAP ``kid`` refetches the JWKS at most this often.
    """

    kind: str
    iap_audience: str = ""
    alb_arn: str = ""
    alb_region: str = ""
    groups_claim: str = ""
    iap_jwks_url: str = IAP_JWKS_URL
    alb_key_url: str = ALB_KEY_URL
    refresh_seconds: float = 30.0

    def alb_signer_matches(self, signer: object) -> bool:
        """Is ``signer`` (an ALB token's header) our load balancer? ``.../NAME/*`` pins the name only."""
        if not isinstance(signer, str) or not self.alb_arn:
            return False
        if not self.alb_arn.endswith("/*"):
            return signer == self.alb_arn
        prefix = self.alb_arn[:-1]
        return signer.startswith(prefix) and _ALB_ID.fullmatch(signer[len(prefix) :]) is not None


def _check_url(flag: str, url: str) -> None:
    """https, or http to a loopback address only (a key served in clear text could be swapped)."""
    parsed = urllib.parse.urlsplit(url.replace("{region}", "r").replace("{kid}", "k"))
    host = parsed.hostname or ""
    if parsed.scheme == "https" and host:
        return
    if parsed.scheme == "http" and host:
        try:
            if ipaddress.ip_address(host).is_loopback:
                return
        except ValueError:
            if host == "localhost":
                return
    raise ValueError(f"{flag}: {url!r} must be an https:// URL (http:// only on loopback)")


def parse_front_door(
    kind: str | None,
    *,
    iap_audience: str | None = None,
    alb_arn: str | None = None,
    alb_region: str | None = None,
    groups_claim: str | None = None,
    iap_jwks_url: str | None = None,
    alb_key_url: str | None = None,
) -> FrontDoorSettings | None:
    """Validate the front-door flags; None when ``--trusted-header`` is not set (and nothing else is).

    Raises:
        ValueError: naming the flag.
    """
    given = {
        "--iap-audience": iap_audience,
        "--alb-arn": alb_arn,
        "--alb-region": alb_region,
        "--trusted-header-groups-claim": groups_claim,
        "--iap-jwks-url": iap_jwks_url,
        "--alb-key-url": alb_key_url,
    }
    chosen = (kind or "").strip().lower()
    if not chosen:
        stray = [flag for flag, value in given.items() if value]
        if stray:
            raise ValueError(f"{stray[0]}: only used with --trusted-header iap|alb")
        return None
    if chosen not in KINDS:
        raise ValueError(f"--trusted-header: {kind!r} is not one of {', '.join(KINDS)}")
    other = ("--alb-arn", "--alb-region", "--alb-key-url") if chosen == "iap" else ("--iap-audience", "--iap-jwks-url")
    for flag in other:
        if given[flag]:
            raise ValueError(f"{flag}: only used with --trusted-header {'alb' if chosen == 'iap' else 'iap'}")
    if chosen == "iap":
        return _parse_iap(iap_audience, groups_claim, iap_jwks_url)
    return _parse_alb(alb_arn, alb_region, groups_claim, alb_key_url)


def _parse_iap(audience: str | None, groups_claim: str | None, jwks_url: str | None) -> FrontDoorSettings:
    if groups_claim:
        raise ValueError("--trusted-header-groups-claim: IAP assertions carry no groups")
    audience = (audience or "").strip()
    if not _IAP_AUDIENCE.fullmatch(audience):
        raise ValueError(
            f"--iap-audience: {audience!r} is not /projects/PROJECT_NUMBER/global/backendServices/SERVICE_ID"
            " or /projects/PROJECT_NUMBER/apps/PROJECT_ID (required with --trusted-header iap)"
        )
    jwks = jwks_url or IAP_JWKS_URL
    _check_url("--iap-jwks-url", jwks)
    return FrontDoorSettings(kind="iap", iap_audience=audience, iap_jwks_url=jwks)


def _parse_alb(
    arn: str | None, region_flag: str | None, groups_claim: str | None, key_url_flag: str | None
) -> FrontDoorSettings:
    arn = (arn or "").strip()
    matched = _ALB_ARN.fullmatch(arn)
    if not matched:
        raise ValueError(
            f"--alb-arn: {arn!r} is not an Application Load Balancer ARN (required with --trusted-header alb):"
            " arn:aws:elasticloadbalancing:REGION:ACCOUNT:loadbalancer/app/NAME/ID (ID may be *)"
        )
    partition, region = matched.group(1), matched.group(2)
    if region_flag and region_flag.strip() != region:
        raise ValueError(f"--alb-region: {region_flag!r} differs from the ARN's region {region!r}")
    if not _REGION.fullmatch(region):
        raise ValueError(f"--alb-arn: {region!r} is not an AWS region")
    key_url = key_url_flag or ALB_KEY_URL
    if "{kid}" not in key_url:
        raise ValueError(f"--alb-key-url: {key_url!r} must contain {{kid}}")
    if partition != "aws" and not key_url_flag:
        raise ValueError(f"--alb-key-url: required in the {partition} partition (its ALB key endpoint differs)")
    _check_url("--alb-key-url", key_url)
    claim = (groups_claim or "").strip()
    return FrontDoorSettings(kind="alb", alb_arn=arn, alb_region=region, groups_claim=claim, alb_key_url=key_url)
