"""ray_history_pulumi/history_server.py under Pulumi mocks; every object schema-validated."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pulumi
import pytest
import ray

from ray_history_pulumi.cloud_ingress import HistoryServerIngress
from ray_history_pulumi.contracts import IdentityWiring, StorageWiring
from ray_history_pulumi.history_server import (
    CACHE_DIR,
    DASHBOARD_DIR,
    HistoryServerArgs,
    HistoryServerK8s,
    quantity_bytes,
)
from runtime.server import settings as server_settings
from runtime.server.main import build_parser
from tests.unit.infra.mocks import RecordedResource, RecordingMocks, settled
from tests.unit.infra.schema_validation import validate_k8s

K8S = "kubernetes:"
AZURE_WIRING = StorageWiring(
    backend="azureblob",
    bucket="ray-history",
    env=pulumi.Output.from_input(
        {
            "STORAGE_BACKEND": "azureblob",
            "AZURE_STORAGE_ACCOUNT_URL": "https://acct.blob.core.windows.net/",
            "AZURE_STORAGE_CONTAINER": "ray-history",
        }
    ),
    server=IdentityWiring(
        service_account_annotations=pulumi.Output.from_input({"azure.workload.identity/client-id": "cid-123"}),
        pod_labels={"azure.workload.identity/use": "true"},
        env={"AZURE_CLIENT_ID": "cid-123"},
    ),
    secret_env={"AZURE_STORAGE_CONNECTION_STRING": ("azure-conn", "connection-string")},
    index_container="ray-history-index",
)


def _deploy(args: HistoryServerArgs, preview: bool = False) -> list[RecordedResource]:
    mocks = RecordingMocks.install(preview=preview)

    # settled: read the resources only once every one has registered; the Ingress
    # waits on the Service, so it can still be registering when the outputs resolve.
    @settled
    def run() -> None:
        HistoryServerK8s("history", args)

    run()
    return [r for r in mocks.resources if r.typ.startswith(K8S)]


def _by_kind(resources: list[RecordedResource]) -> dict[str, dict[str, Any]]:
    objects: dict[str, dict[str, Any]] = {}
    for r in resources:
        assert r.inputs["kind"] not in objects, f"two {r.inputs['kind']}"
        objects[r.inputs["kind"]] = r.inputs
    return objects


def _args(**kw: Any) -> HistoryServerArgs:
    return HistoryServerArgs(image="registry.example/ray-history-server:0.1.0", wiring=AZURE_WIRING, **kw)


def test_every_object_is_schema_valid_and_wired() -> None:
    ingress = HistoryServerIngress(host="hist.example.com", class_name="nginx", tls_secret_name="hist-tls")
    objects = _by_kind(_deploy(_args(ingress=ingress, cache_size_limit="10Gi")))
    assert set(objects) == {
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
        "Service",
        "Ingress",
    }
    for obj in objects.values():
        validate_k8s(obj)

    sa = objects["ServiceAccount"]
    assert sa["metadata"] == {
        "name": "ray-history-server",
        "namespace": "ray-history",
        "labels": sa["metadata"]["labels"],
        "annotations": {"azure.workload.identity/client-id": "cid-123"},
    }
    assert objects["ClusterRole"]["metadata"]["name"] == "raycluster-reader"
    assert objects["ClusterRole"]["rules"] == [
        {"apiGroups": ["ray.io"], "resources": ["rayclusters"], "verbs": ["list", "get"]}
    ]
    binding = objects["ClusterRoleBinding"]
    assert binding["roleRef"]["name"] == "raycluster-reader"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "ray-history-server", "namespace": "ray-history"}]

    pod = objects["Deployment"]["spec"]["template"]
    assert pod["metadata"]["labels"]["azure.workload.identity/use"] == "true"
    assert objects["Deployment"]["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert "azure.workload.identity/use" not in objects["Deployment"]["spec"]["selector"]["matchLabels"]
    spec = pod["spec"]
    assert spec["serviceAccountName"] == "ray-history-server"
    assert spec["securityContext"]["runAsNonRoot"] is True
    (container,) = spec["containers"]
    assert container["command"] == ["historyserver"]
    assert container["args"][:5] == ["--storage-backend=azureblob", "--port", "8080", "--cache-dir", CACHE_DIR]
    assert "--secure-cookies" in container["args"]
    assert "--allowed-hosts=hist.example.com" in container["args"]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    assert env["STORAGE_BACKEND"] == "azureblob"
    assert env["AZURE_CLIENT_ID"] == "cid-123"
    assert env["AZURE_STORAGE_CONNECTION_STRING"] == {
        "secretKeyRef": {"name": "azure-conn", "key": "connection-string"}
    }
    security = container["securityContext"]
    assert security["runAsNonRoot"] is True and security["runAsUser"] == 1000
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readz"
    assert container["startupProbe"]["failureThreshold"] * container["startupProbe"]["periodSeconds"] >= 120
    # 10Gi cache + 1Gi /tmp + 512Mi for logs and the writable layer.
    assert container["resources"] == {
        "requests": {"cpu": "1", "memory": "1Gi", "ephemeral-storage": "11776Mi"},
        "limits": {"cpu": "2", "memory": "3Gi", "ephemeral-storage": "11776Mi"},
    }
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v["emptyDir"] for v in spec["volumes"]}
    assert volumes[mounts[CACHE_DIR]] == {"sizeLimit": "10Gi"}
    assert "emptyDir" in next(v for v in spec["volumes"] if v["name"] == mounts["/tmp"])
    assert volumes[mounts["/dev/shm"]]["medium"] == "Memory"

    service = objects["Service"]
    assert service["metadata"]["name"] == "historyserver"
    assert service["spec"]["ports"][0]["port"] == 30080
    assert service["spec"]["ports"][0]["targetPort"] == 8080
    ing = objects["Ingress"]["spec"]
    assert ing["ingressClassName"] == "nginx"
    assert ing["tls"] == [{"hosts": ["hist.example.com"], "secretName": "hist-tls"}]
    assert ing["rules"][0]["http"]["paths"][0]["backend"]["service"] == {
        "name": "historyserver",
        "port": {"number": 30080},
    }


def test_server_args_are_accepted_by_the_real_historyserver_parser() -> None:
    args = _args(extra_args=["--log-format=json"])
    argv = args.server_args()
    assert f"--dashboard-dir={DASHBOARD_DIR}" in argv
    # The image holds the build at DASHBOARD_DIR; here the installed ray wheel's copy stands in.
    local_build = Path(ray.__file__).parent / "dashboard" / "client" / "build"
    argv = [f"--dashboard-dir={local_build}" if a.startswith("--dashboard-dir=") else a for a in argv]
    parsed = build_parser().parse_args(argv)
    assert parsed.storage_backend == "azureblob"
    assert "--allowed-hosts" not in " ".join(argv)  # no Ingress: the defaults (Service names, loopback)
    assert parsed.port == 8080
    assert parsed.cache_dir == CACHE_DIR
    assert parsed.dashboard_dir == local_build
    # 80 % of the 8Gi emptyDir, so the kubelet never evicts the pod for the cache.
    assert parsed.cache_max_size == int(8 * 2**30 * 0.8) // 2**20 * 2**20
    assert parsed.log_format == "json"


def test_existing_namespace_and_no_ingress() -> None:
    objects = _by_kind(_deploy(_args(create_namespace=False, namespace="platform"), preview=True))
    assert "Namespace" not in objects
    assert "Ingress" not in objects
    assert objects["Deployment"]["metadata"]["namespace"] == "platform"
    assert "--secure-cookies" not in objects["Deployment"]["spec"]["template"]["spec"]["containers"][0]["args"]


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"image": ""}, "image"),
        ({"replicas": 0}, "replicas"),
        ({"cache_size_limit": "lots"}, "cache_size_limit"),
        ({"resources": {"requests": {"cpu": "1"}}}, "resources"),
        ({"ingress": HistoryServerIngress(host=" ")}, "ingress.host"),
    ],
)
def test_bad_args_name_the_parameter(kw: dict[str, Any], field: str) -> None:
    base: dict[str, Any] = {"image": "img:1", "wiring": AZURE_WIRING}
    with pytest.raises(ValueError, match=field):
        HistoryServerArgs(**{**base, **kw}).validate()


def test_unknown_backend_is_refused() -> None:
    wiring = StorageWiring(backend="ftp", bucket="b", env={}, server=IdentityWiring())
    with pytest.raises(ValueError, match=r"wiring\.backend"):
        HistoryServerArgs(image="img:1", wiring=wiring).validate()


def _quantity(text: str) -> int:
    return quantity_bytes(text, "test")


def _pod(args: HistoryServerArgs) -> dict[str, Any]:
    spec: dict[str, Any] = _by_kind(_deploy(args))["Deployment"]["spec"]["template"]["spec"]
    return spec


def test_local_volumes_are_requested_as_ephemeral_storage_within_autopilot_limits() -> None:
    """Every emptyDir the pod writes is requested (and limited) as ``ephemeral-storage``,
    and the default fits one GKE Autopilot pod.

    GKE: "Resource requests in Autopilot" -- Autopilot applies a small default
    ephemeral-storage request to pods that set none and evicts a pod that writes past it;
    the maximum per pod is 10 GiB on the general-purpose class
    (https://cloud.google.com/kubernetes-engine/docs/concepts/autopilot-resource-requests).
    Kubernetes: a pod whose emptyDir usage exceeds its ephemeral-storage limit is evicted
    (https://kubernetes.io/docs/concepts/configuration/manage-resources-containers/#local-ephemeral-storage).
    """
    spec = _pod(_args())
    (container,) = spec["containers"]
    request = _quantity(container["resources"]["requests"]["ephemeral-storage"])
    assert (
        container["resources"]["limits"]["ephemeral-storage"] == container["resources"]["requests"]["ephemeral-storage"]
    )
    disk_volumes = [v["emptyDir"] for v in spec["volumes"] if "emptyDir" in v and "medium" not in v["emptyDir"]]
    local = sum(_quantity(volume["sizeLimit"]) for volume in disk_volumes)
    assert request >= local
    assert request <= 10 * 2**30  # Autopilot's per-pod maximum


def test_cache_storage_class_puts_the_cache_on_a_generic_ephemeral_volume() -> None:
    """With a StorageClass the cache is a PVC made and deleted with the pod, outside ephemeral storage.

    GKE recommends generic ephemeral volumes for scratch space beyond Autopilot's ephemeral
    storage maximum (https://cloud.google.com/kubernetes-engine/docs/how-to/generic-ephemeral-volumes).
    """
    spec = _pod(_args(cache_size_limit="100Gi", cache_storage_class="standard-rwo"))
    (cache,) = [v for v in spec["volumes"] if v["name"] == "cache"]
    claim = cache["ephemeral"]["volumeClaimTemplate"]["spec"]
    assert claim == {
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": "standard-rwo",
        "resources": {"requests": {"storage": "100Gi"}},
    }
    (container,) = spec["containers"]
    assert _quantity(container["resources"]["requests"]["ephemeral-storage"]) < 2 * 2**30  # /tmp and logs only
    assert "--cache-max-size=81920Mi" in container["args"]


def test_deployment_waits_for_the_server_identity() -> None:
    """The Deployment depends on what makes the server's credentials work (``IdentityWiring.ready``).

    AWS: the EKS Pod Identity webhook mutates only pods created after the association
    exists; "existing pods must be restarted" (https://docs.aws.amazon.com/eks/latest/userguide/pod-id-association.html).
    Azure: the workload identity webhook likewise acts at pod admission
    (https://azure.github.io/azure-workload-identity/docs/topics/service-account-labels-and-annotations.html).
    """
    mocks = RecordingMocks.install()
    names: list[str] = []

    @settled
    def run() -> pulumi.Output[None]:
        grant = pulumi.CustomResource("test:index:Grant", "server-grant", {})
        wiring = StorageWiring(
            backend="s3", bucket="b", env={"STORAGE_BACKEND": "s3"}, server=IdentityWiring(ready=[grant])
        )
        server = HistoryServerK8s("history", HistoryServerArgs(image="i:1", wiring=wiring))
        return server.deployment.urn.apply(lambda _: names.append("done"))

    run()
    deployment = mocks.one("kubernetes:apps/v1:Deployment")
    assert deployment.depends_on("server-grant"), deployment.dependency_names()


def test_ingress_host_is_allowed_by_the_real_parser() -> None:
    """With an Ingress the server also answers its host name (the server refuses unknown Host headers)."""
    ingress = HistoryServerIngress(host="hist.example.com", tls_secret_name="tls")
    argv = _args(ingress=ingress).server_args()
    local_build = Path(ray.__file__).parent / "dashboard" / "client" / "build"
    argv = [f"--dashboard-dir={local_build}" if a.startswith("--dashboard-dir=") else a for a in argv]
    parsed = build_parser().parse_args(argv)
    assert "hist.example.com" in str(parsed.allowed_hosts)


def test_one_replica_has_no_budget_and_no_spreading() -> None:
    """One pod: a PodDisruptionBudget would either allow evicting it anyway (maxUnavailable 1)
    or block every node drain (minAvailable 1), so there is none; nothing to spread either."""
    objects = _by_kind(_deploy(_args()))
    assert "PodDisruptionBudget" not in objects
    assert objects["Deployment"]["spec"]["replicas"] == 1
    assert "topologySpreadConstraints" not in objects["Deployment"]["spec"]["template"]["spec"]


@pytest.mark.parametrize("storage_class", [None, "standard-rwo"])
def test_replicas_get_a_disruption_budget_spreading_and_a_cache_volume_each(storage_class: str | None) -> None:
    """Two or more replicas: a ``policy/v1`` PodDisruptionBudget with ``maxUnavailable: 1``
    over exactly the server's pods, preferred spreading over nodes and zones, and a cache
    volume made per pod.

    Kubernetes, "Specifying a Disruption Budget for your Application": ``maxUnavailable``
    bounds how many pods selected by ``.spec.selector`` may be unavailable after a voluntary
    eviction (a node drain uses the Eviction API, which refuses evictions past the budget);
    the selector should match the controller's
    (https://kubernetes.io/docs/tasks/run-application/configure-pdb/,
    https://kubernetes.io/docs/concepts/workloads/pods/disruptions/#pod-disruption-budgets).
    "Pod Topology Spread Constraints": ``whenUnsatisfiable: ScheduleAnyway`` is a preference
    the scheduler weighs, never a reason to leave a pod pending; ``matchLabelKeys:
    [pod-template-hash]`` counts only the pods of the same revision
    (https://kubernetes.io/docs/concepts/scheduling-eviction/topology-spread-constraints/).
    "Ephemeral Volumes": an ``emptyDir`` lives and dies with its pod, and a generic ephemeral
    volume's claim is created per pod, owned by it
    (https://kubernetes.io/docs/concepts/storage/ephemeral-volumes/#generic-ephemeral-volumes).
    """
    objects = _by_kind(_deploy(_args(replicas=3, cache_storage_class=storage_class, cache_size_limit="10Gi")))
    for obj in objects.values():
        validate_k8s(obj)
    deployment = objects["Deployment"]
    assert deployment["spec"]["replicas"] == 3
    selector = deployment["spec"]["selector"]["matchLabels"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]

    budget = objects["PodDisruptionBudget"]
    assert budget["apiVersion"] == "policy/v1"
    assert budget["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    assert budget["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": selector}}
    assert budget["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()

    spec = deployment["spec"]["template"]["spec"]
    spread = {c["topologyKey"]: c for c in spec["topologySpreadConstraints"]}
    assert set(spread) == {"kubernetes.io/hostname", "topology.kubernetes.io/zone"}
    for constraint in spread.values():
        assert constraint["whenUnsatisfiable"] == "ScheduleAnyway"
        assert constraint["maxSkew"] == 1
        assert constraint["labelSelector"] == {"matchLabels": selector}
        assert constraint["matchLabelKeys"] == ["pod-template-hash"]

    # The cache is a volume of the pod template, never a claim shared by the replicas.
    (cache,) = [v for v in spec["volumes"] if v["name"] == "cache"]
    assert "persistentVolumeClaim" not in cache
    if storage_class is None:
        assert cache == {"name": "cache", "emptyDir": {"sizeLimit": "10Gi"}}
    else:
        claim = cache["ephemeral"]["volumeClaimTemplate"]["spec"]
        assert claim["accessModes"] == ["ReadWriteOnce"] and claim["storageClassName"] == storage_class
    assert not any("persistentVolumeClaim" in v for v in spec["volumes"])


# ------------------------------------------------------------------ shared indexes
def _server_env(args: HistoryServerArgs) -> dict[str, str]:
    objects = _by_kind(_deploy(args))
    validate_k8s(objects["Deployment"])
    (container,) = objects["Deployment"]["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


@pytest.mark.parametrize("granted", ["read", "write"])
def test_the_server_runs_with_what_the_storage_grants(granted: str) -> None:
    """Without ``shared_index`` the server's ``--shared-index`` (env ``SHARED_INDEX``) is the
    storage's grant; on Azure ``SHARED_INDEX_CONTAINER`` names the index container."""
    wiring = dataclasses.replace(AZURE_WIRING, shared_index=granted)
    env = _server_env(HistoryServerArgs(image="img:1", wiring=wiring))
    assert (env["SHARED_INDEX"], env["SHARED_INDEX_CONTAINER"]) == (granted, "ray-history-index")


def test_a_lesser_mode_than_granted_is_allowed_and_off_names_no_container() -> None:
    wiring = dataclasses.replace(AZURE_WIRING, shared_index="write")
    env = _server_env(HistoryServerArgs(image="img:1", wiring=wiring, shared_index="off"))
    assert env["SHARED_INDEX"] == "off"
    assert "SHARED_INDEX_CONTAINER" not in env


def test_gcs_and_s3_need_no_container() -> None:
    wiring = StorageWiring(backend="gcs", bucket="b", env={"STORAGE_BACKEND": "gcs"}, server=IdentityWiring())
    env = _server_env(HistoryServerArgs(image="img:1", wiring=wiring))
    assert env["SHARED_INDEX"] == "read"
    assert "SHARED_INDEX_CONTAINER" not in env


@pytest.mark.parametrize(
    ("wiring", "mode", "message"),
    [
        # Least privilege: the server never claims write access its identity lacks.
        (AZURE_WIRING, "write", r"shared_index='write': the storage grants the server only 'read'"),
        (dataclasses.replace(AZURE_WIRING, shared_index="off"), "read", r"grants the server only 'off'"),
        (AZURE_WIRING, "sometimes", r"shared_index='sometimes': must be one of off, read, write"),
        (dataclasses.replace(AZURE_WIRING, index_container=None), "read", r"has no shared-index container"),
    ],
)
def test_bad_shared_index_names_the_parameter(wiring: StorageWiring, mode: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        HistoryServerArgs(image="img:1", wiring=wiring, shared_index=mode).validate()


@pytest.mark.parametrize(("mode", "container"), [("write", "ray-history-index"), ("off", None)])
def test_the_server_reads_the_shared_index_env_it_is_given(mode: str, container: str | None) -> None:
    """The names the Deployment sets are the ones the server's own settings read, with its flags."""
    args = HistoryServerArgs(image="img:1", wiring=dataclasses.replace(AZURE_WIRING, shared_index="write"))
    args.shared_index = mode
    env = _server_env(args)
    local_build = Path(ray.__file__).parent / "dashboard" / "client" / "build"
    argv = [f"--dashboard-dir={local_build}" if a.startswith("--dashboard-dir=") else a for a in args.server_args()]
    parsed = build_parser().parse_args(argv)
    assert server_settings.SHARED_INDEX.read(parsed, env) == mode
    assert server_settings.SHARED_INDEX_CONTAINER.read(parsed, env) == container


def test_metrics_settings_reach_the_server_as_env() -> None:
    metrics_env = {
        "PROMETHEUS_URL": "http://ray-metrics-prometheus.ray-metrics.svc.cluster.local:9090",
        "PROMETHEUS_DATASOURCE": "Prometheus",
    }
    objects = _by_kind(_deploy(_args(metrics_env=metrics_env)))
    validate_k8s(objects["Deployment"])
    (container,) = objects["Deployment"]["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert metrics_env.items() <= env.items()
    assert env["STORAGE_BACKEND"] == "azureblob"


def test_no_metrics_settings_no_metrics_env() -> None:
    objects = _by_kind(_deploy(_args()))
    (container,) = objects["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert not {e["name"] for e in container["env"]} & {"PROMETHEUS_URL", "GRAFANA_URL", "PROMETHEUS_DATASOURCE"}
