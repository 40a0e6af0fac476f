"""Issue #13: what a first ``pulumi up`` on each cloud would hit, encoded as the program's wiring.

Nothing here can run a real cloud, so each test states the cloud's documented behaviour in
its docstring (with the source) and checks the resource, input or dependency that meets it.
Dependencies are the URNs the engine was told (``RecordedResource.dependencies``): explicit
``depends_on`` plus every resource an input came from.
"""

from __future__ import annotations

from typing import Any

import pytest

from ray_history_pulumi.gcp_services import REQUIRED_SERVICES
from tests.unit.infra.mocks import FAKE_KUBECONFIG, RecordedResource, RecordingMocks
from tests.unit.infra.test_config import stack_values
from tests.unit.infra.test_program import created_cluster_values, deploy_with

DEPLOYMENT = "kubernetes:apps/v1:Deployment"


def _existing(stack: str) -> dict[str, Any]:
    values = stack_values(stack)
    values["kubeconfig"] = FAKE_KUBECONFIG
    return values


def _deployment(mocks: RecordingMocks) -> RecordedResource:
    return mocks.one(DEPLOYMENT)


def test_aks_kubelet_identity_gets_acr_pull_on_the_stacks_registry() -> None:
    """The AKS kubelet identity gets AcrPull on the registry the stack creates, and the server waits for it.

    Azure: "AKS uses the kubelet managed identity to pull images from ACR; assign it the
    AcrPull role" (https://learn.microsoft.com/azure/aks/cluster-container-registry-integration).
    Without it the default AKS stack ends in ImagePullBackOff and the Deployment's await fails.
    """
    values = _existing("aks")
    mocks, _ = deploy_with(values)
    pulls = [r for r in mocks.of_type("azure-native:authorization:RoleAssignment") if r.name.endswith("acr-pull")]
    assert [r.inputs["principalId"] for r in pulls] == [values["azure"]["kubeletObjectId"]]
    assert pulls[0].inputs["roleDefinitionId"].endswith("/7f951dda-4ed3-4680-a7ca-43fe172d538d")
    assert _deployment(mocks).depends_on(pulls[0].name)


def test_created_aks_cluster_passes_its_kubelet_identity() -> None:
    """A created AKS cluster's own kubelet identity is the one granted AcrPull (same doc as above)."""
    mocks, _ = deploy_with(created_cluster_values("aks"))
    cluster = mocks.one("azure-native:containerservice:ManagedCluster")
    kubelet = cluster.state["identityProfile"]["kubeletidentity"]["objectId"]
    pulls = [r for r in mocks.of_type("azure-native:authorization:RoleAssignment") if r.name.endswith("acr-pull")]
    assert [r.inputs["principalId"] for r in pulls] == [kubelet]


def test_gke_workload_identity_grants_wait_for_the_cluster_and_its_nodes() -> None:
    """``principal://...workloadIdentityPools/PROJECT.svc.id.goog/...`` grants are made after the cluster and node pool.

    GCP: the ``PROJECT.svc.id.goog`` pool is created with the project's first Workload Identity
    cluster; until then IAM rejects a principal naming it ("Identity Pool does not exist")
    (https://cloud.google.com/kubernetes-engine/docs/how-to/workload-identity#enable_on_clusters_and_node_pools).
    """
    values = created_cluster_values("gke")
    values["cluster"] = {"name": "ray-history", "machineType": "e2-standard-4"}
    mocks, _ = deploy_with(values)
    grants = mocks.of_type("gcp:storage/bucketIAMMember:BucketIAMMember")
    assert grants
    for grant in grants:
        assert grant.depends_on("ray-history-cluster"), (grant.name, grant.dependency_names())
        assert grant.depends_on("ray-history-nodes"), (grant.name, grant.dependency_names())


@pytest.mark.parametrize(
    ("stack", "identity_types"),
    [
        ("eks", {"aws:eks/podIdentityAssociation:PodIdentityAssociation", "aws:iam/rolePolicy:RolePolicy"}),
        (
            "aks",
            {
                "azure-native:managedidentity:FederatedIdentityCredential",
                "azure-native:authorization:RoleAssignment",
            },
        ),
        ("gke", {"gcp:storage/bucketIAMMember:BucketIAMMember"}),
    ],
)
def test_pods_start_only_after_their_identity_exists(stack: str, identity_types: set[str]) -> None:
    """The server Deployment and the writer ServiceAccounts depend on their own identity resources.

    AWS: the Pod Identity webhook injects credentials at pod admission; pods created before
    the association "must be restarted" (https://docs.aws.amazon.com/eks/latest/userguide/pod-id-association.html).
    Azure: the workload identity webhook mutates pods at admission
    (https://azure.github.io/azure-workload-identity/docs/topics/service-account-labels-and-annotations.html).
    GCP: IAM grants take effect only once they exist; a pod reading before gets 403s.
    """
    mocks, _ = deploy_with(_existing(stack))
    server_deps = _deployment(mocks).dependency_names()
    for typ in identity_types:
        for_server = [r.name for r in mocks.of_type(typ) if "server" in r.name]
        assert for_server and set(for_server) <= server_deps, (typ, for_server, server_deps)
    writer_account = next(
        r
        for r in mocks.of_type("kubernetes:core/v1:ServiceAccount")
        if r.inputs["metadata"]["name"] == "ray-history-collector"
    )
    writer_identity = {r.name for typ in identity_types for r in mocks.of_type(typ) if "writer" in r.name}
    assert writer_identity and writer_identity <= writer_account.dependency_names()


def test_gke_cluster_cache_fits_autopilot_ephemeral_storage() -> None:
    """The default stack's server requests its cache as ephemeral storage, within Autopilot's 10Gi per pod
    (https://cloud.google.com/kubernetes-engine/docs/concepts/autopilot-resource-requests)."""
    mocks, _ = deploy_with(created_cluster_values("gke"))
    container = _deployment(mocks).inputs["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["requests"]["ephemeral-storage"] == "9728Mi"


def test_gke_cache_storage_class_gives_a_generic_ephemeral_volume() -> None:
    values = created_cluster_values("gke")
    values["historyServer"] = {"cacheSize": "100Gi", "cacheStorageClass": "standard-rwo"}
    mocks, _ = deploy_with(values)
    volumes = {v["name"]: v for v in _deployment(mocks).inputs["spec"]["template"]["spec"]["volumes"]}
    claim = volumes["cache"]["ephemeral"]["volumeClaimTemplate"]["spec"]
    assert claim["storageClassName"] == "standard-rwo"
    assert claim["resources"] == {"requests": {"storage": "100Gi"}}


def test_replicas_setting_reaches_the_deployment_with_a_disruption_budget() -> None:
    """``historyServer.replicas: 2`` runs two server pods and a PodDisruptionBudget over them, so a
    node drain evicts one at a time (https://kubernetes.io/docs/tasks/run-application/configure-pdb/)."""
    values = created_cluster_values("gke")
    values["historyServer"] = {"replicas": 2}
    mocks, _ = deploy_with(values)
    deployment = _deployment(mocks).inputs
    assert deployment["spec"]["replicas"] == 2
    budget = mocks.one("kubernetes:policy/v1:PodDisruptionBudget").inputs
    assert budget["spec"] == {"maxUnavailable": 1, "selector": deployment["spec"]["selector"]}
    defaults, _ = deploy_with(created_cluster_values("gke"))
    assert _deployment(defaults).inputs["spec"]["replicas"] == 1
    assert defaults.of_type("kubernetes:policy/v1:PodDisruptionBudget") == []


def test_gke_created_cluster_nodes_pull_with_their_own_service_account() -> None:
    """The created cluster's node service account reads the stack's Artifact Registry repository.

    GCP: in organisations enforcing ``iam.automaticIamGrantsForDefaultServiceAccounts`` the
    default compute account has no Editor role and cannot pull from Artifact Registry; grant
    ``roles/artifactregistry.reader`` on the repository to the nodes' account
    (https://cloud.google.com/artifact-registry/docs/integrate-gke#permissions).
    """
    mocks, _ = deploy_with(created_cluster_values("gke"))
    account = mocks.one("gcp:serviceaccount/account:Account").state
    readers = mocks.of_type("gcp:artifactregistry/repositoryIamMember:RepositoryIamMember")
    assert [(r.inputs["role"], r.inputs["member"]) for r in readers] == [
        ("roles/artifactregistry.reader", f"serviceAccount:{account['email']}")
    ]


def test_gke_existing_cluster_pull_members_are_granted() -> None:
    """For an existing cluster, ``gcp.imagePullMembers`` names the principals that read the repository."""
    values = _existing("gke")
    member = "serviceAccount:gke-nodes@my-gcp-project.iam.gserviceaccount.com"
    values["gcp"] = {**values["gcp"], "imagePullMembers": [member]}
    mocks, _ = deploy_with(values)
    readers = mocks.of_type("gcp:artifactregistry/repositoryIamMember:RepositoryIamMember")
    assert [r.inputs["member"] for r in readers] == [member]


def test_eks_kubernetes_resources_wait_for_nodes_and_the_pod_identity_agent() -> None:
    """The Kubernetes provider (and so the Helm release and the server) waits for the node group and the agent.

    AWS: a managed node group must be ACTIVE before pods schedule, and "the EKS Pod Identity
    Agent must be running" for credentials (https://docs.aws.amazon.com/eks/latest/userguide/pod-id-agent-setup.html);
    the KubeRay release is atomic with a 600 s wait, which node creation alone can exceed.
    """
    mocks, _ = deploy_with(created_cluster_values("eks"))
    provider = mocks.one("pulumi:providers:kubernetes")
    assert provider.depends_on("ray-history-nodes"), provider.dependency_names()
    assert provider.depends_on("ray-history-pod-identity-agent"), provider.dependency_names()


@pytest.mark.parametrize("length", [44, 63])
def test_eks_aws_names_fit_for_any_accepted_cluster_name(length: int) -> None:
    """Every IAM role, inline policy and the node group gets a name AWS accepts, for any accepted ``cluster.name``.

    AWS: IAM role names are at most 64 characters, policy names 128
    (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_iam-quotas.html), EKS node group
    names 63. ``cluster.name`` takes up to 63 characters; Pulumi's auto-name adds 8 to the logical
    name, so ``{cluster.name}-cluster-role`` overflowed 64 from 44 characters on.
    """
    from tests.unit.infra.components.test_aws_names import names_over_limit

    values = created_cluster_values("eks")
    values["cluster"] = {**values.get("cluster", {}), "name": "r" * length}
    mocks, _ = deploy_with(values)
    assert len(mocks.of_type("aws:iam/role:Role")) >= 3  # the cluster's two and the storage's
    assert names_over_limit(mocks) == []


def test_gcp_apis_are_enabled_first_and_kept_on_destroy() -> None:
    """Container, Artifact Registry, Storage, IAM, IAM Credentials and Cloud Resource Manager APIs are
    enabled before anything uses them.

    GCP: a new project has these APIs disabled; calls fail with ``SERVICE_DISABLED`` until
    ``serviceusage`` enables them (https://cloud.google.com/service-usage/docs/enable-disable).
    """
    mocks, _ = deploy_with(created_cluster_values("gke"))
    services = mocks.of_type("gcp:projects/service:Service")
    assert sorted(s.inputs["service"] for s in services) == sorted(REQUIRED_SERVICES)
    assert all(s.inputs["disableOnDestroy"] is False for s in services)
    for component in ("ray-history", "history", "images"):  # cluster, storage, registry components
        resource = next(r for r in mocks.resources if r.name == component and not r.custom)
        # A dependency on a component is a dependency on each of its children.
        assert {s.name for s in services} <= resource.dependency_names(), (component, resource.dependency_names())


GET_PROJECT = "gcp:organizations/getProject:getProject"
PROJECT_IAM = "gcp:projects/iAMMember:IAMMember"


def _gke_with_managed_metrics() -> dict[str, Any]:
    values = created_cluster_values("gke")
    values["metrics"] = {"mode": "managed"}
    return values


def _existing_gke_with_managed_metrics() -> dict[str, Any]:
    values = _existing("gke")
    values["metrics"] = {"mode": "managed"}
    return values


@pytest.mark.parametrize(
    "values",
    [
        created_cluster_values("gke"),
        _existing("gke"),
        _gke_with_managed_metrics(),
        _existing_gke_with_managed_metrics(),
    ],
    ids=["created-cluster", "existing-cluster", "created-cluster-managed-metrics", "existing-cluster-managed-metrics"],
)
def test_gcp_resource_manager_calls_wait_for_its_api(values: dict[str, Any]) -> None:
    """The stack enables ``cloudresourcemanager.googleapis.com``, and every project lookup and
    project-level IAM grant is made after it is on.

    GCP: ``projects.get`` (``gcp.organizations.getProject``, the project number of the
    ``principal://`` members) and ``projects.getIamPolicy``/``setIamPolicy`` (what
    ``gcp.projects.IAMMember`` calls) are Cloud Resource Manager methods: "Enable the Resource
    Manager API" (https://cloud.google.com/iam/docs/write-policy-client-libraries). It is not among
    the services a new project has on
    (https://cloud.google.com/service-usage/docs/enabled-service#default): with the API quota billed
    to that project, the calls fail with ``SERVICE_DISABLED``.
    """
    mocks, _ = deploy_with(values)
    enabled = {s.inputs["service"]: s.name for s in mocks.of_type("gcp:projects/service:Service")}
    assert "cloudresourcemanager.googleapis.com" in enabled, sorted(enabled)
    api = enabled["cloudresourcemanager.googleapis.com"]
    lookups, grants = mocks.invokes_of(GET_PROJECT), mocks.of_type(PROJECT_IAM)
    assert lookups, "every GCP stack looks up the project number (test premise)"
    early = [f"{GET_PROJECT}{sorted(i.dependency_names())}" for i in lookups if not mocks.waits_for(i, api)]
    early += [g.name for g in grants if not mocks.waits_for(g, api)]
    assert not early, f"Resource Manager calls made before {api} is enabled: {early}"


def test_aks_with_many_namespaces_gives_each_its_own_identity() -> None:
    """21 workload namespaces (more than one identity's credentials) deploy on AKS: each
    namespace's collector account gets an identity of its own, with one federated credential,
    within Azure's 20 per identity, and its Contributor assignment is limited to that namespace's
    keys by an ABAC condition (conditionVersion 2.0).

    Azure: "A maximum of 20 federated identity credentials can be added to an application or
    user-assigned managed identity"
    (https://learn.microsoft.com/en-us/entra/workload-id/workload-identity-federation-considerations);
    conditions: https://learn.microsoft.com/azure/storage/blobs/storage-auth-abac-examples.
    """
    from collections import Counter

    values = _existing("aks")
    values["retention"] = {"days": 30}
    namespaces = [f"team-{i}" for i in range(21)]
    values["workloads"] = {**values["workloads"], "namespaces": namespaces}
    mocks, _ = deploy_with(values)
    credentials = mocks.of_type("azure-native:managedidentity:FederatedIdentityCredential")
    per_identity = Counter(r.inputs["resourceName"] for r in credentials)
    assert len(credentials) == 23 and max(per_identity.values()) == 1, per_identity  # 21 writers, server, gc
    assert {f"history-writer-{ns}" for ns in namespaces} <= set(per_identity)
    conditions = {
        r.name: r.inputs.get("conditionVersion")
        for r in mocks.of_type("azure-native:authorization:RoleAssignment")
        if r.name.startswith("history-writer-")
    }
    assert conditions == {f"history-writer-{ns}-blob-data": "2.0" for ns in namespaces}


def test_gke_repository_setting_must_be_an_artifact_registry_id() -> None:
    """``images.repository`` becomes the Artifact Registry ``repository_id`` on GCP: lower-case
    letters, digits and hyphens, a letter first, a letter or digit last, at most 63 characters
    (https://cloud.google.com/artifact-registry/docs/repositories/create-repos). An ECR-style
    ``team-a/ray-history`` is refused before anything is created; a valid id is used as given."""
    from infra.config import ConfigError

    values = _existing("gke")
    for bad in ("team-a/ray-history", "ray_history", "ray.history"):
        values["images"] = {**values["images"], "repository": bad}
        with pytest.raises(ConfigError, match=r"ray-history-server:images\.repository "):
            deploy_with(values)
    values["images"] = {**values["images"], "repository": "team-a-ray-history"}
    mocks, _ = deploy_with(values)
    assert mocks.one("gcp:artifactregistry/repository:Repository").inputs["repositoryId"] == "team-a-ray-history"


def test_stack_scoped_names_and_configured_cluster_wide_names() -> None:
    """Names two stacks could share are stack-scoped by default or set per stack (#13 item 11)."""
    values = _existing("gke")
    values["historyServer"] = {"clusterRoleName": "raycluster-reader-team-b"}
    values["kuberay"] = {**values["kuberay"], "releaseName": "kuberay-team-b"}
    mocks, _ = deploy_with(values)
    role = mocks.one("kubernetes:rbac.authorization.k8s.io/v1:ClusterRole").inputs
    assert role["metadata"]["name"] == "raycluster-reader-team-b"
    binding = mocks.one("kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding").inputs
    assert binding["roleRef"]["name"] == "raycluster-reader-team-b"
    assert mocks.one("kubernetes:helm.sh/v3:Release").inputs["name"] == "kuberay-team-b"
    repository = mocks.one("gcp:artifactregistry/repository:Repository").inputs
    assert repository["repositoryId"] == "ray-history-test"  # the mocks' stack is "test"


@pytest.mark.parametrize(
    ("stack", "arm", "x86"),
    [
        ("eks", "m7g.large", "c6i.large"),
        ("gke", "c4a-standard-4", "n2-standard-4"),
        ("aks", "Standard_D4ps_v5", "Standard_D4as_v5"),
    ],
)
def test_a_created_cluster_on_arm_machines_is_refused_while_the_images_are_amd64(
    stack: str, arm: str, x86: str
) -> None:
    """The stack builds its images for linux/amd64 only, so the nodes it creates must be x86.
    On Arm each cloud fails differently: EKS refuses a Graviton node group with its default
    x86 AMI type (amiType, https://docs.aws.amazon.com/eks/latest/APIReference/API_Nodegroup.html;
    Graviton names: https://docs.aws.amazon.com/ec2/latest/instancetypes/instance-type-names.html),
    GKE taints Arm nodes ``kubernetes.io/arch=arm64:NoSchedule`` so no pod of the stack is
    scheduled (https://cloud.google.com/kubernetes-engine/docs/concepts/arm-on-gke), and AKS
    gives Arm sizes an arm64 node image where amd64 images cannot start
    (https://learn.microsoft.com/azure/virtual-machines/vm-naming-conventions: "p" is Arm).
    The mocks accept any machine type, so the check runs before anything is created."""
    from infra.config import ConfigError

    values = created_cluster_values(stack)
    values["cluster"] = {**values.get("cluster", {}), "machineType": arm}
    with pytest.raises(ConfigError, match=r"ray-history-server:cluster\.machineType .* Arm machine type"):
        deploy_with(values)
    values["cluster"]["machineType"] = x86
    deploy_with(values)  # an x86 type deploys
    values["cluster"]["machineType"] = arm
    values["images"] = {
        **values.get("images", {}),
        "build": False,
        "collector": "registry.example.com/ray-history-collector:0.1.0",
        "server": "registry.example.com/ray-history-server:0.1.0",
    }
    deploy_with(values)  # the user's own images may be multi-arch


def _pod_specs(mocks: RecordingMocks) -> dict[str, dict[str, Any]]:
    deployment = _deployment(mocks).inputs["spec"]["template"]["spec"]
    cron = mocks.one("kubernetes:batch/v1:CronJob").inputs["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return {"server": deployment, "gc": cron}


@pytest.mark.parametrize("stack", ["gke", "eks", "aks"])
def test_pods_of_the_built_amd64_images_stay_off_arm_nodes(stack: str) -> None:
    """An existing cluster may mix architectures (EKS Graviton node groups, GKE Arm node pools,
    AKS Arm node pools beside x86 ones), and the images the stack builds are linux/amd64 only:
    a pod the scheduler puts on an arm64 node never starts ("exec format error"). Pods of
    those images select ``kubernetes.io/arch: amd64``, the label every kubelet sets
    (https://kubernetes.io/docs/reference/labels-annotations-taints/#kubernetes-io-arch).
    The user's own images (``images.build: false``) may be multi-arch: no selector."""
    values = _existing(stack)
    values["retention"] = {"days": 30}
    mocks, _ = deploy_with(values)
    for name, spec in _pod_specs(mocks).items():
        assert spec.get("nodeSelector") == {"kubernetes.io/arch": "amd64"}, name
    values["images"] = {
        **values.get("images", {}),
        "build": False,
        "collector": "registry.example.com/ray-history-collector:0.1.0",
        "server": "registry.example.com/ray-history-server:0.1.0",
    }
    mocks, _ = deploy_with(values)
    for name, spec in _pod_specs(mocks).items():
        assert "nodeSelector" not in spec, name
