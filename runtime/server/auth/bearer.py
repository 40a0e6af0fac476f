"""``--auth kubernetes``: ``Authorization: Bearer <token>`` checked with the TokenReview API.

kubectl users send the token their kubeconfig holds (or ``kubectl create token``); the
``ray-history`` CLI does this for them. A header that is present but malformed, or a
token the API server does not accept, is a 401 -- it never falls through to another
authenticator.
"""

from __future__ import annotations

from flask import request

from runtime.server.auth.kubernetes import KubernetesReviews
from runtime.server.auth.model import Identity, UnauthenticatedError


class BearerTokenAuthenticator:
    name = "kubernetes"

    def __init__(self, reviews: KubernetesReviews) -> None:
        self.reviews = reviews

    def identify(self) -> Identity | None:
        header = request.headers.get("Authorization")
        if header is None:
            return None
        scheme, _, token = header.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise UnauthenticatedError("the Authorization header must be 'Bearer <token>'")
        found = self.reviews.identity(token)
        if found is None:
            raise UnauthenticatedError("the bearer token was not accepted (TokenReview: not authenticated)")
        return found
