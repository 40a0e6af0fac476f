"""Infra test set-up: the ACR token exchange answers locally.

The real exchange (``ray_history_pulumi.acr_token``) is an HTTPS call to the registry made
while ``pulumi up`` runs; under mocks the registry does not exist, so the program's call is
answered here and recorded. ``tests/unit/infra/components/test_acr_token.py`` runs the real
function against a loopback endpoint.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ray_history_pulumi import acr_token

#: The function itself, for the tests that run it against a loopback endpoint.
REAL_EXCHANGE = acr_token.exchange_acr_refresh_token
#: What the stand-in hands back, so tests can check it reached the push credentials.
MOCK_ACR_REFRESH_TOKEN = "acr-refresh-mock"
#: (login server, tenant, ARM token) per exchange the program made.
EXCHANGES: list[tuple[str, str, str]] = []


def _exchange(login_server: str, tenant_id: str, arm_token: str, **_: object) -> str:
    EXCHANGES.append((login_server, tenant_id, arm_token))
    return MOCK_ACR_REFRESH_TOKEN


@pytest.fixture(autouse=True, scope="session")
def local_acr_token_exchange() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(acr_token, "exchange_acr_refresh_token", _exchange)
        yield
