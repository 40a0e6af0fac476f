"""Ray auth tokens of live clusters, read from the Secrets KubeRay keeps them in.

KubeRay 1.7 (``authOptions.mode: token`` on a RayCluster) puts the token in the
data key ``auth_token`` of a Secret in the cluster's namespace: the one
``authOptions.secretName`` names, else one it generates per cluster, named like
the cluster (``utils.CheckName``). The head and workers get it as
``RAY_AUTH_TOKEN`` (a ``secretKeyRef``) beside ``RAY_AUTH_MODE=token``; Ray's
dashboard then wants ``Authorization`` or ``x-ray-authorization: Bearer <token>``
on every API call. The proxy sends the latter (KubeRay's own dashboard client and
history server do too).

Reading needs ``get`` on ``secrets`` in the workload namespaces (a Role per
namespace, never cluster-wide). Tokens are cached for a minute per Secret, and a
failure for a few seconds (an unreadable Secret must not cost every Dashboard
request an API round trip). Token values are never logged, never in a repr, never
in an error message.
"""

from __future__ import annotations

import base64
import binascii
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import urllib3
from kubernetes import client as kclient
from kubernetes.client.exceptions import ApiException

from runtime.server.live.discovery import LiveAuthError, TokenAuth, TokenSource
from runtime.storage.errors import InvalidKeyError
from runtime.storage.layout import validate_k8s_name

logger = logging.getLogger(__name__)

TOKEN_TTL = 60.0
FAILURE_TTL = 5.0
#: What a header value may hold (RFC 9110 visible ASCII): anything else is refused.
_HEADER_SAFE = re.compile(r"[\x21-\x7e]+")
#: KubeRay's CheckName: generated names keep their last 50 characters.
_MAX_GENERATED = 50


def kuberay_secret_name(cluster_name: str) -> str:
    """The Secret KubeRay generates for ``cluster_name`` (Go ``utils.CheckName``):
    the last 50 characters, and a leading digit or punctuation replaced by ``r``."""
    name = cluster_name[-_MAX_GENERATED:] if len(cluster_name) > _MAX_GENERATED else cluster_name
    if name and (name[0].isdigit() or name[0] in "-."):
        name = "r" + name[1:]
    return name


def token_auth_from_spec(namespace: str, name: str, spec: Mapping[str, Any]) -> TokenAuth | None:
    """Where the token of RayCluster ``namespace/name`` lives, None without token auth.

    Token auth is on iff ``authOptions.mode`` is ``token`` (KubeRay's
    ``IsAuthEnabled``: an empty mode configures no pod for auth, although the
    field's documentation says it defaults to ``token``).
    """
    options = spec.get("authOptions")
    if not isinstance(options, Mapping) or options.get("mode") != "token":
        return None
    if options.get("enableK8sTokenAuth") is True:
        return TokenAuth(namespace, "", kubernetes_delegated=True)
    given = options.get("secretName")
    secret = given if isinstance(given, str) and given else kuberay_secret_name(name)
    try:
        validate_k8s_name(secret, "Secret name")
    except InvalidKeyError as exc:
        # Kept (not dropped): the proxy then refuses with this reason instead of
        # sending requests the cluster would reject anyway.
        logger.warning("RayCluster %s/%s: unusable auth Secret name: %s", namespace, name, exc)
    return TokenAuth(namespace, secret)


class _Entry:
    """A cached token or failure; the value never appears in a repr."""

    __slots__ = ("error", "expires", "value")

    def __init__(self, expires: float, value: str = "", error: str = "") -> None:
        self.expires, self.value, self.error = expires, value, error

    def __repr__(self) -> str:
        return f"_Entry(expires={self.expires}, error={self.error!r})"


class SecretTokenSource(TokenSource):
    """Tokens from Secrets through ``CoreV1Api.read_namespaced_secret``."""

    def __init__(
        self,
        api_client: kclient.ApiClient,
        *,
        ttl: float = TOKEN_TTL,
        failure_ttl: float = FAILURE_TTL,
        request_timeout: tuple[float, float] = (3.05, 10.0),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = kclient.CoreV1Api(api_client)
        self.ttl, self.failure_ttl, self.request_timeout, self.clock = ttl, failure_ttl, request_timeout, clock
        self._cache: dict[tuple[str, str, str], _Entry] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"SecretTokenSource({len(self._cache)} cached)"

    def token(self, auth: TokenAuth) -> str:
        key = (auth.namespace, auth.secret_name, auth.key)
        now = self.clock()
        with self._lock:
            entry = self._cache.get(key)
        if entry is None or entry.expires <= now:
            try:
                entry = _Entry(now + self.ttl, value=self._read(auth))
            except LiveAuthError as exc:
                logger.warning("Ray auth token of %s: %s", auth.secret, exc)
                entry = _Entry(now + self.failure_ttl, error=str(exc))
            with self._lock:
                self._cache[key] = entry
                for stale in [k for k, e in self._cache.items() if e.expires <= now]:
                    del self._cache[stale]
        if entry.error:
            raise LiveAuthError(entry.error)
        return entry.value

    def forget(self, auth: TokenAuth) -> None:
        with self._lock:
            self._cache.pop((auth.namespace, auth.secret_name, auth.key), None)

    def _read(self, auth: TokenAuth) -> str:
        where = f"Secret {auth.secret}"
        try:
            validate_k8s_name(auth.secret_name, "Secret name")
        except InvalidKeyError as exc:
            raise LiveAuthError(f"{where}: {exc}") from None
        try:
            secret = self.api.read_namespaced_secret(
                auth.secret_name, auth.namespace, _request_timeout=self.request_timeout
            )
        except ApiException as exc:
            if exc.status in (401, 403):
                raise LiveAuthError(
                    f"the history server may not read {where} (Kubernetes API answered {exc.status} {exc.reason}): "
                    f"grant get on secrets in namespace {auth.namespace} (a Role and RoleBinding there)"
                ) from None
            if exc.status == 404:
                raise LiveAuthError(
                    f"{where} not found (KubeRay creates it for authOptions.mode token, "
                    "unless authOptions.secretName names one)"
                ) from None
            raise LiveAuthError(f"cannot read {where}: Kubernetes API answered {exc.status} {exc.reason}") from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise LiveAuthError(f"cannot read {where}: Kubernetes API unreachable: {type(exc).__name__}") from None
        return _decode(where, auth.key, getattr(secret, "data", None))


def _decode(where: str, key: str, data: object) -> str:
    """The token under ``key`` of a Secret's (base64) data, checked to be header-safe."""
    encoded = data.get(key) if isinstance(data, Mapping) else None
    if not isinstance(encoded, str):
        raise LiveAuthError(f"{where} has no data key {key!r}")
    try:
        token = base64.b64decode(encoded, validate=True).decode("ascii").strip()
    except (binascii.Error, UnicodeDecodeError):
        raise LiveAuthError(f"{where}: data key {key!r} is not an ASCII token") from None
    if not token:
        raise LiveAuthError(f"{where}: data key {key!r} is empty")
    if not _HEADER_SAFE.fullmatch(token):
        raise LiveAuthError(f"{where}: data key {key!r} holds characters a header cannot carry")
    return token
