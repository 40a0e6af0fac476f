"""Authentication with the TokenReview API and authorization with SubjectAccessReview.

Both go through the API client the server already uses for RayCluster discovery
(``--kubernetes``); the server's service account needs ``create`` on
``tokenreviews.authentication.k8s.io`` and ``subjectaccessreviews.authorization.k8s.io``.
Positive token reviews are cached by a SHA-256 of the token (never the token) for the
token's remaining lifetime, at most 5 minutes; access decisions for at most 60 seconds.
The SubjectAccessReview carries the whole user the TokenReview returned -- name, groups,
uid and extra (e.g. OpenShift's token scopes) -- as Kubernetes' own delegated authorizers
do, so a scoped token is never authorized as its unscoped user.
Any failure to ask is :class:`AuthUnavailableError` (503), never an allow.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from runtime.server.auth.model import VIA_KUBERNETES, AuthUnavailableError, Identity, extra_of
from runtime.server.auth.ttl_cache import TtlCache

logger = logging.getLogger(__name__)

TOKEN_CACHE_SECONDS = 300.0
DECISION_CACHE_SECONDS = 60.0
#: (connect, read) seconds per review: a dead API server answers 503 quickly.
REQUEST_TIMEOUT = (3.05, 5.0)


@dataclass(frozen=True)
class ResourceCheck:
    """What "may read a namespace" means: ``verb`` on ``group``/``resource`` in it (``--authz-resource``)."""

    verb: str = "get"
    group: str = "ray.io"
    resource: str = "rayclusters"

    @classmethod
    def parse(cls, text: str) -> ResourceCheck:
        """``VERB:RESOURCE.GROUP`` (``get:rayclusters.ray.io``) or ``RESOURCE.GROUP`` (verb ``get``)."""
        verb, _, target = text.rpartition(":")
        resource, _, group = target.partition(".")
        if not resource or not all(part.replace("-", "").isalnum() for part in (verb or "get", resource)):
            raise ValueError(f"{text!r} is not VERB:RESOURCE.GROUP like get:rayclusters.ray.io")
        return cls(verb=verb or "get", group=group, resource=resource)


def token_fingerprint(token: str) -> str:
    """The cache key of a token: its SHA-256, so no raw token is kept in memory structures."""
    return hashlib.sha256(token.encode()).hexdigest()


def token_lifetime(token: str, now: float) -> float:
    """Seconds until a JWT's ``exp`` (unverified: only bounds how long a verified answer is kept).

    Not a JWT, or no ``exp``: the 5-minute cap alone applies.
    """
    parts = token.split(".")
    if len(parts) != 3:
        return TOKEN_CACHE_SECONDS
    try:
        payload = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
        expires = float(payload["exp"])
    except (ValueError, KeyError, TypeError):
        return TOKEN_CACHE_SECONDS
    return min(TOKEN_CACHE_SECONDS, expires - now)


def subject_digest(who: Identity) -> str:
    """A SHA-256 of ``who``'s uid and extra for the decision cache key: two tokens of one user
    with different scopes are decided (and cached) apart, and no scope value is kept as is."""
    document = json.dumps([who.uid, who.extra], separators=(",", ":"))
    return hashlib.sha256(document.encode()).hexdigest()


def _unavailable(what: str, error: Exception) -> AuthUnavailableError:
    status = getattr(error, "status", None)
    if status in (401, 403):
        hint = "the server's service account needs create on " + what
        logger.error("%s refused by the API server (HTTP %s): %s", what, status, hint)
        return AuthUnavailableError(f"cannot check access: {hint}")
    logger.warning("%s failed: %s", what, type(error).__name__)
    return AuthUnavailableError("cannot check access: the Kubernetes API did not answer")


class KubernetesReviews:
    """TokenReview and SubjectAccessReview with caches; one per app."""

    def __init__(self, api_client: Any, check: ResourceCheck | None = None) -> None:
        from kubernetes import client as kclient

        self._authn = kclient.AuthenticationV1Api(api_client)
        self._authz = kclient.AuthorizationV1Api(api_client)
        self._models = kclient
        self.check = check or ResourceCheck()
        self._tokens: TtlCache[str, Identity] = TtlCache()
        self._decisions: TtlCache[tuple[str, tuple[str, ...], str, str], bool] = TtlCache()

    def identity(self, token: str) -> Identity | None:
        """The token's user, or None when the API server does not authenticate it."""
        key = token_fingerprint(token)
        cached = self._tokens.get(key)
        if cached is not None:
            return cached
        k = self._models
        body = k.V1TokenReview(
            api_version="authentication.k8s.io/v1", kind="TokenReview", spec=k.V1TokenReviewSpec(token=token)
        )
        try:
            review = self._authn.create_token_review(body, _request_timeout=REQUEST_TIMEOUT)
        except Exception as error:  # every client, transport and decoding error: fail closed
            raise _unavailable("tokenreviews.authentication.k8s.io", error) from None
        status = review.status
        user = status.user if status is not None and status.authenticated else None
        if user is None or not user.username:
            return None
        found = Identity(
            user=user.username,
            groups=tuple(user.groups or ()),
            via=VIA_KUBERNETES,
            uid=user.uid or "",
            extra=extra_of(user.extra),
        )
        self._tokens.put(key, found, token_lifetime(token, time.time()))
        return found

    def may_read(self, who: Identity, namespace: str) -> bool:
        """Whether ``who`` may ``verb`` the configured resource in ``namespace``."""
        key = (who.user, who.groups, subject_digest(who), namespace)
        cached = self._decisions.get(key)
        if cached is not None:
            return cached
        k = self._models
        attributes = k.V1ResourceAttributes(
            namespace=namespace, verb=self.check.verb, group=self.check.group, resource=self.check.resource
        )
        body = k.V1SubjectAccessReview(
            api_version="authorization.k8s.io/v1",
            kind="SubjectAccessReview",
            spec=k.V1SubjectAccessReviewSpec(
                user=who.user,
                groups=list(who.groups),
                uid=who.uid or None,
                extra=who.extra_dict() or None,
                resource_attributes=attributes,
            ),
        )
        try:
            review = self._authz.create_subject_access_review(body, _request_timeout=REQUEST_TIMEOUT)
        except Exception as error:  # fail closed
            raise _unavailable("subjectaccessreviews.authorization.k8s.io", error) from None
        allowed = bool(review.status is not None and review.status.allowed and not review.status.denied)
        self._decisions.put(key, allowed, DECISION_CACHE_SECONDS)
        return allowed
