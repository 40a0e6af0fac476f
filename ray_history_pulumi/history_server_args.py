"""Arguments of the history server's Kubernetes component (:mod:`ray_history_pulumi.history_server`):
:class:`HistoryServerArgs`, the pod's sizes and paths, and the container environment."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi

from ray_history_pulumi import server_exposure
from ray_history_pulumi.cloud_ingress import HistoryServerIngress
from ray_history_pulumi.contracts import StorageWiring
from ray_history_pulumi.server_access import ServerAccess
from ray_history_pulumi.storage_common import check_server_shared_index
from runtime.common.quantities import parse_quantity

SERVICE_NAME = "historyserver"
#: The ConfigMap holding the ``static`` authorization policy.
POLICY_CONFIG_MAP = server_exposure.POLICY_CONFIG_MAP
SERVICE_PORT = 30080  # as upstream's manifests and the GKE guide
CONTAINER_PORT = 8080
CACHE_DIR = "/var/cache/historyserver"
#: Where images/server/Dockerfile puts the Ray Dashboard build.
DASHBOARD_DIR = "/opt/ray-dashboard"
#: Share of the cache volume the server may fill before evicting indexes; the rest
#: is slack so the kubelet never evicts the pod for exceeding sizeLimit.
CACHE_FILL_RATIO = 0.8
TMP_SIZE = "1Gi"
#: Container logs and the writable layer count against ephemeral storage too.
LOG_ALLOWANCE_BYTES = 512 * 2**20

#: Cold loads build a session's SQLite index (parse every event file and list every
#: log object): CPU-bound, one build per request thread. One guaranteed CPU keeps a
#: build inside --build-timeout; the 2-CPU limit lets other requests be served while a
#: build runs. A large build forks one parse process per CPU of the limit (the server
#: reads the cgroup quota, not the node's cores); each replays a sixteenth of the
#: session at a time: a 1,000,000-task build measured 0.65 GiB (builder 0.35 + 2 x 0.3)
#: beside the server's ~0.1. 3 Gi leaves room for ten times bigger sessions or more
#: CPUs (~1.5 KB per attempt of a sixteenth, per CPU), 1 Gi is requested.
DEFAULT_SERVER_RESOURCES: dict[str, dict[str, str]] = {
    "requests": {"cpu": "1", "memory": "1Gi"},
    "limits": {"cpu": "2", "memory": "3Gi"},
}


def quantity_bytes(text: str, parameter: str) -> int:
    """Bytes in a positive Kubernetes quantity (``20Gi``, ``500M``), read by the
    history server's own parser, so the program accepts the sizes ``--cache-max-size`` does."""
    try:
        value = parse_quantity(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise ValueError(f"{parameter}: {text!r} is not a size like 20Gi or 500Mi")
    return value


@dataclass
class HistoryServerArgs:
    """Arguments of :class:`HistoryServerK8s`.

    Attributes:
        image: server image (``images/server/Dockerfile``); an Output when the stack
            builds it (then pinned to its digest).
        wiring: what the storage component hands over (env, identity, secrets).
        namespace: where the server runs.
        create_namespace: create it (False: it exists already).
        replicas: server pods, each with its own index cache volume; two or more add a
            PodDisruptionBudget (one pod evicted at a time) and spread the pods over nodes
            and zones (preferred).
        cache_size_limit: size of the index cache: the emptyDir's ``sizeLimit``, or the PVC's
            request with ``cache_storage_class``.
        cache_storage_class: None = an ``emptyDir``, requested (and limited) as the pod's
            ``ephemeral-storage`` so the scheduler reserves it and GKE Autopilot (which
            defaults ephemeral storage small and allows at most 10Gi per pod) does not evict
            the pod; a StorageClass name = a generic ephemeral volume (a PVC made and deleted
            with the pod) for caches larger than the node's ephemeral storage.
        resources: requests and limits of the server container.
        image_pull_policy: Kubernetes pull policy.
        extra_args: more ``historyserver`` flags (e.g. ``--log-format=json``).
        ingress: optional Ingress.
        cluster_role_name: the ClusterRole reading RayClusters (cluster-scoped: one per cluster).
        cluster_role_annotations: annotations of the ClusterRole (the program records the
            owning stack there, see ``infra/cluster_checks.py``).
        image_ready: what must exist before nodes can pull ``image`` (its build and push, the
            registry's pull grant): the Deployment waits for them, or its first pods sit in
            ImagePullBackOff and the Deployment's readiness wait can time out.
        shared_index: the server's ``--shared-index`` (``off``, ``read``, ``write``), passed as
            ``SHARED_INDEX`` (with ``SHARED_INDEX_CONTAINER`` on Azure); None = what the storage
            grants (``wiring.shared_index``). More than the storage grants is an error.
        metrics_env: the server's metrics settings (``PROMETHEUS_URL``, ``GRAFANA_URL``, ...),
            :attr:`~ray_history_pulumi.metrics.RayMetrics.server_env`; empty = none.
        front_door_cidrs: where the front door's traffic comes from besides what its flavour
            knows (an ALB sending to pod IPs: the VPC's CIDR blocks), admitted by the
            NetworkPolicy of ``access.ingress_from``; None = nothing more.
        node_selector: the pods' ``nodeSelector`` (e.g. ``kubernetes.io/arch: amd64`` for a
            single-architecture image); empty = none.
    """

    image: pulumi.Input[str]
    wiring: StorageWiring
    namespace: str = "ray-history"
    create_namespace: bool = True
    replicas: int = 1
    cache_size_limit: str = "8Gi"
    cache_storage_class: str | None = None
    resources: dict[str, dict[str, str]] = field(default_factory=lambda: DEFAULT_SERVER_RESOURCES)
    image_pull_policy: str = "IfNotPresent"
    extra_args: list[str] = field(default_factory=list)
    ingress: HistoryServerIngress | None = None
    #: None: the server's own default (``--auth none``), for a server nobody else reaches.
    access: ServerAccess | None = None
    cluster_role_name: str = "raycluster-reader"
    image_ready: list[pulumi.Resource] = field(default_factory=list)
    cluster_role_annotations: pulumi.Input[dict[str, str]] = field(default_factory=dict)
    shared_index: str | None = None
    metrics_env: dict[str, pulumi.Input[str]] = field(default_factory=dict)
    front_door_cidrs: pulumi.Input[Sequence[str]] | None = None
    node_selector: dict[str, str] = field(default_factory=dict)

    def validate(self) -> None:
        if isinstance(self.image, str) and not self.image.strip():
            raise ValueError("image: the history server image is required")
        if self.replicas < 1:
            raise ValueError(f"replicas: must be at least 1, got {self.replicas}")
        quantity_bytes(self.cache_size_limit, "cache_size_limit")
        for part in ("requests", "limits"):
            if not self.resources.get(part):
                raise ValueError(f"resources: '{part}' is required")
        if self.wiring.backend not in ("gcs", "s3", "azureblob", "local"):
            raise ValueError(f"wiring.backend: {self.wiring.backend!r} is not gcs, s3, azureblob or local")
        if self.ingress is not None:
            self.ingress.validate()
        if self.access is not None:
            self.access.validate()
        check_server_shared_index(self.wiring, self.shared_index_mode())

    def shared_index_mode(self) -> str:
        """The server's ``--shared-index``: ``shared_index`` or what the storage grants."""
        return self.shared_index if self.shared_index is not None else self.wiring.shared_index

    def container_resources(self) -> dict[str, dict[str, str]]:
        """``resources`` plus ``ephemeral-storage`` (request = limit) for every local write of the pod."""
        local = quantity_bytes(TMP_SIZE, "tmp") + LOG_ALLOWANCE_BYTES
        if self.cache_storage_class is None:
            local += quantity_bytes(self.cache_size_limit, "cache_size_limit")
        ephemeral = f"{-(-local // 2**20)}Mi"
        return {part: {"ephemeral-storage": ephemeral, **values} for part, values in self.resources.items()}

    def cache_volume(self) -> dict[str, Any]:
        """The index cache: an emptyDir, or a generic ephemeral volume of ``cache_storage_class``."""
        if self.cache_storage_class is None:
            return {"name": "cache", "empty_dir": {"size_limit": self.cache_size_limit}}
        claim = {
            "access_modes": ["ReadWriteOnce"],
            "storage_class_name": self.cache_storage_class,
            "resources": {"requests": {"storage": self.cache_size_limit}},
        }
        return {"name": "cache", "ephemeral": {"volume_claim_template": {"spec": claim}}}

    def server_args(self) -> list[Any]:
        cache_max = int(quantity_bytes(self.cache_size_limit, "cache_size_limit") * CACHE_FILL_RATIO) // 2**20
        return [
            f"--storage-backend={self.wiring.backend}",
            "--port",
            str(CONTAINER_PORT),
            "--cache-dir",
            CACHE_DIR,
            f"--cache-max-size={cache_max}Mi",
            f"--dashboard-dir={DASHBOARD_DIR}",
            # Behind a TLS ingress the browser sees HTTPS: cookies may be Secure.
            *(["--secure-cookies"] if self.ingress is not None and self.ingress.https else []),
            # The server answers only Host names it knows (DNS rebinding): add the Ingress's.
            *([f"--allowed-hosts={self.ingress.host}"] if self.ingress is not None else []),
            *(self.access.server_args() if self.access is not None else []),
            *self.extra_args,
        ]


def container_env(
    storage_env: dict[str, str], identity_env: dict[str, str], secret_env: dict[str, tuple[str, str]]
) -> list[dict[str, Any]]:
    """Plain values first (storage, then identity), then secret references."""
    plain = {**storage_env, **identity_env}
    overlap = sorted(set(plain) & set(secret_env))
    if overlap:
        raise ValueError(f"wiring.secret_env: {overlap} also set as plain values")
    env: list[dict[str, Any]] = [{"name": k, "value": str(v)} for k, v in plain.items()]
    env += [
        {"name": k, "value_from": {"secret_key_ref": {"name": secret, "key": key}}}
        for k, (secret, key) in secret_env.items()
    ]
    return env
