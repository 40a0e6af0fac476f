"""A turnkey GKE cluster (config ``createCluster`` on ``cloud: gcp``) with Workload Identity on.

Nodes run as a service account made for them with only the role GKE documents for node
service accounts, so image pulls and node logging work in organisations that switched off
the default compute account's automatic Editor grant.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pulumi

from ray_history_pulumi.gcp_services import lookup_options
from ray_history_pulumi.kubeconfig import exec_kubeconfig

#: GKE cluster names: a letter first, then letters, digits and '-', at most 40 characters
#: (https://cloud.google.com/kubernetes-engine/docs/reference/rest/v1/projects.locations.clusters#Cluster).
GKE_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$")
GKE_NAME_MAX = 40
#: The role GKE's hardening guide grants a node service account (logging, monitoring, metadata).
NODE_ROLE = "roles/container.defaultNodeServiceAccount"
CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
_ZONE = re.compile(r"^[a-z]+-[a-z]+\d+-[a-z]$")


def is_zone(location: str) -> bool:
    """``us-central1-a`` is a zone (a zonal cluster); ``us-central1`` a region."""
    return bool(_ZONE.match(location))


def node_account_id(cluster_name: str) -> str:
    """Service account id of the nodes: 6-30 characters, derived from the cluster name."""
    return f"{cluster_name[:24].rstrip('-')}-nodes"


@dataclass
class GkeClusterArgs:
    """Settings of :class:`GkeCluster`.

    Attributes:
        project: project id (the workload pool is ``PROJECT.svc.id.goog``).
        location: region (Autopilot, regional standard cluster) or zone.
        cluster_name: the GKE cluster's name (<= 40 characters); None = the component name.
        autopilot: Autopilot (Workload Identity always on); False = standard cluster with one node pool.
        machine_type: the node pool's machine type (standard cluster).
        node_count: nodes of a zonal pool; for a regional pool the total the autoscaler
            keeps at least (GKE's ``node_count`` would be per zone: 3x the nodes asked for).
        max_node_count: upper bound of a regional pool's total; None = max(node_count, 3).
        network / subnetwork: existing VPC to use; None = the project's default network.
        deletion_protection: block ``pulumi destroy`` of the cluster.
        depends_on: resources to wait for first (the project's enabled APIs); the project
            lookup and the node role grant (Cloud Resource Manager calls) wait for them too,
            as for the component's own ``depends_on``.
    """

    project: str
    location: str
    cluster_name: str | None = None
    autopilot: bool = True
    machine_type: str = "e2-standard-4"
    node_count: int = 2
    max_node_count: int | None = None
    network: str | None = None
    subnetwork: str | None = None
    deletion_protection: bool = False
    depends_on: tuple[pulumi.Resource, ...] = ()

    def __post_init__(self) -> None:
        if not self.project or not self.location:
            raise ValueError("GkeClusterArgs.project and .location are required")
        if self.node_count < 1:
            raise ValueError(f"GkeClusterArgs.node_count={self.node_count}: must be >= 1")
        if self.max_node_count is not None and self.max_node_count < self.node_count:
            raise ValueError(f"GkeClusterArgs.max_node_count={self.max_node_count}: must be >= node_count")
        if self.cluster_name is not None and not GKE_NAME.match(self.cluster_name):
            raise ValueError(
                f"GkeClusterArgs.cluster_name={self.cluster_name!r}: GKE names are a letter, then lower-case "
                f"letters, digits and '-', at most {GKE_NAME_MAX} characters"
            )

    def pool_size(self) -> dict[str, Any]:
        """``node_count`` for a zonal pool; total autoscaling bounds for a regional one."""
        if is_zone(self.location):
            return {"node_count": self.node_count}
        return {
            "initial_node_count": 1,  # per zone
            "autoscaling": {
                "total_min_node_count": self.node_count,
                "total_max_node_count": self.max_node_count or max(self.node_count, 3),
                "location_policy": "BALANCED",
            },
        }


class GkeCluster(pulumi.ComponentResource):
    """A GKE cluster with Workload Identity (Autopilot by default) and a least-privilege node account.

    Example::

        gke = GkeCluster("gke", GkeClusterArgs(project="my-proj", location="us-central1"),
                         opts=pulumi.ResourceOptions(providers=[gcp_provider]))
        k8s_provider = k8s.Provider("gke", kubeconfig=gke.kubeconfig, cluster_identifier=gke.cluster_id)
        GcsHistoryStorageArgs(project="my-proj", location="US", project_number=gke.project_number,
                              workload_pool_ready=gke.identity_ready)

    Attributes:
        cluster, node_pool (standard only), kubeconfig (secret; needs ``gke-gcloud-auth-plugin``;
        consumers wait for the nodes), cluster_id, project_number, workload_pool,
        identity_ready (what creates the identity pool), node_service_account_member
        (``serviceAccount:...``: give it ``roles/artifactregistry.reader`` on the image repository).
    """

    def __init__(self, name: str, args: GkeClusterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        import pulumi_gcp as gcp

        super().__init__("rayhistory:gcp:GkeCluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        cluster_name = args.cluster_name or name
        self.workload_pool = f"{args.project}.svc.id.goog"

        nodes_account = gcp.serviceaccount.Account(
            f"{name}-nodes-sa",
            project=args.project,
            account_id=node_account_id(cluster_name),
            display_name=f"GKE nodes of {cluster_name} (ray-history)",
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)),
        )
        # A project-level grant is a Cloud Resource Manager call: after the APIs are enabled.
        node_role = gcp.projects.IAMMember(
            f"{name}-nodes-role",
            project=args.project,
            role=NODE_ROLE,
            member=nodes_account.member,
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)),
        )
        self.node_service_account_member: pulumi.Output[str] = nodes_account.member
        node_config = {"service_account": nodes_account.email, "oauth_scopes": [CLOUD_PLATFORM_SCOPE]}
        common: dict[str, Any] = {
            "name": cluster_name,
            "project": args.project,
            "location": args.location,
            "network": args.network,
            "subnetwork": args.subnetwork,
            "deletion_protection": args.deletion_protection,
            "release_channel": {"channel": "REGULAR"},
            # Managed collection of Google Cloud Managed Service for Prometheus (metrics.mode
            # managed reads Ray's PodMonitorings through it); the default on new clusters since
            # GKE 1.27, set so it does not depend on the version.
            "monitoring_config": {"managed_prometheus": {"enabled": True}},
        }
        # Nodes boot already writing logs: the role is in place before any node exists.
        after_role = pulumi.ResourceOptions(parent=self, depends_on=[node_role, *args.depends_on])
        self.node_pool: Any = None
        if args.autopilot:
            self.cluster = gcp.container.Cluster(
                f"{name}-cluster",
                enable_autopilot=True,
                cluster_autoscaling={"auto_provisioning_defaults": node_config},
                **common,
                opts=after_role,
            )
        else:
            self.cluster = gcp.container.Cluster(
                f"{name}-cluster",
                workload_identity_config={"workload_pool": self.workload_pool},
                remove_default_node_pool=True,
                initial_node_count=1,
                node_config=node_config,
                **common,
                opts=after_role,
            )
            self.node_pool = gcp.container.NodePool(
                f"{name}-nodes",
                cluster=self.cluster.name,
                project=args.project,
                location=args.location,
                **args.pool_size(),
                node_config={
                    "machine_type": args.machine_type,
                    **node_config,
                    # Pods get their KSA identity only through the GKE metadata server.
                    "workload_metadata_config": {"mode": "GKE_METADATA"},
                },
                opts=child,
            )
        self.identity_ready: list[pulumi.Resource] = [self.cluster, *([self.node_pool] if self.node_pool else [])]
        self.cluster_id: pulumi.Output[str] = self.cluster.id
        # projects.get is Cloud Resource Manager: the lookup waits for the enabled APIs.
        project = gcp.organizations.get_project_output(
            project_id=args.project, opts=lookup_options(self, opts, depends_on=args.depends_on)
        )
        self.project_number: pulumi.Output[str] = project.number
        # Consumers of the kubeconfig wait for the nodes: nothing can schedule before them.
        nodes_ready = self.node_pool.id if self.node_pool else self.cluster.id
        self.kubeconfig: pulumi.Output[str] = pulumi.Output.secret(
            pulumi.Output.all(self.cluster.name, self.cluster.endpoint, self.cluster.master_auth, nodes_ready).apply(
                lambda a: exec_kubeconfig(
                    f"gke_{args.project}_{args.location}_{a[0]}",
                    f"https://{a[1]}",
                    a[2]["cluster_ca_certificate"] if isinstance(a[2], dict) else a[2].cluster_ca_certificate,
                    "gke-gcloud-auth-plugin",
                    [],
                )
            )
        )
        self.register_outputs(
            {
                "kubeconfig": self.kubeconfig,
                "project_number": self.project_number,
                "workload_pool": self.workload_pool,
                "node_service_account": self.node_service_account_member,
            }
        )
