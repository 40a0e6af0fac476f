"""Push credentials for Azure Container Registry without its admin user.

The identity running ``pulumi up`` gets an Azure Resource Manager token (the provider's
``getClientToken``) and exchanges it at the registry's ``/oauth2/exchange`` endpoint for a
registry refresh token, which Docker accepts as the password of the fixed user
``00000000-0000-0000-0000-000000000000`` -- what ``az acr login --expose-token`` does
(https://github.com/Azure/acr/blob/main/docs/AAD-OAuth.md). The token lives only in a
Pulumi secret; errors name the registry and the HTTP status, never the token.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request

#: The user name ACR expects beside a refresh token.
ACR_TOKEN_USER = "00000000-0000-0000-0000-000000000000"  # noqa: S105 - a user name, not a secret


class AcrTokenError(RuntimeError):
    """The registry refused the exchange; the message names the registry, never the token."""


def exchange_acr_refresh_token(
    login_server: str, tenant_id: str, arm_token: str, *, scheme: str = "https", timeout: float = 30.0
) -> str:
    """An ACR refresh token for ``login_server`` in exchange for an ARM access token.

    Args:
        login_server: the registry host (``myregistry.azurecr.io``).
        tenant_id: the Entra tenant of the token.
        arm_token: the Azure Resource Manager access token of the identity running ``pulumi up``.
        scheme: ``https`` (tests use ``http`` against a loopback endpoint).
        timeout: seconds for the one request.
    """
    body = urllib.parse.urlencode(
        {"grant_type": "access_token", "service": login_server, "tenant": tenant_id, "access_token": arm_token}
    ).encode()
    request = urllib.request.Request(  # noqa: S310 - the scheme is https, or http in tests
        f"{scheme}://{login_server}/oauth2/exchange",
        data=body,
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            answer = json.loads(response.read())
    except urllib.error.HTTPError as error:
        raise AcrTokenError(
            f"registry {login_server} refused the token exchange (HTTP {error.code}): the identity running "
            "`pulumi up` needs AcrPush on the registry (the stack assigns it; role assignments can take "
            "minutes to propagate: run `pulumi up` again)"
        ) from None
    except (urllib.error.URLError, TimeoutError, ValueError) as error:
        raise AcrTokenError(f"registry {login_server}: token exchange failed ({type(error).__name__})") from None
    token = answer.get("refresh_token") if isinstance(answer, dict) else None
    if not isinstance(token, str) or not token:
        raise AcrTokenError(f"registry {login_server}: the token exchange answered without a refresh_token")
    return token
