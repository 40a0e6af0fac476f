"""infra/policy: validators called directly (good and bad inputs) and through the pack."""

from __future__ import annotations

import json
from typing import Any

import pulumi
import pytest
import yaml  # type: ignore[import-untyped]
from pulumi_policy import EnforcementLevel, ResourceValidationArgs

from infra.examples.generate import EXAMPLE_PATH
from infra.policy import rules
from infra.policy.pack import PACK_NAME, build_policies
from ray_history_pulumi.contracts import IdentityWiring, StorageWiring
from ray_history_pulumi.history_server import HistoryServerArgs, HistoryServerK8s
from tests.unit.infra.mocks import RecordedResource, RecordingMocks, settled

DEPLOYMENT = "kubernetes:apps/v1:Deployment"


def _deployment(
    container_security: dict[str, Any] | None = None,
    pod_security: dict[str, Any] | None = None,
    resources: dict[str, Any] | None = None,
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "app", "image": "img:1"}
    if container_security is not None:
        container["securityContext"] = container_security
    if resources is not None:
        container["resources"] = resources
    pod: dict[str, Any] = {"containers": [container]}
    if pod_security is not None:
        pod["securityContext"] = pod_security
    return {"spec": {"template": {"spec": pod}}}


# ------------------------------------------------------------------ buckets
@pytest.mark.parametrize(
    ("typ", "props", "violations"),
    [
        (rules.GCS_BUCKET, {"publicAccessPrevention": "enforced", "uniformBucketLevelAccess": True}, 0),
        (rules.GCS_BUCKET, {"publicAccessPrevention": "inherited", "uniformBucketLevelAccess": True}, 1),
        (rules.GCS_BUCKET, {"uniformBucketLevelAccess": True}, 1),
        (rules.S3_PUBLIC_ACCESS_BLOCK, dict.fromkeys(rules.S3_BLOCK_FLAGS, True), 0),
        (rules.S3_PUBLIC_ACCESS_BLOCK, {**dict.fromkeys(rules.S3_BLOCK_FLAGS, True), "blockPublicPolicy": False}, 1),
        ("aws:s3/bucket:Bucket", {"bucket": "b"}, 0),
        ("aws:s3/bucket:Bucket", {"bucket": "b", "acl": "public-read"}, 1),
        (rules.AZURE_ACCOUNT, {"allowBlobPublicAccess": False}, 0),
        (rules.AZURE_ACCOUNT, {"allowBlobPublicAccess": True}, 1),
        (rules.AZURE_ACCOUNT, {}, 1),
        (rules.AZURE_CONTAINER, {"publicAccess": "None"}, 0),
        (rules.AZURE_CONTAINER, {"publicAccess": "Blob"}, 1),
        ("kubernetes:core/v1:Namespace", {"metadata": {"name": "x"}}, 0),
    ],
)
def test_no_public_buckets(typ: str, props: dict[str, Any], violations: int) -> None:
    assert len(rules.no_public_buckets(typ, props)) == violations


@pytest.mark.parametrize(
    ("typ", "props", "violations"),
    [
        (rules.GCS_BUCKET, {"uniformBucketLevelAccess": True}, 0),
        (rules.GCS_BUCKET, {"uniformBucketLevelAccess": False}, 1),
        (rules.S3_OWNERSHIP, {"rule": {"objectOwnership": "BucketOwnerEnforced"}}, 0),
        (rules.S3_OWNERSHIP, {"rule": {"objectOwnership": "ObjectWriter"}}, 1),
    ],
)
def test_uniform_access(typ: str, props: dict[str, Any], violations: int) -> None:
    assert len(rules.uniform_access(typ, props)) == violations


# ------------------------------------------------------------------ containers
@pytest.mark.parametrize(
    ("props", "violations"),
    [
        (_deployment({"runAsNonRoot": True}), 0),
        (_deployment({"runAsUser": 1000}), 0),
        (_deployment(None, {"runAsNonRoot": True}), 0),
        (_deployment({"runAsUser": 0}, {"runAsNonRoot": True}), 1),
        (_deployment({"runAsNonRoot": False}, {"runAsNonRoot": True}), 1),
        (_deployment(), 1),
    ],
)
def test_non_root_containers(props: dict[str, Any], violations: int) -> None:
    assert len(rules.non_root_containers(DEPLOYMENT, props)) == violations


def test_non_root_checks_init_containers_jobs_and_every_ray_group() -> None:
    job = {
        "spec": {
            "template": {
                "spec": {
                    "securityContext": {"runAsUser": 1000},
                    "initContainers": [{"name": "init", "securityContext": {"runAsUser": 0}}],
                    "containers": [{"name": "main"}],
                }
            }
        }
    }
    assert rules.non_root_containers("kubernetes:batch/v1:Job", job) == [
        "spec.template.spec.initContainers[init]: must run as non-root "
        "(securityContext.runAsNonRoot: true or runAsUser != 0)"
    ]
    good = {"securityContext": {"runAsNonRoot": True}, "containers": [{"name": "ray"}]}
    bad = {"containers": [{"name": "ray"}]}
    cluster = {
        "spec": {
            "headGroupSpec": {"template": {"spec": good}},
            "workerGroupSpecs": [{"template": {"spec": good}}, {"template": {"spec": bad}}],
        }
    }
    (message,) = rules.non_root_containers("kubernetes:ray.io/v1:RayCluster", cluster)
    assert message.startswith("spec.workerGroupSpecs[1].template.spec.containers[ray]")


@pytest.mark.parametrize(
    ("resources", "violations"),
    [
        ({"limits": {"cpu": "1", "memory": "1Gi"}}, 0),
        ({"limits": {"memory": "1Gi"}}, 1),
        ({"requests": {"cpu": "1", "memory": "1Gi"}}, 1),
        (None, 1),
    ],
)
def test_resource_limits(resources: dict[str, Any] | None, violations: int) -> None:
    props = _deployment({"runAsNonRoot": True}, resources=resources)
    assert len(rules.resource_limits(DEPLOYMENT, props)) == violations


# ------------------------------------------------------------------ IAM
def _doc(*statements: dict[str, Any]) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": list(statements)})


SCOPED = {"Effect": "Allow", "Action": ["s3:GetObject", "s3:PutObject"], "Resource": "arn:aws:s3:::hist/*"}


@pytest.mark.parametrize(
    ("typ", "props", "violations"),
    [
        ("aws:iam/policy:Policy", {"policy": _doc(SCOPED)}, 0),
        ("aws:iam/rolePolicy:RolePolicy", {"policy": _doc(SCOPED, {**SCOPED, "Action": "s3:*"})}, 1),
        ("aws:iam/policy:Policy", {"policy": _doc({**SCOPED, "Action": "*", "Resource": "*"})}, 2),
        ("aws:iam/policy:Policy", {"policy": _doc({**SCOPED, "Resource": "arn:aws:s3:::*"})}, 1),
        ("aws:iam/policy:Policy", {"policy": _doc({**SCOPED, "Effect": "Deny", "Action": "*"})}, 0),
        ("aws:iam/policy:Policy", {"policy": {"Statement": SCOPED}}, 0),
        (
            "aws:iam/role:Role",
            {"assumeRolePolicy": _doc({"Effect": "Allow", "Action": "sts:AssumeRole", "Principal": {"AWS": "*"}})},
            1,
        ),
        ("aws:iam/role:Role", {"inlinePolicies": [{"policy": _doc({**SCOPED, "Action": "*"})}]}, 1),
        ("aws:iam/policy:Policy", {"policy": None}, 0),  # unknown during preview
        (
            "gcp:storage/bucketIAMMember:BucketIAMMember",
            {"role": "roles/storage.objectUser", "member": "principal://x"},
            0,
        ),
        (
            "gcp:storage/bucketIAMMember:BucketIAMMember",
            {"role": "roles/storage.objectViewer", "member": "allUsers"},
            1,
        ),
        ("gcp:projects/iAMMember:IAMMember", {"role": "roles/editor", "member": "serviceAccount:a@b"}, 1),
        (
            "gcp:storage/bucketIAMBinding:BucketIAMBinding",
            {"role": "roles/owner", "members": ["allAuthenticatedUsers"]},
            2,
        ),
        (
            "gcp:storage/bucketIAMPolicy:BucketIAMPolicy",
            {"policyData": json.dumps({"bindings": [{"role": "roles/storage.admin", "members": ["allUsers"]}]})},
            1,
        ),
    ],
)
def test_no_wildcard_iam(typ: str, props: dict[str, Any], violations: int) -> None:
    assert len(rules.no_wildcard_iam(typ, props)) == violations


# ------------------------------------------------------------------ the pack
def _run_pack(typ: str, props: dict[str, Any]) -> list[tuple[str, str]]:
    reported: list[tuple[str, str]] = []
    args = ResourceValidationArgs(typ, props, "urn:pulumi:test::p::" + typ + "::x", "x", None, None)  # type: ignore[arg-type]
    for policy in build_policies():
        validate = policy._ResourceValidationPolicy__validate  # type: ignore[attr-defined]
        validate(args, lambda message, _urn, name=policy.name: reported.append((name, message)))
    return reported


def test_pack_registers_every_rule_as_mandatory() -> None:
    policies = build_policies()
    assert PACK_NAME == "ray-history-guardrails"
    assert [p.name for p in policies] == [name for name, _d, _r in rules.RULES]
    assert all(p.enforcement_level == EnforcementLevel.MANDATORY for p in policies)
    reported = _run_pack(rules.GCS_BUCKET, {"publicAccessPrevention": "inherited"})
    assert {name for name, _ in reported} == {"no-public-buckets", "uniform-bucket-access"}
    assert _run_pack(rules.GCS_BUCKET, {"publicAccessPrevention": "enforced", "uniformBucketLevelAccess": True}) == []


def test_what_we_deploy_passes_the_pack() -> None:
    """The history server component and the example RayJob satisfy every rule."""
    mocks = RecordingMocks.install()
    wiring = StorageWiring(
        backend="gcs", bucket="b", env={"STORAGE_BACKEND": "gcs", "GCS_BUCKET": "b"}, server=IdentityWiring()
    )
    recorded: list[RecordedResource] = []

    @settled  # the apply runs once every resource (some wait on others' outputs) has registered
    def run() -> pulumi.Output[None]:
        server = HistoryServerK8s("history", HistoryServerArgs(image="img:1", wiring=wiring))
        return server.deployment.urn.apply(lambda _: recorded.extend(mocks.resources))

    run()
    assert any(r.typ == DEPLOYMENT for r in recorded)
    for r in recorded:
        assert _run_pack(r.typ, r.inputs) == [], r.typ
    example = yaml.safe_load(EXAMPLE_PATH.read_text())
    assert _run_pack("kubernetes:ray.io/v1:RayJob", example) == []
    # ...and the pack does look inside that RayJob.
    del example["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["resources"]
    assert [name for name, _ in _run_pack("kubernetes:ray.io/v1:RayJob", example)] == ["container-resource-limits"]
