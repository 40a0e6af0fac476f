"""The Pulumi package ``ray-history`` (any language): its schema, generated in-process as the
component-provider host generates it for ``pulumi package add``, and its components under mocks."""

from __future__ import annotations

import ast
import inspect
import json
from pathlib import Path
from typing import Any

import pulumi
import pytest
from pulumi.provider.experimental.component import ComponentProvider

from ray_history_pulumi import package
from ray_history_pulumi.package import COMPONENTS, PACKAGE_NAME
from tests.unit.infra.front_door_schemas import validate_front_door
from tests.unit.infra.metrics_schemas import validate_scrape_object
from tests.unit.infra.mocks import RecordingMocks, settled
from tests.unit.infra.schema_validation import validate_k8s

REPO = Path(__file__).resolve().parents[4]
PLUGIN = REPO / "pulumi-package"


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    provider = ComponentProvider(COMPONENTS, PACKAGE_NAME)
    loaded: dict[str, Any] = json.loads(provider.schema)
    return loaded


def _described(properties: dict[str, Any]) -> None:
    for name, prop in properties.items():
        assert prop.get("description"), name


@pytest.mark.parametrize("component", COMPONENTS, ids=lambda c: c.__name__)
def test_every_component_input_and_output_is_in_the_schema(schema: dict[str, Any], component: type) -> None:
    """Each component's args are inputs (their nested settings types too), its required keys
    required, its outputs properties, each with a description (what the generated SDKs show)."""
    resource = schema["resources"][f"{PACKAGE_NAME}:index:{component.__name__}"]
    args = inspect.get_annotations(component.__init__)["args"]
    assert set(resource["inputProperties"]) == {_camel(key) for key in args.__annotations__}
    assert set(resource["requiredInputs"]) == {_camel(key) for key in args.__required_keys__}
    outputs = {name for name, hint in inspect.get_annotations(component).items() if "Output" in str(hint)}
    assert outputs == {"bucket_name", "server_url", "namespace", "collector_env"}
    assert set(resource["properties"]) == {_camel(name) for name in outputs}
    _described(resource["inputProperties"])
    _described(resource["properties"])
    assert resource["isComponent"] is True
    for key, hint in args.__annotations__.items():
        nested = getattr(hint, "__args__", (None,))[0]
        if isinstance(nested, type) and hasattr(nested, "__required_keys__"):  # a settings TypedDict
            typ = schema["types"][f"{PACKAGE_NAME}:index:{nested.__name__}"]
            assert resource["inputProperties"][_camel(key)]["$ref"] == f"#/types/{PACKAGE_NAME}:index:{nested.__name__}"
            assert set(typ["properties"]) == {_camel(k) for k in nested.__annotations__}
            assert set(typ.get("required", [])) == {_camel(k) for k in nested.__required_keys__}
            _described(typ["properties"])


def test_the_schema_offers_exactly_the_packages_components(schema: dict[str, Any]) -> None:
    assert schema["name"] == PACKAGE_NAME
    assert set(schema["resources"]) == {f"{PACKAGE_NAME}:index:{c.__name__}" for c in COMPONENTS}
    assert set(schema["types"]) == {
        f"{PACKAGE_NAME}:index:{t}" for t in ("GcpSettings", "AwsSettings", "AzureSettings", "MetricsSettings")
    }
    # Values a program usually takes from other resources stay Inputs (no "plain").
    aws = schema["types"][f"{PACKAGE_NAME}:index:AwsSettings"]["properties"]
    image = schema["resources"][f"{PACKAGE_NAME}:index:RayHistory"]["inputProperties"]["image"]
    assert not aws["clusterName"].get("plain") and not image.get("plain")


def test_the_plugin_directory_hosts_these_components() -> None:
    """``pulumi package add`` reads PulumiPlugin.yaml (https://www.pulumi.com/docs/reference/pulumiplugin-yaml/)
    and runs ``__main__.py``, which must host exactly :data:`COMPONENTS` under :data:`PACKAGE_NAME`."""
    manifest = (PLUGIN / "PulumiPlugin.yaml").read_text()
    assert "runtime: python" in manifest
    tree = ast.parse((PLUGIN / "__main__.py").read_text())
    calls = [
        n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "component_provider_host"
    ]
    assert len(calls) == 1
    keywords = {k.arg: ast.unparse(k.value) for k in calls[0].keywords}
    assert keywords == {"components": "COMPONENTS", "name": "PACKAGE_NAME"}
    requirement = [line for line in (PLUGIN / "requirements.txt").read_text().splitlines() if not line.startswith("#")]
    assert requirement == ["..[infra]"] and (PLUGIN.parent / "pyproject.toml").is_file()


def _construct(component: type, args: dict[str, Any]) -> RecordingMocks:
    mocks = RecordingMocks.install()
    seen: dict[str, Any] = {}

    @settled
    def run() -> pulumi.Output[None]:
        made = component("history", args)
        return pulumi.Output.all(made.bucket_name, made.server_url, made.namespace, made.collector_env).apply(
            lambda values: seen.update(zip(("bucket", "url", "namespace", "env"), values, strict=True))
        )

    run()
    mocks.outputs = seen  # type: ignore[attr-defined]
    return mocks


CASES: list[tuple[dict[str, Any], str, str]] = [
    (
        {"gcp": {"project": "demo-proj", "location": "US"}},
        "gcp:storage/bucket:Bucket",
        "kubernetes:networking.gke.io/v1:ManagedCertificate",
    ),
    ({"aws": {"cluster_name": "demo"}}, "aws:s3/bucket:Bucket", "kubernetes:networking.k8s.io/v1:Ingress"),
    (
        {
            "azure": {
                "resource_group_name": "rg",
                "storage_account_name": "rayhistory1",
                "oidc_issuer_url": "https://issuer.example.com/",
                "key_vault_certificate_uri": "https://rh-kv.vault.azure.net/certificates/ray-history",
            }
        },
        "azure-native:storage:BlobContainer",
        "kubernetes:networking.k8s.io/v1:Ingress",
    ),
]


@pytest.mark.parametrize(("cloud_args", "bucket_type", "door_type"), CASES, ids=("gcp", "aws", "azure"))
def test_each_cloud_builds_storage_server_writers_and_its_front_door(
    cloud_args: dict[str, Any], bucket_type: str, door_type: str
) -> None:
    args = {
        "image": "registry.example/ray-history-server:0.1.0",
        "workload_namespaces": ["team-a", "team-b"],
        "ingress_host": "ray-history.example.com",
        "bucket_name": "demo-history",
        **cloud_args,
    }
    mocks = _construct(package.RayHistory, args)
    assert mocks.of_type(bucket_type)
    for resource in mocks.resources:
        if resource.typ.startswith(("kubernetes:networking.gke.io/", "kubernetes:cloud.google.com/")):
            validate_front_door(resource.inputs)
        elif resource.typ.startswith("kubernetes:") and resource.custom:
            validate_k8s(resource.inputs)
    assert mocks.of_type(door_type)
    writers = [
        r.inputs["metadata"]["namespace"]
        for r in mocks.of_type("kubernetes:core/v1:ServiceAccount")
        if r.inputs["metadata"]["name"] == "ray-history-collector"
    ]
    assert sorted(writers) == ["team-a", "team-b"]
    outputs = mocks.outputs  # type: ignore[attr-defined]
    assert outputs["namespace"] == "ray-history" and outputs["url"].startswith("http://historyserver.ray-history.svc")
    assert outputs["env"]["STORAGE_BACKEND"] in ("gcs", "s3", "azureblob")
    deployment = mocks.one("kubernetes:apps/v1:Deployment").inputs
    container_args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--auth=kubernetes" in container_args and "--secure-cookies" in container_args


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"image": "i"}, "exactly one of gcp, aws, azure"),
        ({"image": "i", "gcp": {"project": "p", "location": "US"}, "aws": {"cluster_name": "c"}}, "exactly one"),
        ({"image": "i", "aws": {"cluster_name": "c", "identity_mode": "keys"}}, "identity_mode"),
        ({"image": "i", "aws": {"cluster_name": "c"}, "shared_index": "yes"}, "shared_index='yes'"),
    ],
)
def test_bad_arguments_name_what_is_wrong(args: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _construct(package.RayHistory, args)


@pytest.mark.parametrize(("mode", "index_role"), [("off", None), ("read", "Reader"), ("write", "Contributor")])
def test_shared_index_reaches_the_storage_and_the_server(mode: str, index_role: str | None) -> None:
    """``shared_index`` on Azure: the index container (named by ``index_container_name``) and the
    server's role on it, scoped to it (https://learn.microsoft.com/azure/storage/blobs/assign-azure-role-data-access),
    and the server's ``SHARED_INDEX`` / ``SHARED_INDEX_CONTAINER``."""
    args = {
        "image": "registry.example/ray-history-server:0.1.0",
        "shared_index": mode,
        "azure": {
            "resource_group_name": "rg",
            "storage_account_name": "rayhistory1",
            "oidc_issuer_url": "https://issuer.example.com/",
            "index_container_name": "idx",
        },
    }
    mocks = _construct(package.RayHistory, args)
    containers = {r.resource_id: r.inputs["containerName"] for r in mocks.of_type("azure-native:storage:BlobContainer")}
    roles = {"2a2b9908-6ea1-4ae2-8e65-a410df84e7d1": "Reader", "ba92f5b4-2d11-453d-a403-e96b0029c9fe": "Contributor"}
    on_index = [
        roles[r.inputs["roleDefinitionId"].rsplit("/", 1)[1]]
        for r in mocks.of_type("azure-native:authorization:RoleAssignment")
        if containers.get(r.inputs["scope"]) == "idx"
    ]
    assert on_index == ([index_role] if index_role else [])
    container = mocks.one("kubernetes:apps/v1:Deployment").inputs["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["SHARED_INDEX"] == mode
    assert env.get("SHARED_INDEX_CONTAINER") == (None if mode == "off" else "idx")


def test_metrics_kube_prometheus_stack_reaches_the_server() -> None:
    args = {
        "image": "registry.example/ray-history-server:0.1.0",
        "workload_namespaces": ["team-a"],
        "aws": {"cluster_name": "demo"},
        "metrics": {"mode": "kube-prometheus-stack", "retention": "30d"},
    }
    mocks = _construct(package.RayHistory, args)
    releases = [
        r for r in mocks.of_type("kubernetes:helm.sh/v3:Release") if r.inputs["chart"] == "kube-prometheus-stack"
    ]
    assert len(releases) == 1
    assert releases[0].inputs["values"]["prometheus"]["prometheusSpec"]["retention"] == "30d"
    monitors = [r.inputs for r in mocks.resources if r.inputs.get("kind") in ("PodMonitor", "ServiceMonitor")]
    for obj in monitors:
        validate_scrape_object(obj)
        assert obj["spec"]["namespaceSelector"] == {"matchNames": ["team-a"]}
    container = mocks.one("kubernetes:apps/v1:Deployment").inputs["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["PROMETHEUS_URL"] == "http://ray-metrics-prometheus.ray-metrics.svc.cluster.local:9090"


def test_metrics_managed_on_gke_and_bad_mode() -> None:
    args: dict[str, Any] = {
        "image": "registry.example/ray-history-server:0.1.0",
        "workload_namespaces": ["team-a"],
        "gcp": {"project": "demo-proj", "location": "US"},
        "metrics": {"mode": "managed", "prometheus_url": "http://frontend.ray-metrics.svc:9090"},
    }
    mocks = _construct(package.RayHistory, args)
    (monitoring,) = [r.inputs for r in mocks.resources if r.inputs.get("kind") == "PodMonitoring"]
    validate_scrape_object(monitoring)
    with pytest.raises(ValueError, match=r"^mode: 'prom'"):
        _construct(package.RayHistory, {**args, "metrics": {"mode": "prom"}})
