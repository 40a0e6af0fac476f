"""Guardrail validators: plain functions of (resource type token, props) -> violations.

``props`` are the engine's camelCase properties, as a policy pack sees them. Values
not known yet (preview) arrive as None or are missing; a rule then stays silent
rather than failing on a value it cannot see, except where the *absence* of a
setting is itself the problem (a bucket without public access prevention).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

Props = Mapping[str, Any]
Rule = Callable[[str, Props], list[str]]

GCS_BUCKET = "gcp:storage/bucket:Bucket"
S3_PUBLIC_ACCESS_BLOCK = "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock"
S3_OWNERSHIP = "aws:s3/bucketOwnershipControls:BucketOwnershipControls"
S3_BUCKETS = ("aws:s3/bucket:Bucket", "aws:s3/bucketV2:BucketV2")
S3_ACL = "aws:s3/bucketAclV2:BucketAclV2"
AZURE_ACCOUNT = "azure-native:storage:StorageAccount"
AZURE_CONTAINER = "azure-native:storage:BlobContainer"
PUBLIC_S3_ACLS = ("public-read", "public-read-write", "authenticated-read")
S3_BLOCK_FLAGS = ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets")

#: Pod templates inside each workload kind (paths of keys; "*" = every list item).
POD_TEMPLATE_PATHS: dict[str, tuple[tuple[str, ...], ...]] = {
    "kubernetes:core/v1:Pod": ((),),
    "kubernetes:apps/v1:Deployment": (("spec", "template"),),
    "kubernetes:apps/v1:StatefulSet": (("spec", "template"),),
    "kubernetes:apps/v1:DaemonSet": (("spec", "template"),),
    "kubernetes:batch/v1:Job": (("spec", "template"),),
    "kubernetes:batch/v1:CronJob": (("spec", "jobTemplate", "spec", "template"),),
    "kubernetes:ray.io/v1:RayCluster": (
        ("spec", "headGroupSpec", "template"),
        ("spec", "workerGroupSpecs", "*", "template"),
    ),
    "kubernetes:ray.io/v1:RayJob": (
        ("spec", "rayClusterSpec", "headGroupSpec", "template"),
        ("spec", "rayClusterSpec", "workerGroupSpecs", "*", "template"),
    ),
    "kubernetes:ray.io/v1:RayService": (
        ("spec", "rayClusterConfig", "headGroupSpec", "template"),
        ("spec", "rayClusterConfig", "workerGroupSpecs", "*", "template"),
    ),
}

#: AWS resources whose props carry IAM policy documents (prop names).
AWS_POLICY_PROPS: dict[str, tuple[str, ...]] = {
    "aws:iam/policy:Policy": ("policy",),
    "aws:iam/rolePolicy:RolePolicy": ("policy",),
    "aws:iam/userPolicy:UserPolicy": ("policy",),
    "aws:iam/groupPolicy:GroupPolicy": ("policy",),
    "aws:iam/role:Role": ("assumeRolePolicy",),
    "aws:s3/bucketPolicy:BucketPolicy": ("policy",),
    "aws:eks/podIdentityAssociation:PodIdentityAssociation": ("policy",),
}
GCP_FORBIDDEN_ROLES = ("roles/owner", "roles/editor")
GCP_PUBLIC_MEMBERS = ("allUsers", "allAuthenticatedUsers")


# ------------------------------------------------------------------ buckets
def no_public_buckets(resource_type: str, props: Props) -> list[str]:
    """GCS: public access prevention enforced; S3: the public access block all true and
    no public canned ACL; Azure: blob public access off, containers private."""
    found: list[str] = []
    if resource_type == GCS_BUCKET and props.get("publicAccessPrevention") != "enforced":
        found.append(
            f"GCS bucket: publicAccessPrevention is {props.get('publicAccessPrevention')!r}, must be 'enforced'"
        )
    elif resource_type == S3_PUBLIC_ACCESS_BLOCK:
        off = [flag for flag in S3_BLOCK_FLAGS if props.get(flag) is not True]
        if off:
            found.append(f"S3 public access block: {', '.join(off)} must be true")
    elif resource_type in (*S3_BUCKETS, S3_ACL) and props.get("acl") in PUBLIC_S3_ACLS:
        found.append(f"S3 bucket: acl {props.get('acl')!r} makes objects public")
    elif resource_type == AZURE_ACCOUNT and props.get("allowBlobPublicAccess") is not False:
        found.append(
            f"Azure storage account: allowBlobPublicAccess is {props.get('allowBlobPublicAccess')!r}, must be false"
        )
    elif resource_type == AZURE_CONTAINER and props.get("publicAccess") not in (None, "None"):
        found.append(f"Azure blob container: publicAccess is {props.get('publicAccess')!r}, must be 'None'")
    return found


def uniform_access(resource_type: str, props: Props) -> list[str]:
    """Access decided by IAM only: GCS uniform bucket-level access, S3 ACLs disabled."""
    if resource_type == GCS_BUCKET and props.get("uniformBucketLevelAccess") is not True:
        return ["GCS bucket: uniformBucketLevelAccess must be true"]
    if resource_type == S3_OWNERSHIP:
        rule = props.get("rule") or {}
        if not isinstance(rule, Mapping) or rule.get("objectOwnership") != "BucketOwnerEnforced":
            return ["S3 ownership controls: rule.objectOwnership must be 'BucketOwnerEnforced' (ACLs disabled)"]
    return []


# ------------------------------------------------------------------ containers
def _walk(node: Any, path: tuple[str, ...], where: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    if not path:
        if isinstance(node, Mapping):
            yield where, node
        return
    head, rest = path[0], path[1:]
    if head == "*":
        for index, item in enumerate(node if isinstance(node, list) else []):
            yield from _walk(item, rest, f"{where}[{index}]")
    elif isinstance(node, Mapping) and head in node:
        yield from _walk(node[head], rest, f"{where}.{head}" if where else head)


def _containers(resource_type: str, props: Props) -> Iterator[tuple[str, Mapping[str, Any], Mapping[str, Any]]]:
    """(where, pod-level securityContext, container) for every container and init container."""
    for template_path in POD_TEMPLATE_PATHS.get(resource_type, ()):
        for where, template in _walk(props, template_path, ""):
            pod = template if resource_type == "kubernetes:core/v1:Pod" else template.get("spec")
            if not isinstance(pod, Mapping):
                continue
            pod_security = pod.get("securityContext") or {}
            for kind in ("initContainers", "containers"):
                for index, container in enumerate(pod.get(kind) or []):
                    if isinstance(container, Mapping):
                        name = container.get("name", index)
                        prefix = f"{where}.spec" if where else "spec"
                        yield f"{prefix}.{kind}[{name}]", pod_security, container


def non_root_containers(resource_type: str, props: Props) -> list[str]:
    """Every container runs as non-root: runAsNonRoot true or runAsUser != 0, on the
    container or inherited from the pod (a container's own runAsUser 0 always wins)."""
    found: list[str] = []
    for where, pod_security, container in _containers(resource_type, props):
        own = container.get("securityContext") or {}
        user = own.get("runAsUser", pod_security.get("runAsUser"))
        non_root = own.get("runAsNonRoot", pod_security.get("runAsNonRoot"))
        if user == 0 or not (non_root is True or (user is not None and user != 0)):
            found.append(f"{where}: must run as non-root (securityContext.runAsNonRoot: true or runAsUser != 0)")
    return found


def resource_limits(resource_type: str, props: Props) -> list[str]:
    """Every container declares cpu and memory limits."""
    found: list[str] = []
    for where, _pod, container in _containers(resource_type, props):
        limits = (container.get("resources") or {}).get("limits") or {}
        missing = [r for r in ("cpu", "memory") if not limits.get(r)]
        if missing:
            found.append(f"{where}: resources.limits.{'/'.join(missing)} must be set")
    return found


# ------------------------------------------------------------------ IAM
def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def _policy_document(value: Any) -> Mapping[str, Any] | None:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    return value if isinstance(value, Mapping) else None


def _wild_resource(resource: str) -> bool:
    """``*`` or an ARN whose resource part starts with ``*`` (every bucket, every role);
    ``arn:aws:s3:::bucket/*`` (every object of one bucket) is fine."""
    if resource == "*":
        return True
    parts = resource.split(":", 5)
    return len(parts) == 6 and parts[5].startswith("*")


def _aws_statement_violations(where: str, statement: Mapping[str, Any]) -> list[str]:
    if statement.get("Effect", "Allow") != "Allow":
        return []
    found: list[str] = []
    actions = [a for a in _as_list(statement.get("Action")) if isinstance(a, str)]
    if any("*" in a for a in actions) or "NotAction" in statement:
        found.append(f"{where}: wildcard Action {actions or statement.get('NotAction')}")
    resources = [r for r in _as_list(statement.get("Resource")) if isinstance(r, str)]
    if any(_wild_resource(r) for r in resources) or "NotResource" in statement:
        found.append(f"{where}: wildcard Resource {resources or statement.get('NotResource')}")
    principal = statement.get("Principal")
    aws_principals = principal.get("AWS") if isinstance(principal, Mapping) else principal
    if "*" in _as_list(aws_principals):
        found.append(f"{where}: Principal '*' (anyone)")
    return found


def no_wildcard_iam(resource_type: str, props: Props) -> list[str]:
    """AWS: no ``*`` Actions, account-wide Resources or ``*`` Principals in Allow statements.
    GCP: no roles/owner or roles/editor, no allUsers / allAuthenticatedUsers members."""
    found: list[str] = []
    for prop in AWS_POLICY_PROPS.get(resource_type, ()):
        document = _policy_document(props.get(prop))
        for index, statement in enumerate(_as_list(document.get("Statement")) if document else []):
            if isinstance(statement, Mapping):
                found += _aws_statement_violations(f"{prop}.Statement[{index}]", statement)
    if resource_type == "aws:iam/role:Role":
        for index, inline in enumerate(_as_list(props.get("inlinePolicies"))):
            document = _policy_document(inline.get("policy")) if isinstance(inline, Mapping) else None
            for s_index, statement in enumerate(_as_list(document.get("Statement")) if document else []):
                if isinstance(statement, Mapping):
                    found += _aws_statement_violations(f"inlinePolicies[{index}].Statement[{s_index}]", statement)
    if resource_type.startswith("gcp:") and "iam" in resource_type.lower():
        bindings: list[Mapping[str, Any]] = [
            {"role": props.get("role"), "members": [*_as_list(props.get("member")), *_as_list(props.get("members"))]}
        ]
        policy = _policy_document(props.get("policyData"))
        bindings += [b for b in _as_list(policy.get("bindings")) if isinstance(b, Mapping)] if policy else []
        for binding in bindings:
            if binding.get("role") in GCP_FORBIDDEN_ROLES:
                found.append(f"GCP IAM: role {binding.get('role')} is too broad; grant a storage role")
            public = [m for m in _as_list(binding.get("members")) if m in GCP_PUBLIC_MEMBERS]
            if public:
                found.append(f"GCP IAM: members {public} make the resource public")
    return found


#: (policy name, description, validator) — the pack registers exactly these.
RULES: tuple[tuple[str, str, Rule], ...] = (
    ("no-public-buckets", "History buckets are never publicly readable.", no_public_buckets),
    ("uniform-bucket-access", "Bucket access is decided by IAM alone (no object ACLs).", uniform_access),
    ("non-root-containers", "Every container runs as a non-root user.", non_root_containers),
    ("container-resource-limits", "Every container sets cpu and memory limits.", resource_limits),
    ("no-wildcard-iam", "IAM grants are scoped: no wildcards, owner/editor or public members.", no_wildcard_iam),
)
