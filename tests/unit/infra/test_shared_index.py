"""``historyServer.sharedIndex`` through the whole program, per cloud and per mode (#18 item 4):
the server's ``SHARED_INDEX`` (and ``SHARED_INDEX_CONTAINER`` on Azure) and the grants that
go with it. Only ``write`` gives the server's identity write access, scoped to the shared
indexes; ``read`` and ``off`` grant it no write anywhere."""

from __future__ import annotations

import json
from typing import Any

import pytest

from infra.policy.rules import RULES
from tests.unit.infra.mocks import FAKE_KUBECONFIG, RecordedResource, RecordingMocks
from tests.unit.infra.schema_validation import validate_k8s
from tests.unit.infra.test_config import stack_values
from tests.unit.infra.test_program import container_env, deploy_with

MODES = ("off", "read", "write")
READER = "2a2b9908-6ea1-4ae2-8e65-a410df84e7d1"  # Storage Blob Data Reader
CONTRIBUTOR = "ba92f5b4-2d11-453d-a403-e96b0029c9fe"  # Storage Blob Data Contributor


def _deploy(stack: str, mode: str, **extra: Any) -> RecordingMocks:
    values = stack_values(stack)
    values["kubeconfig"] = FAKE_KUBECONFIG
    values["historyServer"] = {**values.get("historyServer", {}), "sharedIndex": mode}
    values.update(extra)
    mocks, _ = deploy_with(values)
    return mocks


def _server(mocks: RecordingMocks) -> RecordedResource:
    (deployment,) = [
        r for r in mocks.of_type("kubernetes:apps/v1:Deployment") if r.inputs["metadata"]["name"] == "historyserver"
    ]
    validate_k8s(deployment.inputs)
    return deployment


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("stack", ["gke", "eks", "kind"])
def test_the_server_gets_the_mode_and_no_container_outside_azure(stack: str, mode: str) -> None:
    env = container_env(_server(_deploy(stack, mode)))
    assert env["SHARED_INDEX"] == mode
    assert "SHARED_INDEX_CONTAINER" not in env


@pytest.mark.parametrize("mode", MODES)
def test_gke_grants_per_mode(mode: str) -> None:
    """GCS: ``write`` adds roles/storage.objectUser for the server's principal under an IAM
    condition on the object name prefix (https://cloud.google.com/storage/docs/access-control/iam#conditions;
    objects are ``projects/_/buckets/BUCKET/objects/KEY``,
    https://cloud.google.com/iam/docs/conditions-attribute-reference#resource-name); objectViewer
    stays unconditional. ``read`` and ``off``: objectViewer alone."""
    mocks = _deploy("gke", mode, storage={"bucket": "hist-bucket", "rootDir": "team/a"})
    server = [
        (r.inputs["role"], r.inputs.get("condition"))
        for r in mocks.of_type("gcp:storage/bucketIAMMember:BucketIAMMember")
        if r.inputs["member"].endswith("/sa/ray-history-server")
    ]
    expected: list[tuple[str, Any]] = [("roles/storage.objectViewer", None)]
    if mode == "write":
        condition = 'resource.name.startsWith("projects/_/buckets/hist-bucket/objects/team/a/history-index/")'
        expected.append(
            (
                "roles/storage.objectUser",
                {
                    "title": "shared-index-only",
                    "description": "Ray history server: write shared indexes only",
                    "expression": condition,
                },
            )
        )
    assert sorted(server, key=str) == sorted(expected, key=str)


@pytest.mark.parametrize("mode", MODES)
def test_eks_server_policy_per_mode(mode: str) -> None:
    """S3: ``write`` adds uploads on ``arn:aws:s3:::BUCKET/ROOT/history-index/*`` only, a
    prefix-scoped object ARN (https://docs.aws.amazon.com/AmazonS3/latest/userguide/example-policies-s3.html);
    otherwise the server's role keeps GetObject + ListBucket."""
    mocks = _deploy("eks", mode, storage={"bucket": "hist-bucket"})
    roles = {r.name: r.resource_id for r in mocks.of_type("aws:iam/role:Role")}
    (policy,) = [
        json.loads(r.inputs["policy"])
        for r in mocks.of_type("aws:iam/rolePolicy:RolePolicy")
        if r.inputs["role"] == roles["history-server"]
    ]
    actions = {s["Resource"]: sorted(s["Action"]) for s in policy["Statement"]}
    expected = {"arn:aws:s3:::hist-bucket": ["s3:ListBucket"], "arn:aws:s3:::hist-bucket/*": ["s3:GetObject"]}
    if mode == "write":
        expected["arn:aws:s3:::hist-bucket/history-index/*"] = [
            "s3:AbortMultipartUpload",
            "s3:DeleteObject",
            "s3:ListMultipartUploadParts",
            "s3:PutObject",
        ]
    assert actions == expected


@pytest.mark.parametrize("mode", MODES)
def test_aks_container_and_grants_per_mode(mode: str) -> None:
    """Azure: ``read`` and ``write`` create the index container; the server's role on it is
    Reader or Contributor, scoped to that container
    (https://learn.microsoft.com/azure/storage/blobs/assign-azure-role-data-access); with
    retention the gc account's own identity is Contributor on it too. ``off``: no container."""
    mocks = _deploy("aks", mode, retention={"days": 30})
    env = container_env(_server(mocks))
    containers = {r.resource_id: r.inputs["containerName"] for r in mocks.of_type("azure-native:storage:BlobContainer")}
    assignments = {
        r.name: (r.inputs["roleDefinitionId"].rsplit("/", 1)[1], containers.get(r.inputs["scope"], "account"))
        for r in mocks.of_type("azure-native:authorization:RoleAssignment")
        if r.name.startswith("history-")  # not the registry's
    }
    history = "ray-historyserver"
    expected = {
        "history-server-blob-data": (READER, history),
        "history-writer-default-blob-data": (CONTRIBUTOR, history),  # the stack's one workload namespace
        "history-maintainer-blob-data": (CONTRIBUTOR, history),
    }
    if mode == "off":
        assert sorted(containers.values()) == [history]
        assert "SHARED_INDEX_CONTAINER" not in env
    else:
        assert sorted(containers.values()) == ["ray-history-index", history]
        assert env["SHARED_INDEX_CONTAINER"] == "ray-history-index"
        expected["history-server-index-data"] = (CONTRIBUTOR if mode == "write" else READER, "ray-history-index")
        expected["history-maintainer-index-data"] = (CONTRIBUTOR, "ray-history-index")
    assert env["SHARED_INDEX"] == mode
    assert assignments == expected


@pytest.mark.parametrize("stack", ["gke", "eks", "aks"])
def test_the_policy_pack_accepts_a_write_stack(stack: str) -> None:
    """The stack's policy pack (no wildcard IAM, private buckets, ...) accepts the write grants
    (the cloud stacks: on kind the MinIO test server's own Deployment does not meet the pack's
    non-root rule, whatever the mode)."""
    mocks = _deploy(stack, "write")
    violations = [(r.typ, m) for r in mocks.resources for _, _, rule in RULES for m in rule(r.typ, r.inputs)]
    assert violations == []
