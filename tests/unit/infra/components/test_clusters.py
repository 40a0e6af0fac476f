"""GkeCluster / EksCluster / AksCluster under Pulumi mocks: identity settings, kubeconfigs, identity facts."""

from __future__ import annotations

import json
import re
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_azure_native as azure
import pulumi_gcp as gcp
import pytest

from ray_history_pulumi.clusters import (
    AksCluster,
    AksClusterArgs,
    EksCluster,
    EksClusterArgs,
    GkeCluster,
    GkeClusterArgs,
)
from tests.unit.infra.components.test_aws_names import names_over_limit
from tests.unit.infra.mocks import (
    AKS_ISSUER,
    AWS_ACCOUNT,
    EKS_ISSUER,
    FAKE_KUBECONFIG,
    GCP_PROJECT_NUMBER,
    RecordingMocks,
    settled,
)


@pytest.fixture
def mocks() -> RecordingMocks:
    return RecordingMocks.install()


def _user_exec(kubeconfig: str) -> dict[str, Any]:
    config = json.loads(kubeconfig)
    assert config["current-context"] == config["contexts"][0]["name"]
    exec_spec: dict[str, Any] = config["users"][0]["user"]["exec"]
    assert "token" not in config["users"][0]["user"]  # never a short-lived token
    return {"server": config["clusters"][0]["cluster"]["server"], **exec_spec}


@settled
def test_gke_standard_has_workload_identity_and_gke_metadata(mocks: RecordingMocks) -> pulumi.Output[None]:
    provider = gcp.Provider("gcp-explicit", project="demo-proj")
    gke = GkeCluster(
        "gke",
        GkeClusterArgs(project="demo-proj", location="us-central1-a", autopilot=False),
        opts=pulumi.ResourceOptions(providers=[provider]),
    )

    def check(args: list[Any]) -> None:
        kubeconfig, number = args
        cluster = mocks.one("gcp:container/cluster:Cluster").inputs
        assert cluster["workloadIdentityConfig"] == {"workloadPool": "demo-proj.svc.id.goog"}
        assert cluster["deletionProtection"] is False
        pool = mocks.one("gcp:container/nodePool:NodePool").inputs
        assert pool["nodeConfig"]["workloadMetadataConfig"] == {"mode": "GKE_METADATA"}
        assert number == GCP_PROJECT_NUMBER
        user = _user_exec(kubeconfig)
        assert user["command"] == "gke-gcloud-auth-plugin"
        assert user["server"] == "https://34.1.2.3"
        mocks.assert_all_use_provider("gcp", "gcp-explicit")

    return pulumi.Output.all(gke.kubeconfig, gke.project_number).apply(check)


@settled
def test_gke_autopilot(mocks: RecordingMocks) -> pulumi.Output[None]:
    gke = GkeCluster("gke", GkeClusterArgs(project="demo-proj", location="us-central1"))

    def check(_: str) -> None:
        assert mocks.one("gcp:container/cluster:Cluster").inputs["enableAutopilot"] is True
        assert not mocks.of_type("gcp:container/nodePool:NodePool")
        assert gke.workload_pool == "demo-proj.svc.id.goog"

    return gke.kubeconfig.apply(check)


@settled
def test_eks_oidc_provider_pod_identity_addon_and_kubeconfig(mocks: RecordingMocks) -> pulumi.Output[None]:
    provider = aws.Provider("aws-explicit", region="us-east-1")
    eks = EksCluster(
        "eks",
        EksClusterArgs(subnet_ids=["subnet-a", "subnet-b"]),
        opts=pulumi.ResourceOptions(providers=[provider]),
    )

    def check(args: list[Any]) -> None:
        kubeconfig, issuer, provider_arn, _ = args
        assert issuer == EKS_ISSUER
        oidc = mocks.one("aws:iam/openIdConnectProvider:OpenIdConnectProvider").inputs
        assert oidc == {**oidc, "url": EKS_ISSUER, "clientIdLists": ["sts.amazonaws.com"]}
        assert provider_arn == f"arn:aws:iam::{AWS_ACCOUNT}:oidc-provider/{EKS_ISSUER.removeprefix('https://')}"
        addon = mocks.one("aws:eks/addon:Addon").inputs
        assert addon["addonName"] == "eks-pod-identity-agent"
        cluster = mocks.one("aws:eks/cluster:Cluster").inputs
        assert cluster["vpcConfig"]["subnetIds"] == ["subnet-a", "subnet-b"]
        policies = {
            r.inputs["policyArn"].rsplit("/", 1)[1]
            for r in mocks.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
        }
        assert "AmazonEC2ContainerRegistryReadOnly" in policies
        user = _user_exec(kubeconfig)
        assert user["command"] == "aws"
        assert user["args"] == [
            "eks",
            "get-token",
            "--cluster-name",
            "eks",
            "--region",
            "us-east-1",
            "--output",
            "json",
        ]
        mocks.assert_all_use_provider("aws", "aws-explicit")

    return pulumi.Output.all(
        eks.kubeconfig, eks.oidc_issuer_url, eks.oidc_provider_arn, eks.pod_identity_addon.id
    ).apply(check)


def _eks_with_name(name: str) -> RecordingMocks:
    mocks = RecordingMocks.install()

    @settled
    def run() -> pulumi.Output[None]:
        eks = EksCluster(name, EksClusterArgs(subnet_ids=["subnet-a", "subnet-b"], cluster_name=name))
        return eks.kubeconfig.apply(lambda _: None)

    run()
    return mocks


@pytest.mark.parametrize("length", [10, 43, 44, 47, 50, 63, 100])
def test_eks_role_and_node_group_names_fit_aws_limits_for_any_cluster_name(length: int) -> None:
    """Every IAM role and the node group get a name AWS takes, whatever the cluster name's length.

    AWS: IAM role names are at most 64 characters
    (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_iam-quotas.html), EKS node group
    names at most 63. Pulumi auto-names a resource as its logical name, "-" and 7 random
    characters, and pulumi-aws refuses an auto-named role over 64 ("plus 7 random chars is
    longer than maximum length 64"), so with ``{cluster}-cluster-role`` any cluster name over 43
    characters (``cluster.name`` takes 63, EksClusterArgs 100) failed the first ``pulumi up``.
    """
    name = ("ray-" + "x" * length)[:length]
    mocks = _eks_with_name(name)
    assert names_over_limit(mocks) == []
    assert len(mocks.of_type("aws:iam/role:Role")) == 2
    assert mocks.one("aws:eks/cluster:Cluster").inputs["name"] == name


def test_eks_names_that_fit_keep_pulumi_auto_names() -> None:
    """A cluster deployed before this change keeps its roles and node group: their inputs have no
    name or prefix, exactly as before (a new one would replace them, and the cluster with its role)."""
    mocks = _eks_with_name("ray-history")
    named = [
        (r.name, key)
        for typ in ("aws:iam/role:Role", "aws:eks/nodeGroup:NodeGroup")
        for r in mocks.of_type(typ)
        for key in ("name", "namePrefix", "nodeGroupName", "nodeGroupNamePrefix")
        if r.inputs.get(key)
    ]
    assert named == []


def test_eks_long_names_get_stable_distinct_prefixes() -> None:
    """Too long for the auto-name: a prefix that is the same on every deploy (no replacement), keeps
    the role's kind readable and leaves AWS's 26-character unique suffix room."""
    name = "team-" + "a" * 58

    def prefixes() -> dict[str, str]:
        mocks = _eks_with_name(name)
        found = {r.name: r.inputs["namePrefix"] for r in mocks.of_type("aws:iam/role:Role")}
        found[f"{name}-nodes"] = mocks.one("aws:eks/nodeGroup:NodeGroup").inputs["nodeGroupNamePrefix"]
        return found

    first = prefixes()
    assert first == prefixes()
    cluster_role, node_role = first[f"{name}-cluster-role"], first[f"{name}-node-role"]
    assert cluster_role.startswith("team-a") and cluster_role.endswith("-cluster-role-")
    assert node_role.endswith("-node-role-")
    assert len(cluster_role) == len(node_role) == 64 - 26
    assert len(first[f"{name}-nodes"]) == 63 - 26


def test_eks_component_name_must_be_an_eks_name_without_cluster_name() -> None:
    with pytest.raises(ValueError, match="the component's name is the EKS cluster's"):
        EksCluster("e" * 101, EksClusterArgs(subnet_ids=["subnet-a", "subnet-b"]))


@settled
def test_aks_oidc_issuer_workload_identity_and_kubeconfig(mocks: RecordingMocks) -> pulumi.Output[None]:
    provider = azure.Provider("azure-explicit", location="westeurope")
    aks = AksCluster("aks", AksClusterArgs(resource_group_name="rg"), opts=pulumi.ResourceOptions(providers=[provider]))

    def check(args: list[Any]) -> None:
        kubeconfig, issuer, kubelet = args
        cluster = mocks.one("azure-native:containerservice:ManagedCluster").inputs
        assert cluster["oidcIssuerProfile"] == {"enabled": True}
        assert cluster["securityProfile"] == {"workloadIdentity": {"enabled": True}}
        [pool] = cluster["agentPoolProfiles"]
        assert (pool["mode"], pool["count"]) == ("System", 2)
        assert issuer == AKS_ISSUER
        assert re.fullmatch(r"[0-9a-f-]{36}", kubelet)
        assert kubeconfig == FAKE_KUBECONFIG
        mocks.assert_all_use_provider("azure-native", "azure-explicit")

    return pulumi.Output.all(aks.kubeconfig, aks.oidc_issuer_url, aks.kubelet_object_id).apply(check)


@pytest.mark.parametrize(
    ("factory", "message"),
    [
        (lambda: EksClusterArgs(subnet_ids=["one"]), "EksClusterArgs.subnet_ids"),
        (lambda: EksClusterArgs(subnet_ids=["a", "b"], desired_size=9), "EksClusterArgs.desired_size=9"),
        (lambda: GkeClusterArgs(project="", location="x"), "GkeClusterArgs.project"),
        (lambda: AksClusterArgs(resource_group_name="rg", node_count=0), "AksClusterArgs.node_count=0"),
        (lambda: GkeClusterArgs(project="p", location="l", cluster_name="a" * 41), "GkeClusterArgs.cluster_name"),
        (lambda: GkeClusterArgs(project="p", location="l", cluster_name="1ray"), "GkeClusterArgs.cluster_name"),
        (lambda: EksClusterArgs(subnet_ids=["a", "b"], cluster_name="a" * 101), "EksClusterArgs.cluster_name"),
        (lambda: AksClusterArgs(resource_group_name="rg", cluster_name="a" * 55), "AksClusterArgs.cluster_name"),
        (lambda: GkeClusterArgs(project="p", location="l", node_count=4, max_node_count=3), "max_node_count=3"),
    ],
)
def test_bad_args_name_the_field(factory: Any, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        factory()


def _kubeconfig_consumer(kubeconfig: pulumi.Output[str]) -> None:
    """A resource fed by the kubeconfig, as the stack's Kubernetes provider is."""
    pulumi.CustomResource("test:index:KubeconfigConsumer", "consumer", {"kubeconfig": kubeconfig})


@settled
def test_eks_kubeconfig_waits_for_nodes_and_the_pod_identity_agent(mocks: RecordingMocks) -> pulumi.Output[None]:
    """Kubernetes resources start only once the node group and the Pod Identity agent are active.

    AWS: pods of a managed node group cluster schedule only on nodes of an ACTIVE node
    group, and "the EKS Pod Identity Agent must be running on the nodes" for any pod to get
    credentials (https://docs.aws.amazon.com/eks/latest/userguide/pod-id-agent-setup.html).
    Without the wait, the KubeRay Helm release (atomic, 600 s) times out on a cluster with no nodes.
    """
    eks = EksCluster("eks", EksClusterArgs(subnet_ids=["subnet-a", "subnet-b"], cluster_name="ray-prod"))
    _kubeconfig_consumer(eks.kubeconfig)

    def check(_: str) -> None:
        consumer = mocks.named("consumer")
        assert consumer.depends_on("eks-nodes"), consumer.dependency_names()
        assert consumer.depends_on("eks-pod-identity-agent"), consumer.dependency_names()
        assert mocks.one("aws:eks/cluster:Cluster").inputs["name"] == "ray-prod"

    return eks.kubeconfig.apply(check)


@settled
def test_gke_nodes_run_as_a_least_privilege_service_account(mocks: RecordingMocks) -> pulumi.Output[None]:
    """Nodes use a service account made for them with ``roles/container.defaultNodeServiceAccount``.

    GKE: "Use least privilege IAM service accounts" -- the default Compute Engine account
    lacks the permissions nodes need where the organisation policy
    ``iam.automaticIamGrantsForDefaultServiceAccounts`` is enforced; create a custom node
    service account with the Kubernetes Engine Default Node Service Account role
    (https://cloud.google.com/kubernetes-engine/docs/how-to/hardening-your-cluster#use_least_privilege_sa).
    """
    gke = GkeCluster("gke", GkeClusterArgs(project="demo-proj", location="us-central1-a", autopilot=False))

    def check(_: str) -> None:
        account = mocks.one("gcp:serviceaccount/account:Account").inputs
        assert account["accountId"] == "gke-nodes"
        role = mocks.one("gcp:projects/iAMMember:IAMMember")
        assert role.inputs["role"] == "roles/container.defaultNodeServiceAccount"
        email = "gke-nodes@demo-proj.iam.gserviceaccount.com"
        pool = mocks.one("gcp:container/nodePool:NodePool")
        assert pool.inputs["nodeConfig"]["serviceAccount"] == email
        cluster = mocks.one("gcp:container/cluster:Cluster")
        assert cluster.inputs["nodeConfig"]["serviceAccount"] == email
        assert cluster.depends_on("gke-nodes-role"), cluster.dependency_names()

    return gke.kubeconfig.apply(check)


@settled
def test_gke_autopilot_nodes_use_the_node_service_account(mocks: RecordingMocks) -> pulumi.Output[None]:
    """Autopilot nodes take their service account from the cluster's auto-provisioning defaults
    (https://cloud.google.com/kubernetes-engine/docs/how-to/hardening-your-cluster#use_least_privilege_sa)."""
    gke = GkeCluster("gke", GkeClusterArgs(project="demo-proj", location="us-central1", cluster_name="ray"))

    def check(_: str) -> None:
        cluster = mocks.one("gcp:container/cluster:Cluster").inputs
        defaults = cluster["clusterAutoscaling"]["autoProvisioningDefaults"]
        assert defaults["serviceAccount"] == "ray-nodes@demo-proj.iam.gserviceaccount.com"
        assert cluster["name"] == "ray"

    return gke.kubeconfig.apply(check)


@settled
def test_gke_regional_pool_sizes_the_total_not_each_zone(mocks: RecordingMocks) -> pulumi.Output[None]:
    """A regional pool's ``node_count`` is per zone (3 zones: 3x the nodes); the total is bounded instead.

    GKE: "node_count ... per zone" for regional clusters, and ``total_min_node_count`` /
    ``total_max_node_count`` bound the whole pool
    (https://cloud.google.com/kubernetes-engine/docs/concepts/cluster-autoscaler#minimum_and_maximum_node_pool_size).
    """
    gke = GkeCluster("gke", GkeClusterArgs(project="demo-proj", location="us-central1", autopilot=False, node_count=2))

    def check(_: str) -> None:
        pool = mocks.one("gcp:container/nodePool:NodePool").inputs
        assert "nodeCount" not in pool
        assert pool["initialNodeCount"] == 1
        assert pool["autoscaling"] == {
            "totalMinNodeCount": 2,
            "totalMaxNodeCount": 3,
            "locationPolicy": "BALANCED",
        }

    return gke.kubeconfig.apply(check)


@settled
def test_gke_zonal_pool_keeps_an_exact_node_count(mocks: RecordingMocks) -> pulumi.Output[None]:
    gke = GkeCluster(
        "gke", GkeClusterArgs(project="demo-proj", location="us-central1-b", autopilot=False, node_count=2)
    )

    def check(_: str) -> None:
        pool = mocks.one("gcp:container/nodePool:NodePool").inputs
        assert pool["nodeCount"] == 2
        assert "autoscaling" not in pool

    return gke.kubeconfig.apply(check)


GET_PROJECT = "gcp:organizations/getProject:getProject"


@settled
def test_gke_resource_manager_calls_wait_for_the_enabled_apis(mocks: RecordingMocks) -> pulumi.Output[None]:
    """The project lookup and the node role grant wait for ``depends_on`` (the project's enabled APIs),
    whether it is given in the args or in the component's options.

    GCP: ``projects.get`` and project IAM policy writes are Cloud Resource Manager methods ("Enable
    the Resource Manager API", https://cloud.google.com/iam/docs/write-policy-client-libraries),
    which a new project does not have on
    (https://cloud.google.com/service-usage/docs/enabled-service#default); a call made before
    ``serviceusage`` turns it on fails with ``SERVICE_DISABLED``. An invoke does not wait for its
    parent component's ``depends_on`` by itself.
    """
    from ray_history_pulumi.gcp_services import GcpProjectServices, GcpProjectServicesArgs

    in_args = GcpProjectServices("apis-args", GcpProjectServicesArgs(project="demo-proj"))
    in_opts = GcpProjectServices("apis-opts", GcpProjectServicesArgs(project="demo-proj"))
    gke = GkeCluster(
        "gke",
        GkeClusterArgs(project="demo-proj", location="us-central1", depends_on=(in_args,)),
        opts=pulumi.ResourceOptions(depends_on=[in_opts]),
    )

    def check(_: str) -> None:
        (lookup,) = mocks.invokes_of(GET_PROJECT)
        for apis in ("apis-args", "apis-opts"):
            assert lookup.depends_on(f"{apis}-cloudresourcemanager"), lookup.dependency_names()
        role = mocks.one("gcp:projects/iAMMember:IAMMember")
        assert role.depends_on("apis-args-cloudresourcemanager"), role.dependency_names()
        assert mocks.waits_for(role, "apis-opts-cloudresourcemanager")

    return gke.project_number.apply(check)
