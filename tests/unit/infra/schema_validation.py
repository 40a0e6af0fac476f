"""Validate the Kubernetes objects our components and helpers produce.

* core kinds (Deployment, Service, ...): ``kubernetes_validate`` in strict mode
  (unknown fields are errors), against :data:`K8S_VERSION`;
* ``ray.io`` kinds: the KubeRay CRDs' ``openAPIV3Schema`` (``tests/fixtures/kuberay/crds``,
  or ``$KUBERAY_SCHEMAS_DIR``) with ``jsonschema``. The API server prunes unknown
  fields of a CRD silently, so a misspelt field would vanish unnoticed; here every
  object schema that lists ``properties`` is closed (``additionalProperties: false``)
  unless it preserves unknown fields, which turns such a typo into an error.
"""

from __future__ import annotations

import copy
import functools
import os
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import kubernetes_validate  # type: ignore[import-untyped]
import yaml  # type: ignore[import-untyped]

#: Oldest Kubernetes minor the three clouds still support; objects must be valid there.
K8S_VERSION = "1.30"
REPO_ROOT = Path(__file__).resolve().parents[3]
KUBERAY_SCHEMAS = Path(os.environ.get("KUBERAY_SCHEMAS_DIR", REPO_ROOT / "tests" / "fixtures" / "kuberay" / "crds"))
RAY_PLURALS = {"RayCluster": "rayclusters", "RayJob": "rayjobs", "RayService": "rayservices"}


def validate_k8s(obj: dict[str, Any], version: str = K8S_VERSION) -> None:
    """Raise ``kubernetes_validate.ValidationError`` unless ``obj`` is a valid core object."""
    kubernetes_validate.validate(obj, version, strict=True)


def validate_ray(obj: dict[str, Any]) -> None:
    """Raise ``jsonschema.ValidationError`` unless ``obj`` matches its KubeRay CRD (strictly)."""
    kind = obj.get("kind")
    if kind not in RAY_PLURALS:
        raise ValueError(f"kind {kind!r} is not a ray.io kind ({sorted(RAY_PLURALS)})")
    _ray_validator(str(kind), str(obj.get("apiVersion", "")).rpartition("/")[2]).validate(obj)


def validate_any(obj: dict[str, Any]) -> None:
    """Core or ray.io, by ``apiVersion``."""
    if str(obj.get("apiVersion", "")).startswith("ray.io/"):
        validate_ray(obj)
    else:
        validate_k8s(obj)


@functools.cache
def _ray_validator(kind: str, version: str) -> Any:
    path = KUBERAY_SCHEMAS / f"ray.io_{RAY_PLURALS[kind]}.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"KubeRay CRD {path} not found (set KUBERAY_SCHEMAS_DIR)")
    crd = yaml.safe_load(path.read_text())
    for entry in crd["spec"]["versions"]:
        if entry["name"] == version:
            schema = _closed(copy.deepcopy(entry["schema"]["openAPIV3Schema"]))
            # apiVersion/kind/metadata are checked by the API server, not the CRD schema.
            schema.setdefault("required", [])
            return jsonschema.Draft7Validator(schema)
    raise ValueError(f"{path.name} has no version {version!r}")


def _closed(schema: Any) -> Any:
    if isinstance(schema, dict):
        for key in ("properties", "items", "additionalProperties", "anyOf", "allOf", "oneOf"):
            if key in schema:
                value = schema[key]
                if key == "properties":
                    schema[key] = {name: _closed(sub) for name, sub in value.items()}
                elif isinstance(value, list):
                    schema[key] = [_closed(sub) for sub in value]
                elif isinstance(value, dict):
                    schema[key] = _closed(value)
        if (
            "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            schema["additionalProperties"] = False
    return schema
