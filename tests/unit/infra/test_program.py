"""The whole Pulumi program under mocks, once per example stack (infra/stacks/Pulumi.<stack>.yaml).

Each test loads the stack file's real values into the mocked engine's config (only the
kubeconfig, a path on the author's machine, is replaced by a kubeconfig's content), runs
``infra.program.deploy`` exactly as ``infra/__main__.py`` does, and checks the resources
and the wiring between them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pulumi
import pytest

from infra.config import NAMESPACE
from infra.program import deploy
from ray_history_pulumi.kuberay import HISTORY_SERVER_GATE
from tests.unit.infra.mocks import AKS_ISSUER, FAKE_KUBECONFIG, RecordedResource, RecordingMocks, State, settled
from tests.unit.infra.test_config import stack_values

STACKS = ("gke", "eks", "aks", "kind")
K8S_PROVIDER = "kubernetes"

#: Resource types each stack must create besides the common Kubernetes ones.
CLOUD_TYPES: dict[str, set[str]] = {
    "gke": {
        "pulumi:providers:gcp",
        "gcp:storage/bucket:Bucket",
        "gcp:storage/bucketIAMMember:BucketIAMMember",
    },
    "eks": {
        "pulumi:providers:aws",
        "aws:s3/bucket:Bucket",
        "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock",
        "aws:iam/role:Role",
        "aws:eks/podIdentityAssociation:PodIdentityAssociation",
    },
    "aks": {
        "pulumi:providers:azure-native",
        "azure-native:resources:ResourceGroup",
        "azure-native:storage:StorageAccount",
        "azure-native:storage:BlobContainer",
        "azure-native:managedidentity:UserAssignedIdentity",
        "azure-native:managedidentity:FederatedIdentityCredential",
        "azure-native:authorization:RoleAssignment",
    },
    "kind": set(),
}
COMMON_TYPES = {
    "pulumi:providers:kubernetes",
    "kubernetes:helm.sh/v3:Release",
    "kubernetes:core/v1:Namespace",
    "kubernetes:core/v1:ServiceAccount",
    "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole",
    "kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding",
    "kubernetes:apps/v1:Deployment",
    "kubernetes:core/v1:Service",
}


@dataclass
class StackRun:
    stack: str
    values: dict[str, Any]
    mocks: RecordingMocks
    outputs: dict[str, Any]
    kubeconfig_is_secret: bool

    def k8s(self, kind: str) -> list[RecordedResource]:
        return [r for r in self.mocks.resources if r.typ.startswith("kubernetes:") and r.typ.endswith(f":{kind}")]

    def k8s_named(self, kind: str, name: str, namespace: str | None = None) -> RecordedResource:
        found = [
            r
            for r in self.k8s(kind)
            if r.inputs["metadata"]["name"] == name
            and (namespace is None or r.inputs["metadata"].get("namespace") == namespace)
        ]
        assert len(found) == 1, f"{kind} {namespace}/{name}: found {len(found)}"
        return found[0]


def engine_config(values: dict[str, Any]) -> dict[str, str]:
    """The stack file's values the way the engine hands them over: strings, objects as JSON."""
    return {f"{NAMESPACE}:{k}": v if isinstance(v, str) else json.dumps(v) for k, v in values.items()}


def run_stack(stack: str) -> StackRun:
    values = stack_values(stack)
    values["kubeconfig"] = FAKE_KUBECONFIG
    mocks = RecordingMocks.install()
    pulumi.runtime.set_all_config(engine_config(values))
    outputs: dict[str, Any] = {}
    secret: list[bool] = []

    @settled
    def program() -> pulumi.Output[None]:
        deployment = deploy()
        is_secret = pulumi.Output.from_input(deployment.cluster.kubeconfig.is_secret())
        return pulumi.Output.all(deployment.outputs, is_secret).apply(
            lambda parts: (outputs.update(parts[0]), secret.append(parts[1]))[0]
        )

    try:
        program()
    finally:
        pulumi.runtime.set_all_config({})
    return StackRun(stack, values, mocks, outputs, secret == [True])


def deploy_with(
    values: dict[str, Any], extra_calls: dict[str, Callable[[State], State]] | None = None
) -> tuple[RecordingMocks, dict[str, Any]]:
    """Run the program on these stack values under fresh mocks (``extra_calls``: invoke answers
    that replace the defaults); the mocks and the stack's outputs."""
    mocks = RecordingMocks.install(extra_calls)
    pulumi.runtime.set_all_config(engine_config(values))
    outputs: dict[str, Any] = {}

    @settled
    def program() -> pulumi.Output[None]:
        return pulumi.Output.from_input(deploy().outputs).apply(outputs.update)

    try:
        program()
    finally:
        pulumi.runtime.set_all_config({})
    return mocks, outputs


def created_cluster_values(stack: str) -> dict[str, Any]:
    """The example stack with ``createCluster`` instead of an existing cluster."""
    values = stack_values(stack)
    for key in ("kubeconfig", "kubeContext"):
        del values[key]
    values["createCluster"] = True
    cloud = {"gke": "gcp", "eks": "aws", "aks": "azure"}[stack]
    dropped = ("oidcIssuerUrl", "clusterName", "kubeletObjectId")
    values[cloud] = {k: v for k, v in values[cloud].items() if k not in dropped}
    if stack == "eks":
        values[cloud]["subnetIds"] = ["subnet-a", "subnet-b"]
    return values


@pytest.fixture(scope="module", params=STACKS)
def run(request: pytest.FixtureRequest) -> Iterator[StackRun]:
    yield run_stack(str(request.param))


def container_env(deployment: RecordedResource) -> dict[str, Any]:
    container = deployment.inputs["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_every_expected_resource_type_exists(run: StackRun) -> None:
    types = {r.typ for r in run.mocks.resources}
    expected = COMMON_TYPES | CLOUD_TYPES[run.stack]
    if run.values.get("images", {}).get("build", True):
        expected |= {"pulumi:providers:docker-build", "docker-build:index:Image"}
    assert expected <= types, f"missing: {sorted(expected - types)}"


def test_every_resource_has_an_explicit_provider(run: StackRun) -> None:
    providers = [r for r in run.mocks.resources if r.typ.startswith("pulumi:providers:")]
    assert not [p.name for p in providers if p.name.startswith("default")], "a default provider was created"
    assert len({p.typ for p in providers}) == len(providers), "one provider per package"
    custom = [r for r in run.mocks.resources if r.custom and not r.typ.startswith("pulumi:")]
    assert custom
    for r in custom:
        package = r.typ.split(":", 1)[0]
        assert r.provider_name == package, f"{r.typ} {r.name} uses provider {r.provider_name!r}"
    assert all(r.provider_name == K8S_PROVIDER for r in custom if r.typ.startswith("kubernetes:"))
    for token, _args, provider in run.mocks.calls:
        assert f"::{token.split(':', 1)[0]}::" in provider, f"invoke {token} without the explicit provider"


def test_kubernetes_provider_uses_the_stack_kubeconfig_and_context(run: StackRun) -> None:
    provider = run.mocks.one("pulumi:providers:kubernetes")
    assert provider.inputs["kubeconfig"] == FAKE_KUBECONFIG
    assert run.kubeconfig_is_secret, "the kubeconfig must never show in state or logs in clear"
    assert provider.inputs["context"] == run.values["kubeContext"]
    assert provider.inputs["clusterIdentifier"]


def test_kuberay_release_turns_the_history_gate_on(run: StackRun) -> None:
    (release,) = [
        r for r in run.mocks.of_type("kubernetes:helm.sh/v3:Release") if r.inputs["chart"] == "kuberay-operator"
    ]
    gates = {g["name"]: g["enabled"] for g in release.inputs["values"]["featureGates"]}
    assert gates[HISTORY_SERVER_GATE] is True
    assert gates["RayClusterStatusConditions"] is True, "the chart's default gates are kept"
    assert release.inputs["version"] == run.values["kuberay"]["version"]
    assert (
        release.inputs["namespace"] == run.values["kuberay"]["namespace"]
        if "namespace" in run.values["kuberay"]
        else "ray-system"
    )


def test_service_maps_30080_to_8080(run: StackRun) -> None:
    service = run.k8s_named("Service", "historyserver", run.values["namespace"])
    ports = service.inputs["spec"]["ports"]
    assert [(p["port"], p["targetPort"]) for p in ports] == [(30080, 8080)]
    assert run.outputs["historyServer"] == {
        "name": "historyserver",
        "namespace": run.values["namespace"],
        "port": 30080,
        "url": f"http://historyserver.{run.values['namespace']}.svc.cluster.local:30080",
    }


def test_deployment_env_is_the_storage_env(run: StackRun) -> None:
    deployment = run.k8s_named("Deployment", "historyserver", run.values["namespace"])
    env = container_env(deployment)
    storage_env = run.outputs["storageEnv"]
    assert storage_env["STORAGE_BACKEND"] == {"gke": "gcs", "eks": "s3", "aks": "azureblob", "kind": "s3"}[run.stack]
    for name, value in storage_env.items():
        assert env.get(name) == value, name
    for name, ref in run.outputs["storageSecretEnv"].items():
        assert env[name] == {"secretKeyRef": {"name": ref["secret"], "key": ref["key"]}}
    image = deployment.inputs["spec"]["template"]["spec"]["containers"][0]["image"]
    # The Deployment runs exactly the output reference (tag@sha256:... when built).
    assert run.outputs["serverImage"] == image


def test_history_server_options_block(run: StackRun) -> None:
    options = run.outputs["historyServerOptions"]["collectorOptions"]
    assert options["image"] == run.outputs["collectorImage"]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in options["env"]}
    for name, value in run.outputs["storageEnv"].items():
        assert env[name] == value
    assert set(run.outputs["storageSecretEnv"]) <= set(env)
    assert options["resources"]["limits"]


def test_workload_accounts_exist_in_every_namespace(run: StackRun) -> None:
    workloads = run.values["workloads"]
    expected = [{"namespace": ns, "name": workloads["serviceAccount"]} for ns in workloads["namespaces"]]
    assert run.outputs["workloadServiceAccounts"] == expected
    for account in expected:
        run.k8s_named("ServiceAccount", account["name"], account["namespace"])


def _accounts(run: StackRun) -> list[RecordedResource]:
    server = run.k8s_named("ServiceAccount", "ray-history-server", run.values["namespace"])
    writers = [
        run.k8s_named("ServiceAccount", run.values["workloads"]["serviceAccount"], ns)
        for ns in run.values["workloads"]["namespaces"]
    ]
    return [server, *writers]


def test_identity_wiring_matches_the_service_accounts(run: StackRun) -> None:
    accounts = _accounts(run)
    subjects = {f"{a.inputs['metadata']['namespace']}/{a.inputs['metadata']['name']}" for a in accounts}
    if run.stack == "gke":
        members = {r.inputs["member"] for r in run.mocks.of_type("gcp:storage/bucketIAMMember:BucketIAMMember")}
        bound = {m.split("/subject/ns/")[1].replace("/sa/", "/") for m in members}
        assert bound == subjects
        assert all(
            "iam.gke.io/gcp-service-account" not in (a.inputs["metadata"].get("annotations") or {}) for a in accounts
        )
    elif run.stack == "eks":
        associations = run.mocks.of_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")
        assert {f"{r.inputs['namespace']}/{r.inputs['serviceAccount']}" for r in associations} == subjects
        role_arns = {r.state["arn"] for r in run.mocks.of_type("aws:iam/role:Role")}
        assert {r.inputs["roleArn"] for r in associations} <= role_arns
        assert {r.inputs["clusterName"] for r in associations} == {run.values["aws"]["clusterName"]}
    elif run.stack == "aks":
        identities = {
            r.state["clientId"] for r in run.mocks.of_type("azure-native:managedidentity:UserAssignedIdentity")
        }
        for account in accounts:
            assert account.inputs["metadata"]["annotations"]["azure.workload.identity/client-id"] in identities
        credentials = run.mocks.of_type("azure-native:managedidentity:FederatedIdentityCredential")
        assert {
            c.inputs["subject"].removeprefix("system:serviceaccount:").replace(":", "/") for c in credentials
        } == subjects
        assert {c.inputs["issuer"] for c in credentials} == {run.values["azure"]["oidcIssuerUrl"]}
        deployment = run.k8s_named("Deployment", "historyserver", run.values["namespace"])
        assert deployment.inputs["spec"]["template"]["metadata"]["labels"]["azure.workload.identity/use"] == "true"
        assert run.outputs["workloadPodLabels"] == {
            ns: {"azure.workload.identity/use": "true"} for ns in run.values["workloads"]["namespaces"]
        }
    else:  # kind: static MinIO keys from a Secret, no cloud identity
        assert run.outputs["storageSecretEnv"]
        assert not any((a.inputs["metadata"].get("annotations") or {}) for a in accounts)


def test_images(run: StackRun) -> None:
    images = run.values["images"]
    built = run.mocks.of_type("docker-build:index:Image")
    if not images.get("build", True):
        assert not built
        return
    assert len(built) == 2
    refs = {r.state["ref"] for r in built}
    assert {run.outputs["collectorImage"], run.outputs["serverImage"]} == refs
    if run.stack == "kind":
        assert all(tag.startswith(f"{images['registry']}/") for r in built for tag in r.inputs["tags"])


# Run by a fresh interpreter the way the language host runs a program directory:
# sys.path[0] is infra/, the repository root is not importable, cwd is elsewhere.
_AS_PULUMI_RUNS_IT = """
import json, runpy, sys
import pulumi

class Mocks(pulumi.runtime.Mocks):
    types = []
    def new_resource(self, args):
        Mocks.types.append(args.typ)
        return f"{args.name}_id", {**args.inputs, "name": args.name}
    def call(self, args):
        return {}

program = sys.argv[1]
sys.path[0] = program
pulumi.runtime.set_mocks(Mocks(), project="ray-history-server", stack="kind", preview=True)
pulumi.runtime.set_all_config(json.loads(sys.argv[2]))

@pulumi.runtime.test
def run():
    runpy.run_path(program + "/__main__.py", run_name="__main__")

run()
print(json.dumps(sorted(set(Mocks.types))))
"""


def test_main_runs_with_infra_as_the_program_directory(tmp_path: Any) -> None:
    import subprocess
    import sys
    from pathlib import Path

    program = Path(__file__).resolve().parents[3] / "infra"
    values = stack_values("kind") | {"kubeconfig": FAKE_KUBECONFIG}
    done = subprocess.run(
        [sys.executable, "-c", _AS_PULUMI_RUNS_IT, str(program), json.dumps(engine_config(values))],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    types = json.loads(done.stdout.strip().splitlines()[-1])
    assert {"kubernetes:apps/v1:Deployment", "rayhistory:kind:MinioHistoryStorage"} <= set(types)


class StackReferenceMocks(RecordingMocks):
    """RecordingMocks whose StackReferences export a kubeconfig (as a cluster stack would)."""

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        resource_id, state = super().new_resource(args)
        if args.typ == "pulumi:pulumi:StackReference":
            state["outputs"] = {"clusterKubeconfig": FAKE_KUBECONFIG}
        return resource_id, state


def test_kubeconfig_from_a_cluster_stack() -> None:
    values = stack_values("gke")
    del values["kubeconfig"]
    values["clusterStack"] = {"name": "acme/clusters/prod", "kubeconfigOutput": "clusterKubeconfig"}
    mocks = StackReferenceMocks()
    pulumi.runtime.set_mocks(mocks, project="ray-history-server", stack="test", preview=False)
    pulumi.runtime.set_all_config(engine_config(values))
    done: list[str] = []

    @settled
    def program() -> pulumi.Output[None]:
        return pulumi.Output.from_input(deploy().outputs).apply(lambda _: done.append("ok"))

    try:
        program()
    finally:
        pulumi.runtime.set_all_config({})
    assert done == ["ok"]
    reference = mocks.one("pulumi:pulumi:StackReference")
    assert reference.inputs["name"] == "acme/clusters/prod"
    provider = mocks.one("pulumi:providers:kubernetes")
    assert provider.inputs["kubeconfig"] == FAKE_KUBECONFIG
    assert provider.inputs["clusterIdentifier"] == "stack:acme/clusters/prod"


@pytest.mark.parametrize(
    ("stack", "cluster_type"),
    [
        ("gke", "gcp:container/cluster:Cluster"),
        ("eks", "aws:eks/cluster:Cluster"),
        ("aks", "azure-native:containerservice:ManagedCluster"),
    ],
)
def test_create_cluster_feeds_the_provider_and_the_identities(stack: str, cluster_type: str) -> None:
    values = created_cluster_values(stack)
    cloud = {"gke": "gcp", "eks": "aws", "aks": "azure"}[stack]
    mocks, outputs = deploy_with(values)
    cluster = mocks.one(cluster_type)
    assert cluster.provider_name == {"gke": "gcp", "eks": "aws", "aks": "azure-native"}[stack]
    provider = mocks.one("pulumi:providers:kubernetes")
    assert "apiVersion" in provider.inputs["kubeconfig"] or "clusters" in provider.inputs["kubeconfig"]
    assert (
        provider.inputs["clusterIdentifier"]
        == f"{cloud}:{values['cluster']['name'] if 'cluster' in values else 'ray-history'}"
    )
    if stack == "eks":
        associations = mocks.of_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")
        assert associations and {a.inputs["clusterName"] for a in associations} == {cluster.state["name"]}
    if stack == "aks":
        credentials = mocks.of_type("azure-native:managedidentity:FederatedIdentityCredential")
        assert {c.inputs["issuer"] for c in credentials} == {AKS_ISSUER}
        assert len(mocks.of_type("azure-native:resources:ResourceGroup")) == 1
    assert outputs["historyServer"]["port"] == 30080


@pytest.mark.parametrize(
    ("stack", "registry_type"),
    [
        ("gke", "gcp:artifactregistry/repository:Repository"),
        ("eks", "aws:ecr/repository:Repository"),
        ("aks", "azure-native:containerregistry:Registry"),
    ],
)
def test_without_a_registry_the_stack_creates_the_clouds_one(stack: str, registry_type: str) -> None:
    values = stack_values(stack)
    values["kubeconfig"] = FAKE_KUBECONFIG
    values["images"] = {k: v for k, v in values.get("images", {}).items() if k != "registry"} | {"build": True}
    mocks, outputs = deploy_with(values)
    assert mocks.of_type(registry_type), f"no {registry_type}"
    built = mocks.of_type("docker-build:index:Image")
    assert len(built) == 2 and all(r.inputs.get("push") for r in built)
    deployment = next(r for r in mocks.resources if r.typ == "kubernetes:apps/v1:Deployment")
    assert deployment.inputs["spec"]["template"]["spec"]["containers"][0]["image"] == outputs["serverImage"]
    assert "@sha256:" in outputs["serverImage"]
    if stack == "aks":
        assert len(mocks.of_type("azure-native:resources:ResourceGroup")) <= 1
