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

from infra.components.clusters import (
    AksCluster,
    AksClusterArgs,
    EksCluster,
    EksClusterArgs,
    GkeCluster,
    GkeClusterArgs,
)
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
            "eks-cluster",
            "--region",
            "us-east-1",
            "--output",
            "json",
        ]
        mocks.assert_all_use_provider("aws", "aws-explicit")

    return pulumi.Output.all(
        eks.kubeconfig, eks.oidc_issuer_url, eks.oidc_provider_arn, eks.pod_identity_addon.id
    ).apply(check)


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
    ],
)
def test_bad_args_name_the_field(factory: Any, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        factory()
