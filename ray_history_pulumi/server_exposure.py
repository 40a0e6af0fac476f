"""How the history server is reached: its NetworkPolicy, the front door's objects, the Ingress.

Split from :mod:`ray_history_pulumi.history_server` (the workload); the decisions are pure in
:mod:`ray_history_pulumi.cloud_ingress` and :mod:`ray_history_pulumi.server_access`, this module
only creates what they say.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from ray_history_pulumi.cloud_ingress import HistoryServerIngress, IngressPlan
from ray_history_pulumi.server_access import ServerAccess

#: The ConfigMap holding the ``static`` authorization policy.
POLICY_CONFIG_MAP = "historyserver-authz-policy"


def access_objects(
    name: str,
    access: ServerAccess | None,
    plan: IngressPlan | None,
    *,
    service_name: str,
    port: int,
    namespace: str,
    labels: dict[str, str],
    opts: pulumi.ResourceOptions,
    front_door_cidrs: pulumi.Input[Sequence[str]] | None = None,
) -> list[pulumi.Resource]:
    """The ``static`` policy's ConfigMap and, with ``access.ingress_from``, the NetworkPolicy.

    The NetworkPolicy also admits the front door's own sources: a policy naming only the
    ingress controller's namespace would cut off GKE's load balancer, whose traffic and health
    checks come from Google's ranges, not from a pod, and an ALB sending to pod IPs from its
    addresses in the VPC (``front_door_cidrs``).
    """
    made: list[pulumi.Resource] = []
    if access is None:
        return made
    if access.authz == "static":
        made.append(
            k8s.core.v1.ConfigMap(
                f"{name}-authz-policy",
                metadata={"name": POLICY_CONFIG_MAP, "namespace": namespace, "labels": labels},
                data={"policy.yaml": access.policy},
                opts=opts,
            )
        )
    if access.ingress_from:
        policy_access = access

        def spec_with(more_cidrs: Sequence[str]) -> dict[str, Any]:
            return policy_access.network_policy_spec(
                labels,
                port,
                extra_namespaces=plan.source_namespaces if plan else (),
                extra_cidrs=(*(plan.source_cidrs if plan else ()), *more_cidrs),
            )

        spec: pulumi.Input[dict[str, Any]] = (
            spec_with(())
            if front_door_cidrs is None
            else pulumi.Output.from_input(front_door_cidrs).apply(lambda cidrs: spec_with(list(cidrs)))
        )
        made.append(
            k8s.networking.v1.NetworkPolicy(
                f"{name}-ingress-from",
                metadata={"name": f"{service_name}-ingress", "namespace": namespace, "labels": labels},
                spec=spec,
                opts=opts,
            )
        )
    return made


def front_door_objects(
    name: str, plan: IngressPlan, *, labels: dict[str, str], opts: pulumi.ResourceOptions
) -> list[pulumi.Resource]:
    """The controller's own objects (GKE: BackendConfig, FrontendConfig, ManagedCertificate)."""
    made: list[pulumi.Resource] = []
    for obj in plan.objects:
        metadata = {**obj["metadata"], "labels": labels}
        made.append(
            k8s.apiextensions.CustomResource(
                f"{name}-{obj['kind'].lower()}",
                api_version=obj["apiVersion"],
                kind=obj["kind"],
                metadata=metadata,
                spec=obj["spec"],
                opts=opts,
            )
        )
    return made


def ingress(
    name: str,
    ingress: HistoryServerIngress,
    plan: IngressPlan,
    *,
    service_name: str,
    service_port: int,
    namespace: str,
    labels: dict[str, str],
    parent: pulumi.Resource,
    depends_on: list[pulumi.Resource],
) -> k8s.networking.v1.Ingress:
    """The Ingress: every path of ``ingress.host`` to the Service."""
    path = {
        "path": "/",
        "path_type": "Prefix",
        "backend": {"service": {"name": service_name, "port": {"number": service_port}}},
    }
    spec: dict[str, Any] = {"rules": [{"host": ingress.host, "http": {"paths": [path]}}]}
    if plan.class_name:
        spec["ingress_class_name"] = plan.class_name
    if plan.tls:
        spec["tls"] = plan.tls
    annotations = dict(plan.annotations)
    if plan.skip_await:
        # Pulumi waits for the Ingress's address; a controller that never publishes one
        # (NodePort setups, some NGINX installs) would fail every deploy after 10 minutes.
        annotations.setdefault("pulumi.com/skipAwait", "true")
    wait = f"{plan.await_minutes}m"
    return k8s.networking.v1.Ingress(
        f"{name}-ingress",
        metadata={"name": service_name, "namespace": namespace, "labels": labels, "annotations": annotations},
        spec=spec,
        opts=pulumi.ResourceOptions(
            parent=parent, depends_on=depends_on, custom_timeouts=pulumi.CustomTimeouts(create=wait, update=wait)
        ),
    )
