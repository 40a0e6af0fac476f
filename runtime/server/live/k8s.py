"""Live RayClusters through the Kubernetes API (the official ``kubernetes`` client).

Only ``get`` and ``list`` on ``rayclusters.ray.io`` are used: exactly what the
ClusterRole ``raycluster-reader`` grants (the reference's RBAC) -- plus, for
clusters with Ray token auth only, ``get`` on ``secrets`` in their namespaces
(:mod:`runtime.server.live.tokens`; a Role per workload namespace). The dashboard
URL is ``http://{status.head.serviceName}.{namespace}.svc.{cluster_domain}:{port}``
-- namespace-qualified, unlike the reference, whose bare service name only
resolves for clusters in the server's own namespace -- with the port named
``dashboard`` on the head pod template's first container (default 8265).

Lookups are cached for a few seconds (the reference caches 30 s): the Dashboard
fires ~10 requests per page and each would otherwise cost an API round trip.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import urllib3
from kubernetes import client as kclient
from kubernetes.client.exceptions import ApiException

from runtime.server.live.discovery import (
    LiveCluster,
    LiveDirectory,
    LiveDiscoveryError,
    LiveListing,
    normalise_kind,
)
from runtime.server.live.tokens import SecretTokenSource, token_auth_from_spec
from runtime.storage.errors import InvalidKeyError
from runtime.storage.layout import OWNER_KINDS, RAYCLUSTER, validate_k8s_name, validate_namespace

logger = logging.getLogger(__name__)

GROUP, VERSION, PLURAL = "ray.io", "v1", "rayclusters"
LABEL_CR_NAME = "ray.io/originated-from-cr-name"
LABEL_CRD = "ray.io/originated-from-crd"
CRD_OF_KIND = {"rayjob": "RayJob", "rayservice": "RayService"}
DEFAULT_DASHBOARD_PORT = 8265
#: (connect, read) seconds per API call: a dead API server must not hang requests.
REQUEST_TIMEOUT = (3.05, 10.0)
CACHE_TTL = 5.0
CACHE_ENTRIES = 1024
PAGE_SIZE = 500
RBAC_HINT = "the service account needs ClusterRole raycluster-reader (get, list on rayclusters.ray.io)"


def kubernetes_api_client(mode: str, kubeconfig: str | None = None) -> kclient.ApiClient:
    """An API client for ``in-cluster`` (service account) or ``kubeconfig`` mode.

    Raises LiveDiscoveryError naming the mode when the configuration cannot load.
    """
    from kubernetes import config as kconfig

    configuration = kclient.Configuration()
    try:
        if mode == "in-cluster":
            kconfig.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        elif mode == "kubeconfig":
            kconfig.load_kube_config(config_file=kubeconfig, client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            raise LiveDiscoveryError(f"unknown Kubernetes mode {mode!r}")
    except (kconfig.ConfigException, OSError, TypeError, ValueError) as exc:
        where = f"--kubeconfig={kubeconfig}" if kubeconfig else f"--kubernetes={mode}"
        raise LiveDiscoveryError(f"{where}: cannot configure the Kubernetes client: {exc}") from exc
    # One retry for a dropped connection; the request timeout bounds the rest.
    configuration.retries = 1
    return kclient.ApiClient(configuration)


def parse_k8s_time(value: object) -> datetime:
    """A metadata timestamp (RFC 3339, ``...Z``) as an aware UTC datetime."""
    if isinstance(value, str) and value:
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            pass
        else:
            return parsed.astimezone(UTC) if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return datetime.fromtimestamp(0, UTC)


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def controller_owner(metadata: Mapping[str, Any]) -> tuple[str, str]:
    """``(kind, name)`` of the controlling RayJob/RayService, else ``("raycluster", "")``."""
    for item in metadata.get("ownerReferences") or []:
        ref = _mapping(item)
        if not ref.get("controller"):
            continue
        kind = str(ref.get("kind", "")).lower()
        name = str(ref.get("name", ""))
        if kind in OWNER_KINDS and name:
            try:
                return kind, validate_k8s_name(name, "owner name")
            except InvalidKeyError:
                logger.warning("ignoring owner %s/%s of %s: invalid name", kind, name, metadata.get("name"))
        elif kind != RAYCLUSTER:
            logger.debug("RayCluster %s is controlled by a %s; shown without owner", metadata.get("name"), kind)
    return RAYCLUSTER, ""


def dashboard_port(obj: Mapping[str, Any]) -> int:
    """The containerPort named ``dashboard`` on the head template's first container."""
    spec = _mapping(_mapping(_mapping(obj.get("spec")).get("headGroupSpec")).get("template")).get("spec")
    containers = _mapping(spec).get("containers") or []
    if containers:
        for item in _mapping(containers[0]).get("ports") or []:
            port = _mapping(item)
            number = port.get("containerPort")
            if port.get("name") == "dashboard" and isinstance(number, int) and 0 < number < 65536:
                return number
    return DEFAULT_DASHBOARD_PORT


def cluster_from_object(obj: Mapping[str, Any], cluster_domain: str) -> LiveCluster | None:
    """A RayCluster object as a :class:`LiveCluster` (``None`` if it is malformed)."""
    metadata = _mapping(obj.get("metadata"))
    namespace, name = str(metadata.get("namespace", "")), str(metadata.get("name", ""))
    try:
        validate_namespace(namespace)
        validate_k8s_name(name)
    except InvalidKeyError as exc:
        logger.warning("skipping RayCluster with unusable identity: %s", exc)
        return None
    owner_kind, owner_name = controller_owner(metadata)
    service = str(_mapping(_mapping(obj.get("status")).get("head")).get("serviceName") or "")
    base_url = ""
    if service:
        try:
            # The status is written by the operator, but the host part of a URL is
            # built from it: accept a DNS label only.
            validate_namespace(service)
        except InvalidKeyError:
            logger.warning("RayCluster %s/%s: ignoring head service name %r", namespace, name, service)
        else:
            host = f"{service}.{namespace}.svc" + (f".{cluster_domain}" if cluster_domain else "")
            base_url = f"http://{host}:{dashboard_port(obj)}"
    return LiveCluster(
        namespace=namespace,
        name=name,
        owner_kind=owner_kind,
        owner_name=owner_name,
        created_at=parse_k8s_time(metadata.get("creationTimestamp")),
        base_url=base_url,
        token_auth=token_auth_from_spec(namespace, name, _mapping(obj.get("spec"))),
    )


def _pick_for_owner(candidates: list[LiveCluster]) -> LiveCluster:
    """A RayService mid-upgrade has two clusters (the reference takes the first the
    API returns). Prefer one whose head service exists, then the older one: it is
    the one serving until KubeRay switches over and deletes it."""
    return sorted(candidates, key=lambda c: (not c.ready, c.created_at, c.name))[0]


class _TTLCache:
    """A small thread-safe LRU with per-entry expiry."""

    def __init__(self, ttl: float, entries: int, clock: Callable[[], float]) -> None:
        self.ttl, self.entries, self.clock = ttl, entries, clock
        self._data: OrderedDict[object, tuple[float, object]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: object) -> tuple[bool, object]:
        with self._lock:
            found = self._data.get(key)
            if found is None or found[0] <= self.clock():
                self._data.pop(key, None)
                return False, None
            self._data.move_to_end(key)
            return True, found[1]

    def put(self, key: object, value: object) -> None:
        if self.ttl <= 0:
            return
        with self._lock:
            self._data[key] = (self.clock() + self.ttl, value)
            self._data.move_to_end(key)
            while len(self._data) > self.entries:
                self._data.popitem(last=False)


class KubernetesLiveDirectory(LiveDirectory):
    """RayClusters from the API server (``ray.io/v1``, any namespace)."""

    def __init__(
        self,
        api_client: kclient.ApiClient,
        *,
        cluster_domain: str = "cluster.local",
        cache_ttl: float = CACHE_TTL,
        request_timeout: tuple[float, float] = REQUEST_TIMEOUT,
        page_size: int = PAGE_SIZE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api_client = api_client
        self.api = kclient.CustomObjectsApi(api_client)
        self.cluster_domain = cluster_domain.strip(".")
        self.request_timeout = request_timeout
        self.page_size = page_size
        self._cache = _TTLCache(cache_ttl, CACHE_ENTRIES, clock)
        # Ray auth tokens of token-auth clusters: get on secrets, per namespace.
        self.token_source = SecretTokenSource(api_client, request_timeout=request_timeout, clock=clock)

    def describe(self) -> str:
        return f"kubernetes ({self.api_client.configuration.host})"

    def close(self) -> None:
        self.api_client.close()  # type: ignore[no-untyped-call]

    # ------------------------------------------------------------ lookups
    def list_clusters(self) -> LiveListing:
        hit, cached = self._cache.get("list")
        if hit and isinstance(cached, LiveListing):
            return cached
        try:
            clusters = self._list(None, None)
            listing = LiveListing(clusters)
        except LiveDiscoveryError as exc:
            logger.warning("cannot list live RayClusters: %s", exc)
            # Cached too: an unreachable API must not cost every /clusters a timeout.
            listing = LiveListing([], available=False, error=str(exc))
        self._cache.put("list", listing)
        for cluster in listing.clusters:
            self._cache.put(("get", cluster.namespace, cluster.name), cluster)
        return listing

    def get(self, namespace: str, name: str) -> LiveCluster | None:
        key = ("get", namespace, name)
        hit, cached = self._cache.get(key)
        if hit:
            return cached if isinstance(cached, LiveCluster) else None
        what = f"get RayCluster {namespace}/{name}"
        try:
            obj = self.api.get_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name, _request_timeout=self.request_timeout
            )
        except ApiException as exc:
            if exc.status == 404:
                self._cache.put(key, None)
                return None
            raise _api_error(what, exc) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise LiveDiscoveryError(f"{what}: Kubernetes API unreachable: {exc}") from exc
        found = cluster_from_object(_mapping(obj), self.cluster_domain)
        self._cache.put(key, found)
        return found

    def find_for_owner(self, namespace: str, kind: str, name: str) -> LiveCluster | None:
        kind = normalise_kind(kind)
        if kind == RAYCLUSTER:
            return self.get(namespace, name)
        key = ("owner", namespace, kind, name)
        hit, cached = self._cache.get(key)
        if hit:
            return cached if isinstance(cached, LiveCluster) else None
        # Both labels: a RayJob and a RayService may share a name.
        selector = f"{LABEL_CR_NAME}={name},{LABEL_CRD}={CRD_OF_KIND[kind]}"
        candidates = self._list(namespace, selector)
        found = None
        if candidates:
            found = _pick_for_owner(candidates)
            if found.owner_kind == RAYCLUSTER:  # labelled but no controller reference
                found = dataclasses.replace(found, owner_kind=kind, owner_name=name)
        self._cache.put(key, found)
        return found

    # ------------------------------------------------------------ API calls
    def _list(self, namespace: str | None, selector: str | None) -> list[LiveCluster]:
        what = f"list RayClusters in {namespace}" if namespace else "list RayClusters"
        clusters: list[LiveCluster] = []
        token: str | None = None
        while True:
            try:
                if namespace is None:
                    page = self.api.list_cluster_custom_object(
                        GROUP, VERSION, PLURAL, limit=self.page_size, _continue=token,
                        label_selector=selector, _request_timeout=self.request_timeout,
                    )  # fmt: skip
                else:
                    page = self.api.list_namespaced_custom_object(
                        GROUP, VERSION, namespace, PLURAL, limit=self.page_size, _continue=token,
                        label_selector=selector, _request_timeout=self.request_timeout,
                    )  # fmt: skip
            except ApiException as exc:
                raise _api_error(what, exc) from exc
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                raise LiveDiscoveryError(f"{what}: Kubernetes API unreachable: {exc}") from exc
            body = _mapping(page)
            for item in body.get("items") or []:
                found = cluster_from_object(_mapping(item), self.cluster_domain)
                if found is not None:
                    clusters.append(found)
            token = str(_mapping(body.get("metadata")).get("continue") or "") or None
            if token is None:
                return clusters


def _api_error(what: str, exc: ApiException) -> LiveDiscoveryError:
    status = exc.status
    if status in (401, 403):
        return LiveDiscoveryError(f"{what}: Kubernetes API answered {status} {exc.reason}: {RBAC_HINT}")
    if status == 404:
        return LiveDiscoveryError(f"{what}: not found (is the KubeRay CRD ray.io/v1 RayCluster installed?)")
    return LiveDiscoveryError(f"{what}: Kubernetes API answered {status} {exc.reason}")
