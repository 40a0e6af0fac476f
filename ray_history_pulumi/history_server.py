"""The history server on Kubernetes: namespace, identity, RBAC, Deployment, Service, Ingress.

Cloud-neutral: the bucket, its environment and the cloud identity arrive in a
:class:`~ray_history_pulumi.contracts.StorageWiring` from a storage component.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from ray_history_pulumi import server_exposure, server_replicas
from ray_history_pulumi.cloud_ingress import plan_ingress
from ray_history_pulumi.contracts import SERVER_SERVICE_ACCOUNT
from ray_history_pulumi.history_server_args import (
    CACHE_DIR,
    CONTAINER_PORT,
    DASHBOARD_DIR,
    DEFAULT_SERVER_RESOURCES,
    POLICY_CONFIG_MAP,
    SERVICE_NAME,
    SERVICE_PORT,
    TMP_SIZE,
    HistoryServerArgs,
    container_env,
    quantity_bytes,
)
from ray_history_pulumi.pod_security import restricted_container_security, restricted_pod_security
from ray_history_pulumi.server_access import REVIEW_RULES
from ray_history_pulumi.storage_common import server_shared_index_env

__all__ = [
    "CACHE_DIR",
    "CONTAINER_PORT",
    "DASHBOARD_DIR",
    "DEFAULT_SERVER_RESOURCES",
    "POLICY_CONFIG_MAP",
    "SERVICE_NAME",
    "SERVICE_PORT",
    "HistoryServerArgs",
    "HistoryServerK8s",
    "container_env",
    "quantity_bytes",
]


class HistoryServerK8s(pulumi.ComponentResource):
    """The Ray History Server in one namespace: ServiceAccount ``ray-history-server``
    (cloud identity from ``wiring.server``), ClusterRole ``raycluster-reader`` (list/get
    RayClusters) + binding, a hardened Deployment, Service ``historyserver``
    (30080 -> 8080) and an optional Ingress.

    Example::

        storage = GcsHistoryStorage(...)                 # any storage component
        server = HistoryServerK8s(
            "history",
            HistoryServerArgs(
                image="us-docker.pkg.dev/p/ray-history/server:0.1.0",
                wiring=storage.wiring,
                namespace="ray-history",
                ingress=HistoryServerIngress(host="ray-history.example.com", class_name="nginx",
                                             tls_secret_name="ray-history-tls"),
            ),
            opts=pulumi.ResourceOptions(provider=k8s_provider),
        )
        pulumi.export("historyServerUrl", server.url)
    """

    namespace: pulumi.Output[str]
    service_account_name: pulumi.Output[str]
    service_name: pulumi.Output[str]
    url: pulumi.Output[str]

    def __init__(self, name: str, args: HistoryServerArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("rayhistory:k8s:HistoryServer", name, None, opts)
        args.validate()
        ns = args.namespace
        labels = {
            "app.kubernetes.io/name": "ray-history-server",
            "app.kubernetes.io/component": "historyserver",
            "app.kubernetes.io/part-of": "ray-history",
        }
        child = pulumi.ResourceOptions(parent=self)
        depends: list[pulumi.Resource] = []
        if args.create_namespace:
            namespace = k8s.core.v1.Namespace(
                f"{name}-ns",
                metadata={
                    "name": ns,
                    # The pod below meets the "restricted" Pod Security Standard.
                    "labels": {**labels, "pod-security.kubernetes.io/enforce": "restricted"},
                },
                opts=child,
            )
            depends.append(namespace)
        in_ns = pulumi.ResourceOptions(parent=self, depends_on=depends)

        account = k8s.core.v1.ServiceAccount(
            f"{name}-sa",
            metadata={
                "name": SERVER_SERVICE_ACCOUNT,
                "namespace": ns,
                "labels": labels,
                "annotations": args.wiring.server.service_account_annotations,
            },
            opts=in_ns,
        )
        role = k8s.rbac.v1.ClusterRole(
            f"{name}-reader",
            metadata={"name": args.cluster_role_name, "labels": labels, "annotations": args.cluster_role_annotations},
            # Live-cluster discovery, and the reviews of kubernetes access control: no watch, no secrets.
            rules=[
                {"api_groups": ["ray.io"], "resources": ["rayclusters"], "verbs": ["list", "get"]},
                *(REVIEW_RULES if args.access is not None and args.access.uses_kubernetes else []),
            ],
            opts=child,
        )
        k8s.rbac.v1.ClusterRoleBinding(
            f"{name}-reader-binding",
            metadata={"name": f"{args.cluster_role_name}-{ns}-{SERVER_SERVICE_ACCOUNT}", "labels": labels},
            role_ref={"api_group": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": args.cluster_role_name},
            subjects=[{"kind": "ServiceAccount", "name": SERVER_SERVICE_ACCOUNT, "namespace": ns}],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[role, account]),
        )

        plan = (
            plan_ingress(args.ingress, name=SERVICE_NAME, namespace=ns, port=CONTAINER_PORT)
            if args.ingress is not None
            else None
        )
        access_objects = server_exposure.access_objects(
            name,
            args.access,
            plan,
            service_name=SERVICE_NAME,
            port=CONTAINER_PORT,
            namespace=ns,
            labels=labels,
            opts=in_ns,
            front_door_cidrs=args.front_door_cidrs,
        )
        # The Service and the Ingress name these: the controller rejects what it cannot find yet.
        door = server_exposure.front_door_objects(name, plan, labels=labels, opts=in_ns) if plan else []
        env = pulumi.Output.all(
            pulumi.Output.from_input(args.wiring.env),
            pulumi.Output.from_input(args.wiring.server.env),
            pulumi.Output.all(**server_shared_index_env(args.wiring, args.shared_index_mode())),
            pulumi.Output.all(**args.metrics_env),  # managed metrics on EKS: the URL names the workspace
        ).apply(
            lambda parts: container_env(
                {**dict(parts[0] or {}), **dict(parts[2]), **dict(parts[3])},
                dict(parts[1] or {}),
                args.wiring.secret_env,
            )
        )
        deployment = k8s.apps.v1.Deployment(
            f"{name}-deployment",
            metadata={"name": SERVICE_NAME, "namespace": ns, "labels": labels},
            spec={
                "replicas": args.replicas,
                "selector": {"match_labels": labels},
                "template": {
                    "metadata": {"labels": {**labels, **args.wiring.server.pod_labels}},
                    "spec": {**self._pod_spec(args, env), **server_replicas.pod_spreading(args.replicas, labels)},
                },
            },
            # The pod's credentials work only once the cloud side of its identity exists.
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=[*depends, account, *args.wiring.server.ready, *args.image_ready, *access_objects],
            ),
        )
        server_replicas.disruption_budget(name, args.replicas, namespace=ns, labels=labels, opts=in_ns)
        service = k8s.core.v1.Service(
            f"{name}-service",
            metadata={
                "name": SERVICE_NAME,
                "namespace": ns,
                "labels": labels,
                "annotations": plan.service_annotations if plan else {},
            },
            spec={
                "type": "ClusterIP",
                "selector": labels,
                "ports": [{"name": "http", "protocol": "TCP", "port": SERVICE_PORT, "target_port": CONTAINER_PORT}],
            },
            opts=pulumi.ResourceOptions(parent=self, depends_on=[*depends, *door]),
        )
        if args.ingress is not None and plan is not None:
            server_exposure.ingress(
                name,
                args.ingress,
                plan,
                service_name=SERVICE_NAME,
                service_port=SERVICE_PORT,
                namespace=ns,
                labels=labels,
                parent=self,
                depends_on=[service, *door],
            )

        self.namespace = pulumi.Output.from_input(ns)
        self.service_account_name = account.metadata.apply(lambda m: m.name)
        self.service_name = service.metadata.apply(lambda m: m.name)
        self.url = pulumi.Output.concat("http://", self.service_name, ".", ns, ".svc.cluster.local:", str(SERVICE_PORT))
        self.deployment = deployment
        self.register_outputs({"namespace": self.namespace, "serviceName": self.service_name, "url": self.url})

    @staticmethod
    def _pod_spec(args: HistoryServerArgs, env: pulumi.Output[list[dict[str, Any]]]) -> dict[str, Any]:
        access_volumes, access_mounts = args.access.volumes(POLICY_CONFIG_MAP) if args.access else ([], [])

        def probe(path: str, period: int, failures: int) -> dict[str, Any]:
            # 10 s timeouts: a CPU-throttled pod busy with a cold index build still
            # answers, just slowly; gthread serves probes from their own thread.
            return {
                "http_get": {"path": path, "port": "http"},
                "period_seconds": period,
                "timeout_seconds": 10,
                "failure_threshold": failures,
            }

        return {
            "service_account_name": SERVER_SERVICE_ACCOUNT,
            "automount_service_account_token": True,  # RayCluster discovery uses the API
            "termination_grace_period_seconds": 30,  # gunicorn's graceful timeout is 25 s
            "security_context": restricted_pod_security(),
            **({"node_selector": dict(args.node_selector)} if args.node_selector else {}),
            "containers": [
                {
                    "name": "historyserver",
                    "image": args.image,
                    "image_pull_policy": args.image_pull_policy,
                    "command": ["historyserver"],
                    "args": args.server_args(),
                    "env": env,
                    "ports": [{"name": "http", "container_port": CONTAINER_PORT, "protocol": "TCP"}],
                    # Start-up checks storage once (retries up to ~30 s): allow 5 min.
                    "startup_probe": probe("/livez", 5, 60),
                    # Killed only after 2 min without an answer.
                    "liveness_probe": probe("/livez", 20, 6),
                    "readiness_probe": probe("/readz", 10, 3),
                    "resources": args.container_resources(),
                    "security_context": restricted_container_security(),
                    "volume_mounts": [
                        {"name": "cache", "mount_path": CACHE_DIR},
                        {"name": "tmp", "mount_path": "/tmp"},  # noqa: S108 - an emptyDir
                        {"name": "shm", "mount_path": "/dev/shm"},  # noqa: S108 - gunicorn worker heartbeats
                        *access_mounts,
                    ],
                }
            ],
            "volumes": [
                args.cache_volume(),
                {"name": "tmp", "empty_dir": {"size_limit": TMP_SIZE}},
                # Memory-backed: counts against the memory limit, so keep it small.
                {"name": "shm", "empty_dir": {"medium": "Memory", "size_limit": "64Mi"}},
                *access_volumes,
            ],
        }
