"""Which live Ray clusters exist, and where their dashboards answer.

A :class:`LiveDirectory` answers three questions for ``/clusters``,
``/enter_cluster`` and the live proxy:

* ``list_clusters()``: every live RayCluster (a listing that says whether the
  source was reachable, so stored sessions keep working when it is not);
* ``get(namespace, name)``: one RayCluster, ``None`` when it does not exist;
* ``find_for_owner(namespace, kind, name)``: the RayCluster a RayJob/RayService
  created (found by KubeRay's ``ray.io/originated-from-*`` labels).

Implementations: :class:`~runtime.server.live.k8s.KubernetesLiveDirectory` (the
RayCluster API, ClusterRole ``raycluster-reader``), :class:`StaticLiveDirectory`
(``--live-cluster [ns/]name=URL``, for local demos and tests), their combination,
and "none". The proxy never routes by cookie values: a cookie only names the
cluster, the directory supplies the URL (SSRF defence, as in the reference).
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from runtime.server.config import LiveClusterURL
from runtime.storage.layout import CLUSTER_KINDS, RAYCLUSTER

logger = logging.getLogger(__name__)

#: The Kubernetes modes of ``--kubernetes``.
KUBERNETES_MODES = ("auto", "in-cluster", "kubeconfig", "off")


class LiveDiscoveryError(Exception):
    """The source of live clusters failed (API unreachable, forbidden, ...)."""


class LiveAuthError(Exception):
    """A cluster with Ray token auth needs a token that cannot be had (the message
    names the Secret and what to grant; it never contains a token)."""


#: The data key KubeRay reads the token from (``RAY_AUTH_TOKEN_SECRET_KEY``).
TOKEN_SECRET_KEY = "auth_token"  # noqa: S105 - a key name, not a value


@dataclass(frozen=True)
class TokenAuth:
    """Where a RayCluster's Ray auth token lives (KubeRay ``authOptions.mode: token``).

    ``secret_name`` is ``authOptions.secretName`` or the Secret KubeRay generates
    per cluster. ``kubernetes_delegated`` (``authOptions.enableK8sTokenAuth``)
    clusters have no static token: Ray asks the API server instead, so the proxy
    cannot authenticate to them and refuses (as the reference does).
    """

    namespace: str
    secret_name: str
    key: str = TOKEN_SECRET_KEY
    kubernetes_delegated: bool = False

    @property
    def secret(self) -> str:
        return f"{self.namespace}/{self.secret_name}"


class TokenSource(ABC):
    """Reads the token a :class:`TokenAuth` names. Thread-safe; never logs values."""

    @abstractmethod
    def token(self, auth: TokenAuth) -> str:
        """The token; raises LiveAuthError when it cannot be read (fail closed)."""

    def forget(self, auth: TokenAuth) -> None:  # noqa: B027 - optional hook, a source may cache nothing
        """Drop a cached token (the cluster refused it: the Secret may have rotated)."""


@dataclass(frozen=True)
class LiveCluster:
    """A running RayCluster and where its head dashboard answers.

    ``owner_kind`` is ``raycluster`` (with an empty ``owner_name``) for a bare
    RayCluster, else ``rayjob``/``rayservice`` and the owning CR's name.
    ``base_url`` is ``""`` while KubeRay has not created the head service yet.
    ``token_auth`` says where the token of a cluster with Ray token auth lives.
    """

    namespace: str
    name: str
    owner_kind: str
    owner_name: str
    created_at: datetime
    base_url: str
    token_auth: TokenAuth | None = None

    @property
    def ready(self) -> bool:
        return bool(self.base_url)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class LiveListing:
    """All live clusters; ``available`` is False (with ``error``) when the source
    could not be asked, so callers can say so instead of showing "no clusters"."""

    clusters: list[LiveCluster] = field(default_factory=list)
    available: bool = True
    error: str | None = None


class LiveDirectory(ABC):
    """Where live clusters are found. Implementations are thread-safe."""

    @abstractmethod
    def list_clusters(self) -> LiveListing:
        """Every live cluster; never raises (errors go into the listing)."""

    @abstractmethod
    def get(self, namespace: str, name: str) -> LiveCluster | None:
        """The RayCluster ``namespace/name``; ``None`` if it does not exist.

        Raises LiveDiscoveryError when the source fails (anything but "not found").
        """

    @abstractmethod
    def find_for_owner(self, namespace: str, kind: str, name: str) -> LiveCluster | None:
        """The live RayCluster of a ``raycluster``/``rayjob``/``rayservice`` by name.

        Raises LiveDiscoveryError when the source fails; ValueError for an unknown kind.
        """

    #: Reads Ray auth tokens for the clusters this directory finds (None: cannot).
    token_source: TokenSource | None = None

    def auth_token(self, cluster: LiveCluster, caller_kubernetes_token: str | None = None) -> str | None:
        """The token to send to ``cluster``, None when it has no Ray token auth.

        A cluster with Kubernetes-delegated auth checks the token itself with the API
        server (TokenReview, then a SubjectAccessReview on the RayCluster): it gets the
        caller's own Kubernetes token, already verified by this server, and never the
        server's (a Ray head runs user code, which must not obtain the server's identity).

        Raises LiveAuthError when it has and the token cannot be read: the caller
        must then not send the request at all.
        """
        auth = cluster.token_auth
        if auth is None:
            return None
        if auth.kubernetes_delegated:
            if caller_kubernetes_token:
                return caller_kubernetes_token
            raise LiveAuthError(
                f"RayCluster {cluster.key} uses Kubernetes-delegated token auth "
                "(authOptions.enableK8sTokenAuth): Ray checks the caller's own Kubernetes token, so call with "
                "Authorization: Bearer <Kubernetes token> (ray-history --token, kubectl create token)"
            )
        if self.token_source is None:
            raise LiveAuthError(
                f"RayCluster {cluster.key} uses Ray token auth, but no Kubernetes API can read Secret {auth.secret}"
            )
        return self.token_source.token(auth)

    def describe(self) -> str:
        return type(self).__name__

    def close(self) -> None:  # noqa: B027 - optional hook, most directories hold nothing
        """Release connections (called at shutdown)."""


def normalise_kind(kind: str) -> str:
    lowered = (kind or "").strip().lower()
    if lowered not in CLUSTER_KINDS:
        raise ValueError(f"unsupported resource kind: {kind!r} (must be raycluster, rayjob, or rayservice)")
    return lowered


class NoLiveDirectory(LiveDirectory):
    """No live clusters at all (``--kubernetes=off`` and no ``--live-cluster``)."""

    def list_clusters(self) -> LiveListing:
        return LiveListing([])

    def get(self, namespace: str, name: str) -> LiveCluster | None:
        return None

    def find_for_owner(self, namespace: str, kind: str, name: str) -> LiveCluster | None:
        normalise_kind(kind)
        return None

    def describe(self) -> str:
        return "none"


class UnavailableLiveDirectory(NoLiveDirectory):
    """Kubernetes was expected (``--kubernetes=auto`` inside a pod) but its client
    could not be configured, e.g. no service-account token is mounted. Listings say
    so; lookups find nothing, so stored sessions keep working."""

    def __init__(self, error: str) -> None:
        self.error = error

    def list_clusters(self) -> LiveListing:
        return LiveListing([], available=False, error=self.error)

    def describe(self) -> str:
        return f"unavailable ({self.error})"


class StaticLiveDirectory(LiveDirectory):
    """Live clusters given on the command line (``--live-cluster [ns/]name=URL``).

    Outside Kubernetes (local demo, tests) this stands in for the RayCluster API.
    They are bare RayClusters, "created" when the server started.
    """

    def __init__(self, entries: Iterable[LiveClusterURL], *, created_at: datetime | None = None) -> None:
        created = created_at or datetime.now(UTC).replace(microsecond=0)
        self._clusters: dict[tuple[str, str], LiveCluster] = {}
        for entry in entries:
            self._clusters[(entry.namespace, entry.name)] = LiveCluster(
                namespace=entry.namespace,
                name=entry.name,
                owner_kind=RAYCLUSTER,
                owner_name="",
                created_at=created,
                base_url=entry.url.rstrip("/"),
            )

    def list_clusters(self) -> LiveListing:
        return LiveListing(list(self._clusters.values()))

    def get(self, namespace: str, name: str) -> LiveCluster | None:
        return self._clusters.get((namespace, name))

    def find_for_owner(self, namespace: str, kind: str, name: str) -> LiveCluster | None:
        if normalise_kind(kind) == RAYCLUSTER:
            return self.get(namespace, name)
        return None  # static entries carry no owner labels

    def describe(self) -> str:
        return "static (" + ", ".join(f"{c.key}={c.base_url}" for c in self._clusters.values()) + ")"


class CombinedLiveDirectory(LiveDirectory):
    """Several sources, asked in order (static entries before Kubernetes)."""

    def __init__(self, parts: Sequence[LiveDirectory]) -> None:
        self.parts = list(parts)
        # Only the Kubernetes part reads Secrets; static entries have no token auth.
        self.token_source = next((p.token_source for p in self.parts if p.token_source is not None), None)

    def list_clusters(self) -> LiveListing:
        clusters: list[LiveCluster] = []
        seen: set[str] = set()
        errors: list[str] = []
        for part in self.parts:
            listing = part.list_clusters()
            if not listing.available:
                errors.append(f"{part.describe()}: {listing.error}")
            for cluster in listing.clusters:
                if cluster.key not in seen:
                    seen.add(cluster.key)
                    clusters.append(cluster)
        return LiveListing(clusters, available=not errors, error="; ".join(errors) or None)

    def get(self, namespace: str, name: str) -> LiveCluster | None:
        for part in self.parts:
            found = part.get(namespace, name)
            if found is not None:
                return found
        return None

    def find_for_owner(self, namespace: str, kind: str, name: str) -> LiveCluster | None:
        for part in self.parts:
            found = part.find_for_owner(namespace, kind, name)
            if found is not None:
                return found
        return None

    def describe(self) -> str:
        return " + ".join(part.describe() for part in self.parts)

    def close(self) -> None:
        for part in self.parts:
            part.close()
