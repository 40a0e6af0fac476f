"""Put the history collector into Ray manifests (plain dicts, no Pulumi needed).

Two ways, depending on the KubeRay operator the cluster runs:

* KubeRay >= 1.7 with the ``RayClusterHistoryServer`` feature gate: the operator
  injects the collector itself. :func:`history_server_options` returns the
  ``spec.historyServerOptions`` block (``collectorOptions``: image, env,
  resources) and :func:`with_history_server_options` puts it into a RayCluster,
  RayJob or RayService.
* Older operators (or the gate off): :func:`add_collector_sidecar` adds the
  ``ray-history-collector`` container, the shared ``/tmp/ray`` emptyDir, the
  collector's own spool emptyDir and Ray's event-export variables to the head and every worker group, as the GKE guide
  does by hand.

Every function returns a new dict (the input is never mutated), is idempotent
(applying it to its own output changes nothing), and raises
:class:`ManifestError` naming the offending field.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from runtime.common.ray_export import EVENT_TYPES_VARS, EXPOSED_EVENT_TYPES

#: Same name as the container KubeRay >= 1.7 injects, so tooling finds either.
COLLECTOR_CONTAINER = "ray-history-collector"
RAY_DIR_VOLUME = "ray-history-ray-dir"
RAY_TMP_ROOT = "/tmp/ray"  # noqa: S108 - Ray's temp root inside the pod, shared through an emptyDir
#: The collector's event spool: an emptyDir only the collector mounts. On the volume
#: shared with Ray (``$RAY_TMP_ROOT/event-data``, the collector's own default) the Ray job
#: could swap spool files for links or FIFOs (docs/security-model.md).
SPOOL_VOLUME = "ray-history-spool"
EVENT_SPOOL_DIR = "/var/lib/ray-history/spool"
EVENTS_PORT = 8084
EVENTS_EXPORT_ADDR = f"http://localhost:{EVENTS_PORT}/v1/events"

#: Variables the Ray container must carry with exactly these values.
REQUIRED_RAY_ENV = {
    "RAY_enable_ray_event": "true",
    "RAY_enable_core_worker_ray_event_to_aggregator": "true",
    "RAY_DASHBOARD_AGGREGATOR_AGENT_EVENTS_EXPORT_ADDR": EVENTS_EXPORT_ADDR,
}

#: Sized from the collector's measured peak RSS (100-112 MiB with the GCS/Azure SDKs
#: under heavy event load): the limit leaves ~2x headroom, the request what it idles at.
DEFAULT_COLLECTOR_RESOURCES: dict[str, dict[str, str]] = {
    "requests": {"cpu": "50m", "memory": "128Mi"},
    "limits": {"cpu": "500m", "memory": "256Mi"},
}

Kind = Literal["RayCluster", "RayJob", "RayService"]
#: Where each kind keeps its RayCluster spec.
CLUSTER_SPEC_PATH: dict[str, tuple[str, ...]] = {
    "RayCluster": ("spec",),
    "RayJob": ("spec", "rayClusterSpec"),
    "RayService": ("spec", "rayClusterConfig"),
}
Role = Literal["Head", "Worker"]


class ManifestError(ValueError):
    """A Ray manifest cannot take the collector; the message names the field."""


@dataclass(frozen=True)
class CollectorSettings:
    """What the collector container needs, whichever way it gets into the pod.

    Attributes:
        image: collector image (``registry/ray-history-collector:tag``).
        storage_env: ``StorageWiring.env`` resolved to plain strings.
        secret_env: env name -> (secret name, key) (``StorageWiring.secret_env``).
        identity_env: the writer identity's extra env (``IdentityWiring.env``), if any.
        resources: requests/limits for the collector container.
        image_pull_policy: ``IfNotPresent`` unless told otherwise.
    """

    image: str
    storage_env: Mapping[str, str]
    secret_env: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    identity_env: Mapping[str, str] = field(default_factory=dict)
    resources: Mapping[str, Mapping[str, str]] = field(default_factory=lambda: DEFAULT_COLLECTOR_RESOURCES)
    image_pull_policy: str = "IfNotPresent"

    def __post_init__(self) -> None:
        if not isinstance(self.image, str) or not self.image.strip():
            raise ManifestError("image: the collector image is required (e.g. registry/ray-history-collector:0.1.0)")
        if not self.storage_env.get("STORAGE_BACKEND"):
            raise ManifestError("storage_env: STORAGE_BACKEND is missing (pass StorageWiring.env)")
        for source, names in (("storage_env", self.storage_env), ("identity_env", self.identity_env)):
            for name, value in names.items():
                if not isinstance(value, str):
                    raise ManifestError(f"{source}[{name}]: expected a string, got {type(value).__name__}")
        overlap = set(self.secret_env) & (set(self.storage_env) | set(self.identity_env))
        if overlap:
            raise ManifestError(f"secret_env: {sorted(overlap)} also set as plain values; set each variable once")
        for name, ref in self.secret_env.items():
            if not (isinstance(ref, tuple) and len(ref) == 2 and all(isinstance(p, str) and p for p in ref)):
                raise ManifestError(f"secret_env[{name}]: expected (secret name, key), got {ref!r}")
        for part in ("requests", "limits"):
            if part not in self.resources:
                raise ManifestError(f"resources: '{part}' is required (every container needs requests and limits)")

    def storage_env_list(self) -> list[dict[str, Any]]:
        """Storage and identity env as Kubernetes ``EnvVar`` dicts, secrets as ``secretKeyRef``."""
        items: list[dict[str, Any]] = [
            {"name": k, "value": v} for k, v in {**self.storage_env, **self.identity_env}.items()
        ]
        items += [
            {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}
            for name, (secret, key) in self.secret_env.items()
        ]
        return items


# ----------------------------------------------------------------- KubeRay >= 1.7
def history_server_options(settings: CollectorSettings) -> dict[str, Any]:
    """The ``spec.historyServerOptions`` block for KubeRay >= 1.7 (feature gate
    ``RayClusterHistoryServer``). The operator adds the cluster identity env
    (``RAY_CLUSTER_NAME``, ``RAY_ROLE``, ``POD_IP`` ...) and the shared volume
    itself; this block carries what only we know: image, storage env, resources."""
    return {
        "collectorOptions": {
            "image": settings.image,
            "imagePullPolicy": settings.image_pull_policy,
            "env": settings.storage_env_list(),
            "resources": copy.deepcopy(dict(settings.resources)),
        }
    }


def with_history_server_options(manifest: Mapping[str, Any], settings: CollectorSettings) -> dict[str, Any]:
    """A copy of a RayCluster/RayJob/RayService with ``historyServerOptions`` set."""
    result = copy.deepcopy(dict(manifest))
    kind, cluster_spec, path = _cluster_spec(result)
    existing = cluster_spec.get("historyServerOptions")
    wanted = history_server_options(settings)
    if existing not in (None, wanted):
        raise ManifestError(f"{path}.historyServerOptions: already set to something else; remove it first ({kind})")
    cluster_spec["historyServerOptions"] = wanted
    return result


# -------------------------------------------------------------- older operators
def add_collector_sidecar(
    manifest: Mapping[str, Any],
    settings: CollectorSettings,
    *,
    service_account_name: str | None = None,
    pod_labels: Mapping[str, str] | None = None,
    command_style: Literal["env", "flags"] = "env",
) -> dict[str, Any]:
    """A copy of a RayCluster/RayJob/RayService whose head and worker pods carry the
    collector sidecar, the shared ``/tmp/ray`` volume and Ray's event export.

    Args:
        manifest: the whole object (``apiVersion``, ``kind``, ``metadata``, ``spec``).
        settings: image, storage env, resources.
        service_account_name: the writer service account (``RayWorkloadAccounts``);
            set on every pod template.
        pod_labels: the writer identity's pod labels (``azure.workload.identity/use``).
        command_style: ``env`` runs plain ``collector`` configured by environment;
            ``flags`` spells the GKE guide's command line (``--role``,
            ``--runtime-class-name``, ``--ray-cluster-name``, ``--ray-root-dir``,
            ``--events-port``) with the same values as the environment.
    """
    if command_style not in ("env", "flags"):
        raise ManifestError(f"command_style: expected 'env' or 'flags', got {command_style!r}")
    result = copy.deepcopy(dict(manifest))
    _kind, _spec, _path = _cluster_spec(result)
    for role, template, where in _pod_templates(result):
        pod = template.setdefault("spec", {})
        if not isinstance(pod, dict):
            raise ManifestError(f"{where}.spec: expected a mapping")
        _apply_pod_identity(template, where, service_account_name, pod_labels or {})
        volume = _ensure_ray_dir_volume(pod, where)
        _ensure_spool_volume(pod, where)
        containers = pod.get("containers")
        if not isinstance(containers, list) or not containers or not isinstance(containers[0], dict):
            raise ManifestError(f"{where}.spec.containers: the Ray container (containers[0]) is missing")
        # KubeRay treats containers[0] as the Ray container.
        _prepare_ray_container(containers[0], volume, f"{where}.spec.containers[0]")
        collector = collector_container(settings, role, volume, command_style)
        for index, container in enumerate(containers):
            if isinstance(container, dict) and container.get("name") == COLLECTOR_CONTAINER:
                containers[index] = collector
                break
        else:
            containers.append(collector)
    return result


def collector_container(
    settings: CollectorSettings, role: Role, volume: str = RAY_DIR_VOLUME, command_style: str = "env"
) -> dict[str, Any]:
    """The collector container for one pod (head or worker)."""
    env: list[dict[str, Any]] = [
        {"name": "RAY_ROLE", "value": role},
        # The operator labels every Ray pod with its cluster; owner labels exist for
        # RayJob/RayService-made clusters (the collector ignores OWNER_KIND=RayCluster).
        _field_env("RAY_CLUSTER_NAME", "metadata.labels['ray.io/cluster']"),
        _field_env("RAY_CLUSTER_NAMESPACE", "metadata.namespace"),
        _field_env("OWNER_KIND", "metadata.labels['ray.io/originated-from-crd']"),
        _field_env("OWNER_NAME", "metadata.labels['ray.io/originated-from-cr-name']"),
        _field_env("POD_IP", "status.podIP"),
        # $(VAR) expands variables defined earlier in this list.
        {
            "name": "FQ_RAY_IP",
            "value": "localhost"
            if role == "Head"
            else "$(RAY_CLUSTER_NAME)-head-svc.$(RAY_CLUSTER_NAMESPACE).svc.cluster.local",
        },
        {"name": "RAY_TMP_ROOT", "value": RAY_TMP_ROOT},
        {"name": "RAY_COLLECTOR_EVENT_DATA_DIR", "value": EVENT_SPOOL_DIR},
        {"name": "EVENTS_PORT", "value": str(EVENTS_PORT)},
    ]
    if role == "Head":
        env.append({"name": "RAY_DASHBOARD_ADDRESS", "value": "http://localhost:8265"})
    env += settings.storage_env_list()
    container: dict[str, Any] = {
        "name": COLLECTOR_CONTAINER,
        "image": settings.image,
        "imagePullPolicy": settings.image_pull_policy,
        "command": ["collector"],
        "env": env,
        "resources": copy.deepcopy(dict(settings.resources)),
        "volumeMounts": [
            {"name": volume, "mountPath": RAY_TMP_ROOT},
            {"name": SPOOL_VOLUME, "mountPath": EVENT_SPOOL_DIR},
        ],
        # The Ray image runs as uid 1000 too; the /tmp/ray emptyDir is shared between them.
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 1000,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    if command_style == "flags":
        container["args"] = _guide_flags(settings, role)
    return container


def _guide_flags(settings: CollectorSettings, role: Role) -> list[str]:
    """The GKE guide's flags, with values equal to the env (the collector refuses a
    flag that contradicts its variable, and accepts one that agrees)."""
    flags = [
        f"--role={role}",
        f"--runtime-class-name={settings.storage_env['STORAGE_BACKEND']}",
        "--ray-cluster-name=$(RAY_CLUSTER_NAME)",
    ]
    if settings.storage_env.get("STORAGE_ROOT_DIR"):
        flags.append(f"--ray-root-dir={settings.storage_env['STORAGE_ROOT_DIR']}")
    flags.append(f"--events-port={EVENTS_PORT}")
    return flags


def event_export_env(existing: Mapping[str, str] | None = None) -> dict[str, str]:
    """Ray-side variables: the required ones, and both event-type names (a value the
    user already chose for either name, e.g. ``ALL``, is kept for both)."""
    existing = existing or {}
    chosen = next((existing[name] for name in EVENT_TYPES_VARS if existing.get(name)), EXPOSED_EVENT_TYPES)
    return {**REQUIRED_RAY_ENV, **dict.fromkeys(EVENT_TYPES_VARS, chosen)}


# ------------------------------------------------------------------ internals
def _field_env(name: str, field_path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": field_path}}}


def _cluster_spec(manifest: dict[str, Any]) -> tuple[str, dict[str, Any], str]:
    kind = manifest.get("kind")
    if kind not in CLUSTER_SPEC_PATH:
        raise ManifestError(f"kind: expected one of {sorted(CLUSTER_SPEC_PATH)}, got {kind!r}")
    api_version = manifest.get("apiVersion")
    if api_version != "ray.io/v1":
        raise ManifestError(f"apiVersion: expected 'ray.io/v1', got {api_version!r}")
    node: Any = manifest
    walked: list[str] = []
    for key in CLUSTER_SPEC_PATH[kind]:
        walked.append(key)
        node = node.get(key) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            raise ManifestError(f"{'.'.join(walked)}: missing or not a mapping ({kind})")
    return kind, node, ".".join(walked)


def _pod_templates(manifest: dict[str, Any]) -> Iterator[tuple[Role, dict[str, Any], str]]:
    _kind, spec, path = _cluster_spec(manifest)
    head = spec.get("headGroupSpec")
    if not isinstance(head, dict) or not isinstance(head.get("template"), dict):
        raise ManifestError(f"{path}.headGroupSpec.template: missing or not a mapping")
    yield "Head", head["template"], f"{path}.headGroupSpec.template"
    groups = spec.get("workerGroupSpecs", [])
    if not isinstance(groups, list):
        raise ManifestError(f"{path}.workerGroupSpecs: expected a list")
    for index, group in enumerate(groups):
        where = f"{path}.workerGroupSpecs[{index}].template"
        if not isinstance(group, dict) or not isinstance(group.get("template"), dict):
            raise ManifestError(f"{where}: missing or not a mapping")
        yield "Worker", group["template"], where


def _apply_pod_identity(
    template: dict[str, Any], where: str, service_account: str | None, labels: Mapping[str, str]
) -> None:
    pod = template["spec"]
    if service_account:
        current = pod.get("serviceAccountName")
        if current not in (None, service_account):
            raise ManifestError(
                f"{where}.spec.serviceAccountName: is {current!r}, but the collector needs {service_account!r}"
            )
        pod["serviceAccountName"] = service_account
    if labels:
        meta = template.setdefault("metadata", {})
        pod_labels = meta.setdefault("labels", {})
        for key, value in labels.items():
            if pod_labels.get(key, value) != value:
                raise ManifestError(f"{where}.metadata.labels[{key}]: is {pod_labels[key]!r}, needs {value!r}")
            pod_labels[key] = value


def _ensure_ray_dir_volume(pod: dict[str, Any], where: str) -> str:
    """The volume mounted at /tmp/ray in the Ray container: the user's if there is
    one (reused, as KubeRay does), else our emptyDir."""
    containers = pod.get("containers") or []
    ray = containers[0] if containers and isinstance(containers[0], dict) else {}
    volumes = pod.setdefault("volumes", [])
    if not isinstance(volumes, list):
        raise ManifestError(f"{where}.spec.volumes: expected a list")
    for mount in ray.get("volumeMounts") or []:
        if isinstance(mount, dict) and mount.get("mountPath", "").rstrip("/") == RAY_TMP_ROOT:
            name = str(mount.get("name"))
            if not any(isinstance(v, dict) and v.get("name") == name for v in volumes):
                raise ManifestError(
                    f"{where}.spec.containers[0].volumeMounts: {name!r} is mounted at {RAY_TMP_ROOT} "
                    "but no volume of that name exists"
                )
            return name
    for volume in volumes:
        if isinstance(volume, dict) and volume.get("name") == RAY_DIR_VOLUME:
            if "emptyDir" not in volume:
                raise ManifestError(f"{where}.spec.volumes[{RAY_DIR_VOLUME}]: expected an emptyDir")
            return RAY_DIR_VOLUME
    volumes.append({"name": RAY_DIR_VOLUME, "emptyDir": {}})
    return RAY_DIR_VOLUME


def _ensure_spool_volume(pod: dict[str, Any], where: str) -> None:
    """The collector's private emptyDir for its event spool (mounted in no other container)."""
    volumes = pod["volumes"]
    for volume in volumes:
        if isinstance(volume, dict) and volume.get("name") == SPOOL_VOLUME:
            if "emptyDir" not in volume:
                raise ManifestError(f"{where}.spec.volumes[{SPOOL_VOLUME}]: expected an emptyDir")
            return
    volumes.append({"name": SPOOL_VOLUME, "emptyDir": {}})


def _prepare_ray_container(container: dict[str, Any], volume: str, where: str) -> None:
    mounts = container.setdefault("volumeMounts", [])
    if not any(isinstance(m, dict) and m.get("mountPath", "").rstrip("/") == RAY_TMP_ROOT for m in mounts):
        mounts.append({"name": volume, "mountPath": RAY_TMP_ROOT})
    env = container.setdefault("env", [])
    if not isinstance(env, list):
        raise ManifestError(f"{where}.env: expected a list")
    current: dict[str, str] = {}
    for item in env:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise ManifestError(f"{where}.env: every entry needs a name")
        if "value" in item:
            current[item["name"]] = str(item["value"])
    for name, value in event_export_env(current).items():
        entry = next((item for item in env if item["name"] == name), None)
        if entry is None:
            env.append({"name": name, "value": value})
        elif "valueFrom" in entry:
            raise ManifestError(f"{where}.env[{name}]: comes from valueFrom; the collector needs the value {value!r}")
        elif name in REQUIRED_RAY_ENV and str(entry.get("value")) != value:
            raise ManifestError(f"{where}.env[{name}]: is {entry.get('value')!r}, the collector needs {value!r}")
        else:
            entry["value"] = value
