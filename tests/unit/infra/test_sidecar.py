"""infra/sidecar.py: the collector sidecar for older operators and the KubeRay >= 1.7 block."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]

from infra.examples.generate import EXAMPLE_PATH, base_rayjob, render
from infra.sidecar import (
    COLLECTOR_CONTAINER,
    EVENT_SPOOL_DIR,
    EVENT_TYPES_VARS,
    EVENTS_EXPORT_ADDR,
    RAY_TMP_ROOT,
    SPOOL_VOLUME,
    CollectorSettings,
    ManifestError,
    add_collector_sidecar,
    event_export_env,
    history_server_options,
    with_history_server_options,
)
from runtime.collector.config import build_parser, load_config
from tests.integration.ray_harness import event_export_env as harness_event_export_env
from tests.unit.infra.schema_validation import validate_ray

SETTINGS = CollectorSettings(
    image="registry.example/ray-history-collector:0.1.0",
    storage_env={"STORAGE_BACKEND": "s3", "S3_BUCKET": "hist", "S3_REGION": "us-east-1", "STORAGE_ROOT_DIR": "log"},
    secret_env={"AWS_ACCESS_KEY_ID": ("minio-creds", "access-key")},
)


def _container(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "image": "rayproject/ray:2.60.0",
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
    }


def _cluster_spec(workers: int = 2) -> dict[str, Any]:
    return {
        "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [_container("ray-head")]}}},
        "workerGroupSpecs": [
            {
                "groupName": f"g{i}",
                "replicas": 1,
                "minReplicas": 1,
                "maxReplicas": 2,
                "rayStartParams": {},
                "template": {"spec": {"containers": [_container("ray-worker")]}},
            }
            for i in range(workers)
        ],
    }


def raycluster() -> dict[str, Any]:
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "rc"}, "spec": _cluster_spec()}


def rayjob() -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "rj"},
        "spec": {"entrypoint": "python -c 'print(1)'", "rayClusterSpec": _cluster_spec()},
    }


def rayservice() -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {"name": "rs"},
        "spec": {"serveConfigV2": "applications: []\n", "rayClusterConfig": _cluster_spec()},
    }


ALL_KINDS = [raycluster, rayjob, rayservice]


def _templates(manifest: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    spec = manifest["spec"]
    spec = spec.get("rayClusterSpec") or spec.get("rayClusterConfig") or spec
    return [("Head", spec["headGroupSpec"]["template"])] + [
        ("Worker", group["template"]) for group in spec["workerGroupSpecs"]
    ]


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {item["name"]: item.get("value", item.get("valueFrom")) for item in container["env"]}


@pytest.mark.parametrize("make", ALL_KINDS, ids=lambda f: f.__name__)
def test_sidecar_on_head_and_every_worker_group_valid_against_crd(make: Any) -> None:
    original = make()
    result = add_collector_sidecar(original, SETTINGS, service_account_name="ray-history-collector")
    validate_ray(original)
    validate_ray(result)
    templates = _templates(result)
    assert len(templates) == 3
    for role, template in templates:
        pod = template["spec"]
        assert pod["serviceAccountName"] == "ray-history-collector"
        ray, collector = pod["containers"]
        assert collector["name"] == COLLECTOR_CONTAINER
        assert _env(collector)["RAY_ROLE"] == role
        assert _env(collector)["STORAGE_BACKEND"] == "s3"
        assert _env(collector)["AWS_ACCESS_KEY_ID"] == {"secretKeyRef": {"name": "minio-creds", "key": "access-key"}}
        ray_env = _env(ray)
        assert ray_env["RAY_enable_ray_event"] == "true"
        assert ray_env["RAY_DASHBOARD_AGGREGATOR_AGENT_EVENTS_EXPORT_ADDR"] == EVENTS_EXPORT_ADDR
        for name in EVENT_TYPES_VARS:
            assert "TASK_PROFILE_EVENT" in ray_env[name]
        volume = next(v for v in pod["volumes"] if "emptyDir" in v)
        for container in (ray, collector):
            assert {"name": volume["name"], "mountPath": RAY_TMP_ROOT} in container["volumeMounts"]
        # The event spool is the collector's alone: the Ray job cannot swap its files.
        assert {"name": SPOOL_VOLUME, "emptyDir": {}} in pod["volumes"]
        assert {"name": SPOOL_VOLUME, "mountPath": EVENT_SPOOL_DIR} in collector["volumeMounts"]
        assert all(m["name"] != SPOOL_VOLUME for m in ray["volumeMounts"])
        assert _env(collector)["RAY_COLLECTOR_EVENT_DATA_DIR"] == EVENT_SPOOL_DIR
        assert not EVENT_SPOOL_DIR.startswith(RAY_TMP_ROOT + "/")
        assert collector["securityContext"]["runAsNonRoot"] is True
        assert collector["resources"]["limits"]["memory"] == "256Mi"


def test_ray_env_matches_what_the_integration_harness_runs_ray_2_60_with() -> None:
    assert event_export_env() == harness_event_export_env(EVENTS_EXPORT_ADDR)


@pytest.mark.parametrize("make", ALL_KINDS, ids=lambda f: f.__name__)
def test_idempotent_and_input_untouched(make: Any) -> None:
    original = make()
    snapshot = copy.deepcopy(original)
    once = add_collector_sidecar(original, SETTINGS, pod_labels={"azure.workload.identity/use": "true"})
    twice = add_collector_sidecar(once, SETTINGS, pod_labels={"azure.workload.identity/use": "true"})
    assert original == snapshot
    assert once == twice
    assert once != original


def test_user_chosen_event_types_are_kept_for_both_names() -> None:
    manifest = raycluster()
    head = manifest["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    head["env"] = [{"name": EVENT_TYPES_VARS[1], "value": "ALL"}]
    result = add_collector_sidecar(manifest, SETTINGS)
    env = _env(result["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0])
    assert env[EVENT_TYPES_VARS[0]] == env[EVENT_TYPES_VARS[1]] == "ALL"


def test_existing_tmp_ray_volume_is_reused() -> None:
    manifest = raycluster()
    pod = manifest["spec"]["headGroupSpec"]["template"]["spec"]
    pod["volumes"] = [{"name": "logs", "emptyDir": {"sizeLimit": "5Gi"}}]
    pod["containers"][0]["volumeMounts"] = [{"name": "logs", "mountPath": "/tmp/ray"}]
    result = add_collector_sidecar(manifest, SETTINGS)
    head = result["spec"]["headGroupSpec"]["template"]["spec"]
    assert head["volumes"] == [
        {"name": "logs", "emptyDir": {"sizeLimit": "5Gi"}},
        {"name": SPOOL_VOLUME, "emptyDir": {}},
    ]
    assert head["containers"][1]["volumeMounts"] == [
        {"name": "logs", "mountPath": "/tmp/ray"},
        {"name": SPOOL_VOLUME, "mountPath": EVENT_SPOOL_DIR},
    ]
    validate_ray(result)


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda m: m.update(kind="Pod"), "kind"),
        (lambda m: m.update(apiVersion="ray.io/v1alpha1"), "apiVersion"),
        (lambda m: m["spec"].pop("rayClusterSpec"), "spec.rayClusterSpec"),
        (lambda m: m["spec"]["rayClusterSpec"].pop("headGroupSpec"), "spec.rayClusterSpec.headGroupSpec.template"),
        (
            lambda m: m["spec"]["rayClusterSpec"]["workerGroupSpecs"][1]["template"]["spec"].update(containers=[]),
            "spec.rayClusterSpec.workerGroupSpecs[1].template.spec.containers",
        ),
        (
            lambda m: m["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0].update(
                env=[{"name": "RAY_DASHBOARD_AGGREGATOR_AGENT_EVENTS_EXPORT_ADDR", "value": "http://elsewhere/x"}]
            ),
            "spec.rayClusterSpec.headGroupSpec.template.spec.containers[0].env[RAY_DASHBOARD_AGGREGATOR_AGENT_EVENTS_EXPORT_ADDR]",
        ),
        (
            lambda m: m["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"].update(
                serviceAccountName="other"
            ),
            "spec.rayClusterSpec.headGroupSpec.template.spec.serviceAccountName",
        ),
        (
            lambda m: m["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0].update(
                volumeMounts=[{"name": "ghost", "mountPath": "/tmp/ray"}]
            ),
            "spec.rayClusterSpec.headGroupSpec.template.spec.containers[0].volumeMounts",
        ),
    ],
)
def test_bad_manifests_name_the_field(mutate: Any, field: str) -> None:
    manifest = rayjob()
    mutate(manifest)
    with pytest.raises(ManifestError, match=re.escape(field)):
        add_collector_sidecar(manifest, SETTINGS, service_account_name="ray-history-collector")


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"image": " "}, "image"),
        ({"storage_env": {"GCS_BUCKET": "b"}}, "STORAGE_BACKEND"),
        ({"resources": {"limits": {"cpu": "1"}}}, "resources"),
        ({"secret_env": {"S3_BUCKET": ("s", "k")}}, "secret_env"),
        ({"secret_env": {"X": ("s",)}}, r"secret_env\[X\]"),
    ],
)
def test_bad_settings_name_the_parameter(kwargs: dict[str, Any], field: str) -> None:
    base: dict[str, Any] = {"image": "img:1", "storage_env": {"STORAGE_BACKEND": "gcs", "S3_BUCKET": "b"}}
    with pytest.raises(ManifestError, match=field):
        CollectorSettings(**{**base, **kwargs})


def test_bad_command_style() -> None:
    with pytest.raises(ManifestError, match="command_style"):
        add_collector_sidecar(raycluster(), SETTINGS, command_style="yaml")  # type: ignore[arg-type]


# ------------------------------------------------------------------ KubeRay >= 1.7
@pytest.mark.parametrize("make", ALL_KINDS, ids=lambda f: f.__name__)
def test_history_server_options_valid_against_crd(make: Any) -> None:
    result = with_history_server_options(make(), SETTINGS)
    validate_ray(result)
    assert with_history_server_options(result, SETTINGS) == result
    block = history_server_options(SETTINGS)["collectorOptions"]
    assert block["image"] == SETTINGS.image
    assert {"name": "S3_BUCKET", "value": "hist"} in block["env"]
    assert set(block["resources"]) == {"requests", "limits"}


def test_history_server_options_refuses_to_overwrite_a_different_block() -> None:
    manifest = raycluster()
    manifest["spec"]["historyServerOptions"] = {"collectorOptions": {"image": "other:1"}}
    with pytest.raises(ManifestError, match=r"spec\.historyServerOptions"):
        with_history_server_options(manifest, SETTINGS)


def test_the_strict_crd_check_catches_a_misspelt_field() -> None:
    manifest = with_history_server_options(raycluster(), SETTINGS)
    manifest["spec"]["historyServerOptions"]["collectorOption"] = manifest["spec"]["historyServerOptions"].pop(
        "collectorOptions"
    )
    with pytest.raises(Exception, match="collectorOption"):
        validate_ray(manifest)


# ------------------------------------------------------------------ the example
def test_example_file_is_what_the_helper_generates() -> None:
    assert EXAMPLE_PATH.read_text() == render(), "run: .venv/bin/python -m infra.examples.generate"
    example = yaml.safe_load(EXAMPLE_PATH.read_text())
    validate_ray(example)
    assert example["spec"]["rayClusterSpec"]["headGroupSpec"] != base_rayjob()["spec"]["rayClusterSpec"]


def _resolve_pod_env(container: dict[str, Any], pod_fields: dict[str, str]) -> dict[str, str]:
    """What the kubelet hands the process: fieldRefs resolved, $(VAR) expanded."""
    env: dict[str, str] = {}
    for item in container["env"]:
        if "valueFrom" in item:
            env[item["name"]] = pod_fields.get(item["valueFrom"]["fieldRef"]["fieldPath"], "")
        else:
            env[item["name"]] = re.sub(r"\$\((\w+)\)", lambda m: env.get(m[1], m[0]), item["value"])
    return env


@pytest.mark.parametrize("role_index", [0, 1])
def test_example_collector_command_is_accepted_by_our_collector(role_index: int) -> None:
    """The GKE-guide flags and the env agree, so the real collector config loader accepts them."""
    example = yaml.safe_load(EXAMPLE_PATH.read_text())
    _role, template = _templates(example)[role_index]
    collector = template["spec"]["containers"][1]
    pod_fields = {
        "metadata.labels['ray.io/cluster']": "rayjob-history-x7k2p",
        "metadata.namespace": "default",
        "metadata.labels['ray.io/originated-from-crd']": "RayJob",
        "metadata.labels['ray.io/originated-from-cr-name']": "rayjob-history",
        "status.podIP": "10.0.0.7",
    }
    env = _resolve_pod_env(collector, pod_fields)
    args = [re.sub(r"\$\((\w+)\)", lambda m: env[m[1]], arg) for arg in collector["args"]]
    assert collector["command"] == ["collector"]
    config = load_config(build_parser().parse_args(args), env)
    assert config.role == ("Head" if role_index == 0 else "Worker")
    assert config.cluster.name == "rayjob-history-x7k2p"
    assert config.cluster.owner_kind == "rayjob"
    assert config.cluster.owner_name == "rayjob-history"
    assert config.storage.backend == "gcs"
    assert config.events_port == 8084
    if role_index == 1:
        assert env["FQ_RAY_IP"] == "rayjob-history-x7k2p-head-svc.default.svc.cluster.local"
