"""Stack configuration validation: good stacks parse, every bad key is named in the error."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml

from infra.config import (
    NAMESPACE,
    AwsSettings,
    ConfigError,
    ImageSettings,
    StackConfig,
    WorkloadSettings,
    load_config,
    parse_config,
)
from infra.config_checks import check_federated_credentials

STACKS_DIR = Path(__file__).resolve().parents[3] / "infra" / "stacks"
STACKS = ("gke", "eks", "aks", "kind")


def stack_values(stack: str) -> dict[str, Any]:
    """The project's keys of infra/stacks/Pulumi.<stack>.yaml, prefix stripped."""
    document = yaml.safe_load((STACKS_DIR / f"Pulumi.{stack}.yaml").read_text())
    prefix = f"{NAMESPACE}:"
    return {k.removeprefix(prefix): v for k, v in document["config"].items() if k.startswith(prefix)}


def base(**overrides: Any) -> dict[str, Any]:
    """A valid minimal gcp configuration, with overrides (None removes a key)."""
    raw: dict[str, Any] = {
        "cloud": "gcp",
        "gcp": {"project": "my-project"},
        "kubeconfig": "/tmp/kubeconfig",
        "images": {"registry": "registry.example.com/ray"},
    }
    for key, value in overrides.items():
        if value is None:
            raw.pop(key, None)
        else:
            raw[key] = value
    return raw


#: A valid ``azure`` section for an existing AKS cluster (with ``base``'s images.registry).
AZURE: dict[str, Any] = {
    "location": "westeurope",
    "storageAccount": "rayhistory",
    "oidcIssuerUrl": "https://issuer.example/",
}


@pytest.mark.parametrize("stack", STACKS)
def test_every_example_stack_is_valid(stack: str) -> None:
    config = parse_config(stack_values(stack))
    assert config.cloud == {"gke": "gcp", "eks": "aws", "aks": "azure", "kind": "kind"}[stack]
    assert config.kuberay.version >= "1.7.0"


def test_defaults_of_a_minimal_stack() -> None:
    config = parse_config(base())
    assert config == StackConfig(
        cloud="gcp",
        kubeconfig="/tmp/kubeconfig",
        gcp=config.gcp,
        images=ImageSettings(registry="registry.example.com/ray"),
    )
    assert config.namespace == "ray-history"
    assert config.workloads == WorkloadSettings(("default",), "ray-history-collector", create_namespaces=False)
    assert config.gcp is not None and config.gcp.bucket_location == "US"


def test_pulumi_string_forms_are_decoded() -> None:
    """Pulumi hands scalars over as strings and objects as JSON text."""
    config = parse_config(
        base(
            createCluster="true",
            kubeconfig=None,
            cluster='{"nodeCount": "3", "name": "c1"}',
            workloads='{"namespaces": ["ml", "ops"], "serviceAccount": "ray", "createNamespaces": "true"}',
            storage={"forceDestroy": "false", "rootDir": "/prefix/"},
        )
    )
    assert config.create_cluster is True
    assert config.cluster.node_count == 3
    assert config.workloads == WorkloadSettings(("ml", "ops"), "ray", create_namespaces=True)
    assert config.storage.root_dir == "prefix"
    assert config.storage.force_destroy is False


def test_aws_existing_cluster_with_irsa() -> None:
    config = parse_config(
        {
            "cloud": "aws",
            "kubeconfig": "k",
            "images": {"build": False, "collector": "c:1", "server": "s:1"},
            "aws": {
                "region": "eu-west-1",
                "identityMode": "irsa",
                "oidcProviderArn": "arn:aws:iam::1:oidc-provider/x",
                "oidcIssuerUrl": "https://oidc.eks.eu-west-1.amazonaws.com/id/ABC",
            },
        }
    )
    assert config.aws == AwsSettings(
        region="eu-west-1",
        identity_mode="irsa",
        oidc_provider_arn="arn:aws:iam::1:oidc-provider/x",
        oidc_issuer_url="https://oidc.eks.eu-west-1.amazonaws.com/id/ABC",
    )


def test_cluster_stack_short_and_long_form() -> None:
    short = parse_config(base(kubeconfig=None, clusterStack="acme/clusters/prod"))
    assert short.cluster_stack is not None and short.cluster_stack.kubeconfig_output == "kubeconfig"
    long = parse_config(base(kubeconfig=None, clusterStack={"name": "acme/clusters/prod", "kubeconfigOutput": "kc"}))
    assert long.cluster_stack is not None and long.cluster_stack.kubeconfig_output == "kc"


BAD_CONFIGS: list[tuple[str, dict[str, Any], str]] = [
    (
        "cloud missing",
        {"kubeconfig": "k"},
        "ray-history-server:cloud must be one of gcp, aws, azure, kind (got nothing)",
    ),
    ("cloud typo", base(cloud="gce"), "ray-history-server:cloud must be one of gcp, aws, azure, kind (got 'gce')"),
    ("unknown top-level key", base(bukcet="b"), "ray-history-server:bukcet is not a known key"),
    (
        "unknown nested key",
        base(gcp={"project": "p", "regoin": "x"}),
        "ray-history-server:gcp.regoin is not a known key",
    ),
    ("gcp project missing", base(gcp={"region": "us-east1"}), "ray-history-server:gcp.project is required"),
    ("gcp section missing", base(gcp=None), "ray-history-server:gcp.project is required when cloud is gcp"),
    ("aws region missing", {"cloud": "aws", "kubeconfig": "k"}, "ray-history-server:aws.region is required"),
    ("azure location missing", {"cloud": "azure", "kubeconfig": "k", "azure": {}}, "ray-history-server:azure.location"),
    (
        "azure account missing",
        {"cloud": "azure", "kubeconfig": "k", "azure": {"location": "westeurope"}},
        "ray-history-server:azure.storageAccount is required",
    ),
    (
        "azure account name",
        {"cloud": "azure", "kubeconfig": "k", "azure": {"location": "westeurope", "storageAccount": "Ray-History"}},
        "ray-history-server:azure.storageAccount must be 3-24",
    ),
    ("other cloud's section", base(aws={"region": "us-east-1"}), "ray-history-server:aws is set but cloud is gcp"),
    (
        "aws identity mode",
        {"cloud": "aws", "kubeconfig": "k", "aws": {"region": "r", "identityMode": "kiam"}},
        "ray-history-server:aws.identityMode must be one of irsa, pod-identity (got 'kiam')",
    ),
    (
        "irsa without OIDC provider",
        {"cloud": "aws", "kubeconfig": "k", "aws": {"region": "r", "identityMode": "irsa"}},
        "ray-history-server:aws.oidcProviderArn is required for irsa",
    ),
    (
        "pod identity without cluster name",
        {"cloud": "aws", "kubeconfig": "k", "aws": {"region": "r"}},
        "ray-history-server:aws.clusterName is required for pod-identity",
    ),
    (
        "aks without issuer",
        {"cloud": "azure", "kubeconfig": "k", "azure": {"location": "westeurope", "storageAccount": "rayhist1"}},
        "ray-history-server:azure.oidcIssuerUrl is required",
    ),
    ("no cluster source", base(kubeconfig=None), "ray-history-server:kubeconfig (a path or the content) or"),
    (
        "two cluster sources",
        base(clusterStack="o/p/s"),
        "ray-history-server:kubeconfig and ray-history-server:clusterStack",
    ),
    (
        "eks creation without subnets",
        {"cloud": "aws", "createCluster": True, "aws": {"region": "r", "subnetIds": ["s1"]}},
        "ray-history-server:aws.subnetIds must list at least two subnets",
    ),
    ("kubeconfig with createCluster", base(createCluster=True), "ray-history-server:kubeconfig must not be set"),
    (
        "createCluster not a bool",
        base(createCluster="yes"),
        "ray-history-server:createCluster must be a boolean (got 'yes')",
    ),
    (
        "createCluster on kind",
        {"cloud": "kind", "createCluster": True, "images": {"registry": "localhost:5001"}},
        "ray-history-server:createCluster is not supported for kind",
    ),
    (
        "bad cluster stack",
        base(kubeconfig=None, clusterStack="a/b"),
        "ray-history-server:clusterStack.name must look like",
    ),
    (
        "cluster stack without name",
        base(kubeconfig=None, clusterStack={"kubeconfigOutput": "x"}),
        "clusterStack.name is required",
    ),
    ("namespace", base(namespace="Ray_History"), "ray-history-server:namespace must be a Kubernetes name"),
    (
        "node count zero",
        base(cluster={"nodeCount": 0}),
        "ray-history-server:cluster.nodeCount must be at least 1 (got 0)",
    ),
    ("node count text", base(cluster={"nodeCount": "many"}), "ray-history-server:cluster.nodeCount must be an integer"),
    ("node count bool", base(cluster={"nodeCount": True}), "ray-history-server:cluster.nodeCount must be an integer"),
    ("cluster not an object", base(cluster="big"), "ray-history-server:cluster must be an object (got 'big')"),
    ("bucket name", base(storage={"bucket": "My_Bucket"}), "ray-history-server:storage.bucket must be 3-63"),
    ("old kuberay", base(kuberay={"version": "1.6.2"}), "ray-history-server:kuberay.version must be 1.7.0 or later"),
    ("kuberay version text", base(kuberay={"version": "latest"}), "ray-history-server:kuberay.version must be a chart"),
    (
        "kuberay namespace",
        base(kuberay={"namespace": "-x"}),
        "ray-history-server:kuberay.namespace must be a Kubernetes",
    ),
    (
        "pull policy",
        base(images={"pullPolicy": "always"}),
        "ray-history-server:images.pullPolicy must be one of Always",
    ),
    (
        "prebuilt without refs",
        base(images={"build": False, "server": "s"}),
        "ray-history-server:images.collector is required",
    ),
    (
        "kind build without registry",
        {"cloud": "kind", "kubeconfig": "k"},
        "ray-history-server:images.registry is required on kind when images.build is true",
    ),
    ("workloads not an object", base(workloads="default"), "ray-history-server:workloads must be an object"),
    ("no workload namespaces", base(workloads={"namespaces": []}), "ray-history-server:workloads.namespaces must list"),
    (
        "bad namespace",
        base(workloads={"namespaces": ["ok", "Not_OK"]}),
        "ray-history-server:workloads.namespaces[1] must",
    ),
    ("namespace twice", base(workloads={"namespaces": ["a", "a"]}), "ray-history-server:workloads.namespaces lists a"),
    ("bad account", base(workloads={"serviceAccount": "A"}), "ray-history-server:workloads.serviceAccount must be"),
    (
        "workload typo",
        base(workloads={"namespace": ["a"]}),
        "ray-history-server:workloads.namespace is not a known key",
    ),
    # #13 item 10: the server's namespace is 'restricted'; with createNamespaces it would be made twice.
    (
        "ray in the server namespace",
        base(workloads={"namespaces": ["team-a", "ray-history"], "createNamespaces": True}),
        "ray-history-server:workloads.namespaces lists 'ray-history', the history server's namespace",
    ),
    (
        "ray in a custom server namespace",
        base(namespace="platform", workloads={"namespaces": ["platform"]}),
        "ray-history-server:workloads.namespaces lists 'platform'",
    ),
    # #13 item 12: the clouds' real cluster-name limits, not Kubernetes' 63.
    (
        "gke name over 40",
        {"cloud": "gcp", "createCluster": True, "gcp": {"project": "p"}, "cluster": {"name": "r" * 41}},
        "ray-history-server:cluster.name is 41 characters: GKE cluster names allow 40",
    ),
    (
        "gke name starting with a digit",
        {"cloud": "gcp", "createCluster": True, "gcp": {"project": "p"}, "cluster": {"name": "1ray"}},
        "ray-history-server:cluster.name must start with a letter on GKE",
    ),
    (
        "aks name over 54",
        {
            "cloud": "azure",
            "createCluster": True,
            "azure": {"location": "westeurope", "storageAccount": "rayhist1"},
            "cluster": {"name": "r" * 55},
        },
        "ray-history-server:cluster.name is 55 characters: AKS uses the name as its DNS prefix",
    ),
    (
        "max below node count",
        base(cluster={"nodeCount": 4, "maxNodeCount": 2}),
        "ray-history-server:cluster.maxNodeCount must be at least cluster.nodeCount (4), got 2",
    ),
    # #13 item 1: the kubelet identity of an existing AKS cluster must be known to grant AcrPull.
    (
        "aks existing cluster building without kubelet id",
        {
            "cloud": "azure",
            "kubeconfig": "k",
            "azure": {"location": "westeurope", "storageAccount": "rayhist1", "oidcIssuerUrl": "https://i/"},
        },
        "ray-history-server:azure.kubeletObjectId is required to build images",
    ),
    (
        "gcp pull members without a stack registry",
        base(gcp={"project": "p", "imagePullMembers": ["serviceAccount:n@p.iam.gserviceaccount.com"]}),
        "ray-history-server:gcp.imagePullMembers applies only",
    ),
    (
        "gcp pull member form",
        base(gcp={"project": "p", "imagePullMembers": ["nodes@p.iam.gserviceaccount.com"]}, images=None),
        "ray-history-server:gcp.imagePullMembers[0] must be an IAM member",
    ),
    # #13 items 4, 11: the server's cache and the names that are cluster- or project-wide.
    ("cache size", base(historyServer={"cacheSize": "lots"}), "ray-history-server:historyServer.cacheSize must be"),
    # #18 item 5: replicas.
    ("no replicas", base(historyServer={"replicas": 0}), "ray-history-server:historyServer.replicas must be at least"),
    ("replicas not a number", base(historyServer={"replicas": "two"}), "ray-history-server:historyServer.replicas"),
    (
        "cache storage class",
        base(historyServer={"cacheStorageClass": "Fast SSD"}),
        "ray-history-server:historyServer.cacheStorageClass must be a StorageClass",
    ),
    (
        "cluster role name",
        base(historyServer={"clusterRoleName": "Reader"}),
        "ray-history-server:historyServer.clusterRoleName must be a Kubernetes object name",
    ),
    (
        "helm release name",
        base(kuberay={"releaseName": "KubeRay"}),
        "ray-history-server:kuberay.releaseName must be a Kubernetes name",
    ),
    ("repository", base(images={"repository": "Ray History"}), "ray-history-server:images.repository must be"),
    # #18 item 4: shared indexes, opt-in write.
    (
        "shared index mode",
        base(historyServer={"sharedIndex": "rw"}),
        "ray-history-server:historyServer.sharedIndex must be one of off, read, write (got 'rw')",
    ),
    (
        "index container name",
        base(cloud="azure", gcp=None, azure={**AZURE, "indexContainer": "Index_1"}),
        "ray-history-server:azure.indexContainer must be a blob container name",
    ),
    (
        "index container with a double hyphen",
        base(cloud="azure", gcp=None, azure={**AZURE, "indexContainer": "ray--index"}),
        "ray-history-server:azure.indexContainer must be a blob container name",
    ),
    (
        "index container is the history container",
        base(cloud="azure", gcp=None, storage={"bucket": "history"}, azure={**AZURE, "indexContainer": "history"}),
        "ray-history-server:azure.indexContainer is 'history', the history container",
    ),
    # The CronJob's `ray-history gc --older-than=<days>d` refuses more than 36500 days.
    (
        "retention beyond gc's limit",
        base(retention={"days": 40000}),
        "ray-history-server:retention.days must be at most",
    ),
    ("no retention days", base(retention={"days": 0}), "ray-history-server:retention.days must be at least 1"),
]


def test_retention_days_up_to_what_gc_accepts() -> None:
    """``retention.days`` is bounded by runtime/cli/gc.py's MAX_AGE_DAYS: a larger value would deploy
    a CronJob whose every run exits with a usage error."""
    from runtime.cli.gc import MAX_AGE_DAYS

    assert parse_config(base(retention={"days": MAX_AGE_DAYS})).retention.days == MAX_AGE_DAYS == 36500
    with pytest.raises(ConfigError, match=r"retention\.days must be at most 36500"):
        parse_config(base(retention={"days": MAX_AGE_DAYS + 1}))


def test_shared_index_defaults_to_read_and_accepts_each_mode() -> None:
    config = parse_config(base())
    assert config.history_server.shared_index == "read"
    for mode in ("off", "read", "write"):
        assert parse_config(base(historyServer={"sharedIndex": mode})).history_server.shared_index == mode
    azure = parse_config(base(cloud="azure", gcp=None, azure=AZURE)).azure
    assert azure is not None and azure.index_container == "ray-history-index"
    # ``off`` has no index container, so it may not clash with the history one.
    off = base(
        cloud="azure",
        gcp=None,
        storage={"bucket": "history"},
        azure={**AZURE, "indexContainer": "history"},
        historyServer={"sharedIndex": "off"},
    )
    assert parse_config(off).history_server.shared_index == "off"


@pytest.mark.parametrize(("raw", "message"), [c[1:] for c in BAD_CONFIGS], ids=[c[0] for c in BAD_CONFIGS])
def test_bad_config_names_the_key(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_config(raw)
    assert message in str(error.value)


def test_load_config_reads_the_running_stack() -> None:
    """The same path Pulumi uses: the engine's config map (here set as the test harness would)."""
    values = stack_values("eks")
    pulumi.runtime.set_all_config(
        {f"{NAMESPACE}:{k}": v if isinstance(v, str) else json.dumps(v) for k, v in values.items()}
        | {"aws:region": "ignored-other-namespace"}
    )
    try:
        config = load_config()
    finally:
        pulumi.runtime.set_all_config({})
    assert config == parse_config(values)


def test_load_config_reports_a_typo_in_the_stack() -> None:
    pulumi.runtime.set_all_config({f"{NAMESPACE}:cloud": "kind", f"{NAMESPACE}:kubeconfg": "/k"})
    try:
        with pytest.raises(ConfigError, match="ray-history-server:kubeconfg is not a known key"):
            load_config()
    finally:
        pulumi.runtime.set_all_config({})


def test_kubeconfig_path_or_content(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from infra.providers import read_kubeconfig

    content = "apiVersion: v1\nkind: Config\n"
    assert read_kubeconfig(content) == content
    (tmp_path / "kc").write_text(content)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert read_kubeconfig("~/kc") == content
    with pytest.raises(ConfigError, match=r"ray-history-server:kubeconfig: cannot read '.*/missing'"):
        read_kubeconfig(str(tmp_path / "missing"))


def test_names_shared_by_stacks_are_configurable() -> None:
    """Two stacks on one cluster or project set their own names (#13 item 11)."""
    config = parse_config(
        base(
            historyServer={
                "clusterRoleName": "raycluster-reader-team-b",
                "cacheSize": "50Gi",
                "cacheStorageClass": "ssd",
            },
            kuberay={"install": False, "releaseName": "kuberay-team-b"},
            images={"repository": "ray-history-team-b"},
        )
    )
    assert config.history_server.cluster_role_name == "raycluster-reader-team-b"
    assert (config.history_server.cache_size, config.history_server.cache_storage_class) == ("50Gi", "ssd")
    assert config.kuberay.release_name == "kuberay-team-b"
    assert config.images.repository == "ray-history-team-b"


def test_history_server_replicas() -> None:
    """One pod unless asked; Pulumi hands ``pulumi config set --path historyServer.replicas 3`` over as a string."""
    assert parse_config(base()).history_server.replicas == 1
    assert parse_config(base(historyServer={"replicas": "3"})).history_server.replicas == 3


#: Azure: "A maximum of 20 federated identity credentials can be added to an application or
#: user-assigned managed identity."
FIC_LIMIT = 20


def _azure_namespaces(count: int, **overrides: Any) -> dict[str, Any]:
    return base(
        cloud="azure",
        gcp=None,
        azure=AZURE,
        workloads={"namespaces": [f"team-{i}" for i in range(count)]},
        **overrides,
    )


def test_azure_takes_more_namespaces_than_one_identity_takes_credentials() -> None:
    """Each workload namespace's collectors get a managed identity of their own on Azure, so 21
    (and more) ``workloads.namespaces`` no longer meet the 20 credentials one identity takes.

    Azure: "A maximum of 20 federated identity credentials can be added to an application or
    user-assigned managed identity"
    (https://learn.microsoft.com/en-us/entra/workload-id/workload-identity-federation-considerations).
    """
    config = parse_config(_azure_namespaces(FIC_LIMIT + 1, retention={"days": 30}))
    assert len(config.workloads.namespaces) == FIC_LIMIT + 1
    assert len(parse_config(_azure_namespaces(40)).workloads.namespaces) == 40


def test_azure_refuses_more_collector_accounts_in_one_namespace_than_its_identity_takes() -> None:
    """The guard behind the config: 21 collector service accounts in one namespace would share that
    namespace's identity, one credential each, over Azure's 20 per identity (same page as above):
    refused at config time naming the key and the namespace, not in the middle of ``pulumi up``.
    The config itself lists a namespace once with one service account, so the crowded namespace
    is built by hand."""
    config = parse_config(_azure_namespaces(1))
    crowded = dataclasses.replace(config, workloads=dataclasses.replace(config.workloads, namespaces=("team-0",) * 21))
    with pytest.raises(
        ConfigError, match=r"ray-history-server:workloads\.namespaces gives namespace 'team-0' 21 .*at most 20"
    ):
        check_federated_credentials(crowded)
    check_federated_credentials(
        dataclasses.replace(crowded, workloads=dataclasses.replace(crowded.workloads, namespaces=("team-0",) * 20))
    )


@pytest.mark.parametrize("repository", ["team-a/ray-history", "ray_history", "ray.history", "ray-", "9ray", "r" * 64])
def test_gcp_repository_must_be_an_artifact_registry_id(repository: str) -> None:
    """On GCP, with the stack creating the registry, ``images.repository`` is the Artifact Registry
    repository id: lower-case letters, digits and hyphens, a letter first, a letter or digit last, at
    most 63 characters (https://cloud.google.com/artifact-registry/docs/repositories/create-repos).
    Artifact Registry rejected anything else at ``pulumi up``; now the config stops first."""
    with pytest.raises(ConfigError, match=r"ray-history-server:images\.repository "):
        parse_config(base(images={"repository": repository}))


def test_repository_paths_stay_valid_where_they_are_paths() -> None:
    """ECR and ACR take ``/``-separated paths, and so does an existing registry on GCP."""
    aws = parse_config(
        base(
            cloud="aws",
            gcp=None,
            aws={"region": "us-east-1", "clusterName": "ray"},
            images={"repository": "team-a/ray"},
        )
    )
    assert aws.images.repository == "team-a/ray"
    existing = parse_config(base(images={"registry": "us-docker.pkg.dev/p/r", "repository": "team-a/ray"}))
    assert existing.images.repository == "team-a/ray"
    assert parse_config(base(images={"repository": "r" * 63})).images.repository == "r" * 63
