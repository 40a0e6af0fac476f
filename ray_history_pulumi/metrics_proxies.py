"""``managed`` metrics, the query side: what lets the history server and Grafana read the
cloud's managed Prometheus with plain in-cluster HTTP, and the Grafana that shows Ray's dashboards.

* GKE: Managed Service for Prometheus's query frontend
  (https://cloud.google.com/stackdriver/docs/managed-prometheus/query), a Deployment + Service
  running as its own Kubernetes service account, granted ``roles/monitoring.viewer`` on the
  project through Workload Identity Federation (a ``principal://`` member, no Google service
  account).
* EKS: the AWS SigV4 proxy (https://github.com/awslabs/aws-sigv4-proxy) in front of the AMP
  workspace's query API, assuming an IAM role allowed the four query actions on that workspace
  only (EKS Pod Identity or IRSA, like the history server's role).
* AKS: none. Microsoft's Entra authorization proxy is retired ("no longer maintained or
  supported", https://learn.microsoft.com/azure/azure-monitor/containers/prometheus-authorization-proxy),
  so on AKS the Prometheus URL stays a setting (docs/metrics.md).

:func:`grafana_release` installs the ``grafana`` chart with the settings the history server's
``/grafana/`` proxy needs, the dashboard sidecar and one Prometheus datasource.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from ray_history_pulumi.contracts import ServiceAccountRef
from ray_history_pulumi.pod_security import restricted_container_security, restricted_pod_security

GMP_FRONTEND_IMAGE = "gke.gcr.io/prometheus-engine/frontend:v0.15.3-gke.0"
GMP_FRONTEND_NAME = "gmp-frontend"
GMP_FRONTEND_PORT = 9090
GMP_QUERY_ROLE = "roles/monitoring.viewer"
SIGV4_PROXY_IMAGE = "public.ecr.aws/aws-observability/aws-sigv4-proxy:1.10"
SIGV4_PROXY_NAME = "aps-query-proxy"
SIGV4_PROXY_PORT = 8005
#: The query permissions AMP documents for Grafana and other readers (AMP-onboard-query-grafana-7.3).
APS_QUERY_ACTIONS = ["aps:QueryMetrics", "aps:GetSeries", "aps:GetLabels", "aps:GetMetricMetadata"]
GRAFANA_HELM_REPO = "https://grafana.github.io/helm-charts"
GRAFANA_CHART = "grafana"
GRAFANA_CHART_VERSION = "8.8.2"
GRAFANA_FULLNAME = "ray-metrics-grafana"
GRAFANA_PORT = 80
#: The uid kube-prometheus-stack gives its datasource, so both modes look the same to Ray's dashboards.
DATASOURCE_UID = "prometheus"


def service_url(name: str, namespace: str, port: int) -> str:
    return f"http://{name}.{namespace}.svc.cluster.local:{port}"


@dataclass
class QueryProxy:
    """What a proxy made: the Prometheus HTTP API base URL inside the cluster, and its resources."""

    url: pulumi.Input[str]
    resources: list[pulumi.Resource] = field(default_factory=list)


def _deployment(
    name: str,
    *,
    app: str,
    namespace: str,
    labels: dict[str, str],
    image: str,
    args: pulumi.Input[Sequence[pulumi.Input[str]]],
    port: int,
    opts: pulumi.ResourceOptions,
    probe_path: str | None = None,
) -> list[pulumi.Resource]:
    """One-replica Deployment + ClusterIP Service named ``app``, listening on ``port``."""
    selector = {"app.kubernetes.io/name": app}
    container: dict[str, Any] = {
        "name": app,
        "image": image,
        "args": args,
        "ports": [{"name": "http", "container_port": port}],
        "security_context": restricted_container_security(),
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
    }
    if probe_path:
        container["readiness_probe"] = {"http_get": {"path": probe_path, "port": "http"}}
    deployment = k8s.apps.v1.Deployment(
        f"{name}-deployment",
        metadata={"name": app, "namespace": namespace, "labels": {**labels, **selector}},
        spec={
            "replicas": 1,
            "selector": {"match_labels": selector},
            "template": {
                "metadata": {"labels": {**labels, **selector}},
                "spec": {
                    "service_account_name": app,
                    "security_context": restricted_pod_security(),
                    "containers": [container],
                },
            },
        },
        opts=opts,
    )
    service = k8s.core.v1.Service(
        f"{name}-service",
        metadata={"name": app, "namespace": namespace, "labels": {**labels, **selector}},
        spec={"selector": selector, "ports": [{"name": "http", "port": port, "target_port": "http"}]},
        opts=opts,
    )
    return [deployment, service]


def gmp_frontend(
    name: str,
    *,
    namespace: str,
    labels: dict[str, str],
    cloud_provider: pulumi.ProviderResource | None,
    on_k8s: pulumi.ResourceOptions,
    on_cloud: pulumi.ResourceOptions,
) -> QueryProxy:
    """GMP's query frontend for the provider's project, as service account ``gmp-frontend``."""
    import pulumi_gcp as gcp

    from ray_history_pulumi.gcp_services import lookup_options
    from ray_history_pulumi.gcp_storage import workload_identity_principal

    account = ServiceAccountRef(namespace, GMP_FRONTEND_NAME)
    sa = k8s.core.v1.ServiceAccount(
        f"{name}-sa", metadata={"name": account.name, "namespace": namespace, "labels": labels}, opts=on_k8s
    )
    # projects.get and the project grant below are Cloud Resource Manager calls: they wait for
    # what ``on_cloud`` waits for and for the service account (whose Kubernetes provider waits
    # for a created cluster, and so for the APIs the stack enables before it).
    project = gcp.organizations.get_project_output(
        opts=lookup_options(None, on_cloud, provider=cloud_provider, depends_on=[sa])
    )
    # After the service account: the k8s provider waits for the cluster, whose creation makes
    # the PROJECT.svc.id.goog pool that IAM must find for a principal:// member.
    grant = gcp.projects.IAMMember(
        f"{name}-monitoring-viewer",
        project=project.project_id,
        role=GMP_QUERY_ROLE,
        member=pulumi.Output.all(project.number, project.project_id).apply(
            lambda p: workload_identity_principal(str(p[0]), str(p[1]), account)
        ),
        opts=pulumi.ResourceOptions.merge(on_cloud, pulumi.ResourceOptions(depends_on=[sa])),
    )
    args = project.project_id.apply(lambda p: [f"--web.listen-address=:{GMP_FRONTEND_PORT}", f"--query.project-id={p}"])
    after_grant = pulumi.ResourceOptions.merge(on_k8s, pulumi.ResourceOptions(depends_on=[sa, grant]))
    objects = _deployment(
        name,
        app=GMP_FRONTEND_NAME,
        namespace=namespace,
        labels=labels,
        image=GMP_FRONTEND_IMAGE,
        args=args,
        port=GMP_FRONTEND_PORT,
        opts=after_grant,
        probe_path="/-/ready",
    )
    return QueryProxy(service_url(GMP_FRONTEND_NAME, namespace, GMP_FRONTEND_PORT), [sa, grant, *objects])


def aps_query_policy(workspace_arn: str) -> str:
    """The proxy role's inline policy: the query actions on one AMP workspace."""
    statement = {"Effect": "Allow", "Action": APS_QUERY_ACTIONS, "Resource": workspace_arn}
    return json.dumps({"Version": "2012-10-17", "Statement": [statement]}, sort_keys=True)


@dataclass
class AwsIdentity:
    """How the proxy's service account assumes its role (the history server's mechanism)."""

    mode: str = "pod-identity"
    cluster_name: pulumi.Input[str] | None = None
    oidc_provider_arn: pulumi.Input[str] | None = None
    oidc_issuer_url: pulumi.Input[str] | None = None


def sigv4_proxy(
    name: str,
    *,
    namespace: str,
    labels: dict[str, str],
    workspace_id: pulumi.Input[str],
    workspace_arn: pulumi.Input[str],
    identity: AwsIdentity,
    cloud_provider: pulumi.ProviderResource | None,
    on_k8s: pulumi.ResourceOptions,
    on_cloud: pulumi.ResourceOptions,
) -> QueryProxy:
    """AWS SigV4 proxy for AMP's query API, as service account ``aps-query-proxy``."""
    import pulumi_aws as aws

    from ray_history_pulumi.aws_names import IAM_POLICY_NAME_MAX, IAM_ROLE_NAME_MAX, name_args
    from ray_history_pulumi.aws_policies import irsa_trust_policy, pod_identity_trust_policy

    account = ServiceAccountRef(namespace, SIGV4_PROXY_NAME)
    if identity.mode == "irsa":
        trust: pulumi.Input[str] = pulumi.Output.all(identity.oidc_provider_arn, identity.oidc_issuer_url).apply(
            lambda a: irsa_trust_policy(str(a[0]), str(a[1]), [account])
        )
    else:
        trust = pod_identity_trust_policy()
    role = aws.iam.Role(
        f"{name}-role",
        **name_args(f"{name}-role", IAM_ROLE_NAME_MAX, keep="-role"),
        assume_role_policy=trust,
        description="Ray history metrics: query one Amazon Managed Service for Prometheus workspace",
        opts=on_cloud,
    )
    policy = aws.iam.RolePolicy(
        f"{name}-query",
        **name_args(f"{name}-query", IAM_POLICY_NAME_MAX, keep="-query"),
        role=role.id,
        policy=pulumi.Output.from_input(workspace_arn).apply(aps_query_policy),
        opts=on_cloud,
    )
    made: list[pulumi.Resource] = [role, policy]
    annotations: dict[str, pulumi.Input[str]] = {}
    if identity.mode == "irsa":
        annotations["eks.amazonaws.com/role-arn"] = role.arn
    else:
        made.append(
            aws.eks.PodIdentityAssociation(
                f"{name}-pod-identity",
                cluster_name=identity.cluster_name,
                namespace=namespace,
                service_account=account.name,
                role_arn=role.arn,
                opts=on_cloud,
            )
        )
    sa = k8s.core.v1.ServiceAccount(
        f"{name}-sa",
        metadata={"name": account.name, "namespace": namespace, "labels": labels, "annotations": annotations},
        opts=on_k8s,
    )
    region = aws.get_region_output(opts=pulumi.InvokeOutputOptions(provider=cloud_provider)).region
    args = region.apply(
        lambda r: [
            "--name",
            "aps",
            "--region",
            r,
            "--host",
            f"aps-workspaces.{r}.amazonaws.com",
            "--port",
            f":{SIGV4_PROXY_PORT}",
        ]
    )
    # Credentials are read when a request is signed: the pods wait for the role to be usable.
    ready = pulumi.ResourceOptions.merge(on_k8s, pulumi.ResourceOptions(depends_on=[sa, *made]))
    objects = _deployment(
        name,
        app=SIGV4_PROXY_NAME,
        namespace=namespace,
        labels=labels,
        image=SIGV4_PROXY_IMAGE,
        args=args,
        port=SIGV4_PROXY_PORT,
        opts=ready,
    )
    base = service_url(SIGV4_PROXY_NAME, namespace, SIGV4_PROXY_PORT)
    url = pulumi.Output.from_input(workspace_id).apply(lambda ws: f"{base}/workspaces/{ws}")
    return QueryProxy(url, [*made, sa, *objects])


def grafana_values(datasource: str, prometheus_url: pulumi.Input[str]) -> dict[str, Any]:
    """``grafana`` chart values: embeddable under ``/grafana/``, anonymous viewers, the dashboard
    sidecar reading this namespace's ConfigMaps, one default Prometheus datasource."""
    return {
        "fullnameOverride": GRAFANA_FULLNAME,
        "testFramework": {"enabled": False},
        "service": {"port": GRAFANA_PORT},
        # The same settings kube-prometheus-stack's Grafana gets (metrics.py): the history
        # server proxies Grafana under its own origin at /grafana/ and embeds its panels.
        "grafana.ini": {
            "security": {"allow_embedding": True},
            "auth.anonymous": {"enabled": True, "org_role": "Viewer"},
            "server": {
                "root_url": "%(protocol)s://%(domain)s:%(http_port)s/grafana/",
                "serve_from_sub_path": True,
            },
        },
        "sidecar": {"dashboards": {"enabled": True, "label": "grafana_dashboard", "labelValue": "1"}},
        "datasources": {
            "datasources.yaml": {
                "apiVersion": 1,
                "datasources": [
                    {
                        "name": datasource,
                        "uid": DATASOURCE_UID,
                        "type": "prometheus",
                        "access": "proxy",
                        "url": prometheus_url,
                        "isDefault": True,
                    }
                ],
            }
        },
    }


def grafana_release(
    name: str,
    *,
    namespace: str,
    release_name: str,
    datasource: str,
    prometheus_url: pulumi.Input[str],
    opts: pulumi.ResourceOptions,
) -> k8s.helm.v3.Release:
    """The ``grafana`` chart in ``namespace`` (which must exist)."""
    return k8s.helm.v3.Release(
        f"{name}-grafana",
        k8s.helm.v3.ReleaseArgs(
            name=f"{release_name}-grafana",
            chart=GRAFANA_CHART,
            version=GRAFANA_CHART_VERSION,
            repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=GRAFANA_HELM_REPO),
            namespace=namespace,
            values=grafana_values(datasource, prometheus_url),
            atomic=True,
            cleanup_on_fail=True,
            timeout=600,
        ),
        opts=opts,
    )
