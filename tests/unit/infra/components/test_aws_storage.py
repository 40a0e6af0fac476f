"""S3HistoryStorage under Pulumi mocks: bucket hardening, trust policies, least privilege, wiring."""

from __future__ import annotations

import json
import re
from fnmatch import fnmatchcase
from typing import Any

import pulumi
import pulumi_aws as aws
import pytest

from ray_history_pulumi.aws_storage import S3HistoryStorage, S3HistoryStorageArgs
from ray_history_pulumi.contracts import ServiceAccountRef
from tests.unit.infra.mocks import AWS_ACCOUNT, AWS_REGION, EKS_ISSUER, RecordingMocks, settled

WRITERS = [ServiceAccountRef("ray", "ray-collector"), ServiceAccountRef("team-a", "ray-worker")]
SERVER = ServiceAccountRef("ray-system", "ray-history-server")
#: The retention job's account beside the server: the default index maintainer.
GC = ServiceAccountRef("ray-system", "ray-history-gc")
OIDC_ARN = f"arn:aws:iam::{AWS_ACCOUNT}:oidc-provider/{EKS_ISSUER.removeprefix('https://')}"
ISSUER_HOST = EKS_ISSUER.removeprefix("https://")


@pytest.fixture
def mocks() -> RecordingMocks:
    return RecordingMocks.install()


def _storage(**overrides: Any) -> S3HistoryStorage:
    provider = aws.Provider("aws-explicit", region=AWS_REGION)
    settings: dict[str, Any] = {
        "identity_mode": "irsa",
        "oidc_provider_arn": OIDC_ARN,
        "oidc_issuer_url": EKS_ISSUER,
        "writers": WRITERS,
        "server": SERVER,
        "bucket_name": "ray-history-demo",
        "retention_days": 14,
    }
    settings.update(overrides)
    return S3HistoryStorage(
        "history", S3HistoryStorageArgs(**settings), opts=pulumi.ResourceOptions(providers=[provider])
    )


def _done(storage: S3HistoryStorage) -> pulumi.Output[Any]:
    """An output that resolves once every child of the component is registered."""
    return pulumi.Output.all(storage.wiring.env, storage.server_role.arn, storage.server_role.id)


def _policy(mocks: RecordingMocks, role_name: str) -> dict[str, Any]:
    [policy] = [r for r in mocks.of_type("aws:iam/rolePolicy:RolePolicy") if r.name == f"{role_name}-s3"]
    return json.loads(policy.inputs["policy"])


@settled
def test_bucket_is_owner_enforced_private_encrypted_and_expires(mocks: RecordingMocks) -> pulumi.Output[None]:
    storage = _storage(root_dir="prod")

    def check(_: object) -> None:
        assert mocks.one("aws:s3/bucket:Bucket").inputs["bucket"] == "ray-history-demo"
        ownership = mocks.one("aws:s3/bucketOwnershipControls:BucketOwnershipControls").inputs
        assert ownership["rule"] == {"objectOwnership": "BucketOwnerEnforced"}
        block = mocks.one("aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock").inputs
        for flag in ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets"):
            assert block[flag] is True, flag
        sse = mocks.one("aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration").inputs
        assert sse["rules"][0]["applyServerSideEncryptionByDefault"] == {"sseAlgorithm": "AES256"}
        rules = {
            r["id"]: r
            for r in mocks.one("aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration").inputs["rules"]
        }
        assert rules["expire-history"]["expiration"] == {"days": 14}
        assert rules["expire-history"]["filter"] == {"prefix": "prod/"}
        assert rules["abort-incomplete-uploads"]["abortIncompleteMultipartUpload"] == {"daysAfterInitiation": 2}
        # The only bucket policy denies; nothing can open the bucket up.
        [policy] = [json.loads(r.inputs["policy"]) for r in mocks.of_type("aws:s3/bucketPolicy:BucketPolicy")]
        assert all(statement["Effect"] == "Deny" for statement in policy["Statement"])

    return _done(storage).apply(check)


@settled
def test_bucket_denies_requests_without_tls(mocks: RecordingMocks) -> pulumi.Output[None]:
    """A bucket policy denies every request whose ``aws:SecureTransport`` is false.

    AWS: "Security best practices for Amazon S3" -- enforce encryption of data in transit
    with a bucket policy denying ``s3:*`` when ``aws:SecureTransport`` is false
    (https://docs.aws.amazon.com/AmazonS3/latest/userguide/security-best-practices.html).
    """
    storage = _storage()
    arn = "arn:aws:s3:::ray-history-demo"

    def check(_: object) -> None:
        [statement] = json.loads(mocks.one("aws:s3/bucketPolicy:BucketPolicy").inputs["policy"])["Statement"]
        assert statement["Effect"] == "Deny"
        assert statement["Principal"] == "*"
        assert statement["Action"] == "s3:*"
        assert statement["Resource"] == [arn, f"{arn}/*"]
        assert statement["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}

    return _done(storage).apply(check)


@settled
def test_bucket_settings_are_applied_one_after_the_other(mocks: RecordingMocks) -> pulumi.Output[None]:
    """Each bucket configuration waits for the previous one.

    AWS: concurrent configuration writes on one bucket fail with 409 ``OperationAborted``,
    "A conflicting conditional operation is currently in progress against this resource.
    Please try again." (https://docs.aws.amazon.com/AmazonS3/latest/API/ErrorResponses.html).
    """
    storage = _storage()
    chain = [
        ("aws:s3/bucketOwnershipControls:BucketOwnershipControls", "history-bucket"),
        ("aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock", "history-ownership"),
        (
            "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
            "history-public-access",
        ),
        ("aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration", "history-encryption"),
        ("aws:s3/bucketPolicy:BucketPolicy", "history-lifecycle"),
    ]

    def check(_: object) -> None:
        for typ, previous in chain:
            resource = mocks.one(typ)
            assert resource.depends_on(previous), (resource.name, resource.dependency_names())

    return _done(storage).apply(check)


@settled
def test_roles_reach_only_the_root_prefix(mocks: RecordingMocks) -> pulumi.Output[None]:
    """With ``root_dir``, objects are reachable only under it and listing needs an ``s3:prefix`` inside it.

    AWS: "Amazon S3 condition key examples" -- limit ``s3:ListBucket`` to a folder with the
    ``s3:prefix`` condition key (https://docs.aws.amazon.com/AmazonS3/latest/userguide/amazon-s3-policy-keys.html).
    """
    storage = _storage(root_dir="/prod/")
    arn = "arn:aws:s3:::ray-history-demo"

    def check(_: object) -> None:
        server = {s["Sid"]: s for s in _policy(mocks, "history-server")["Statement"]}
        assert server["ListHistoryBucket"]["Resource"] == arn
        assert server["ListHistoryBucket"]["Condition"] == {"StringLike": {"s3:prefix": ["prod/", "prod/*"]}}
        assert server["ReadHistoryObjects"]["Resource"] == f"{arn}/prod/*"
        for namespace in ("ray", "team-a"):
            statements = {s["Sid"]: s for s in _policy(mocks, f"history-writer-{namespace}")["Statement"]}
            # A collector lists, reads and writes its namespace's keys and the probes: 3 kinds x 2 + 1.
            listed = statements["ListHistoryBucket"]["Condition"]["StringLike"]["s3:prefix"]
            objects = statements["OwnNamespaceObjects"]["Resource"]
            assert len(listed) == len(objects) == 7, (listed, objects)
            assert all(p.startswith("prod/") and p.endswith("*") for p in listed)
            assert [f"{arn}/{p}" for p in listed] == objects
            assert f"prod/cluster-history/raycluster/{namespace}/*" in listed and "prod/_selfcheck/*" in listed
            assert "ReadHistoryObjects" not in statements and "WriteHistoryObjects" not in statements

    return _done(storage).apply(check)


@settled
def test_kms_key_is_usable_by_both_roles(mocks: RecordingMocks) -> pulumi.Output[None]:
    """With SSE-KMS, the writer may GenerateDataKey + Decrypt and the server may Decrypt on the key.

    AWS: "Using server-side encryption with AWS KMS keys (SSE-KMS)" -- uploading needs
    ``kms:GenerateDataKey``, downloading ``kms:Decrypt``, multipart uploads both
    (https://docs.aws.amazon.com/AmazonS3/latest/userguide/UsingKMSEncryption.html#require-sse-kms).
    Without them every read and write of the collector and the server fails with 403.
    """
    key = "arn:aws:kms:us-east-1:123456789012:key/abc"
    storage = _storage(kms_key_arn=key)

    def check(_: object) -> None:
        expected = {
            "history-server": ["kms:Decrypt"],
            "history-writer-ray": ["kms:Decrypt", "kms:GenerateDataKey"],
            "history-writer-team-a": ["kms:Decrypt", "kms:GenerateDataKey"],
        }
        for role, actions in expected.items():
            [statement] = [s for s in _policy(mocks, role)["Statement"] if s["Resource"] == key]
            assert sorted(statement["Action"]) == actions

    return _done(storage).apply(check)


@settled
def test_kms_key_switches_to_sse_kms(mocks: RecordingMocks) -> pulumi.Output[None]:
    storage = _storage(kms_key_arn="arn:aws:kms:us-east-1:123456789012:key/abc", retention_days=None)

    def check(_: object) -> None:
        rule = mocks.one(
            "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration"
        ).inputs["rules"][0]
        assert rule["applyServerSideEncryptionByDefault"] == {
            "sseAlgorithm": "aws:kms",
            "kmsMasterKeyId": "arn:aws:kms:us-east-1:123456789012:key/abc",
        }
        assert rule["bucketKeyEnabled"] is True
        ids = [
            r["id"]
            for r in mocks.one("aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration").inputs["rules"]
        ]
        assert ids == ["abort-incomplete-uploads"]

    return _done(storage).apply(check)


@settled
def test_irsa_trust_policies_pin_subject_and_audience(mocks: RecordingMocks) -> pulumi.Output[None]:
    storage = _storage()

    def check(_: object) -> None:
        roles = {r.name: json.loads(r.inputs["assumeRolePolicy"]) for r in mocks.of_type("aws:iam/role:Role")}
        assert set(roles) == {"history-server", "history-writer-ray", "history-writer-team-a"}
        for role_name, subjects in {
            "history-server": ["system:serviceaccount:ray-system:ray-history-server"],
            "history-writer-ray": ["system:serviceaccount:ray:ray-collector"],
            "history-writer-team-a": ["system:serviceaccount:team-a:ray-worker"],
        }.items():
            [statement] = roles[role_name]["Statement"]
            assert statement["Effect"] == "Allow"
            assert statement["Action"] == "sts:AssumeRoleWithWebIdentity"
            assert statement["Principal"] == {"Federated": OIDC_ARN}
            assert statement["Condition"] == {
                "StringEquals": {f"{ISSUER_HOST}:sub": subjects, f"{ISSUER_HOST}:aud": "sts.amazonaws.com"}
            }
        assert not mocks.of_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")

    return _done(storage).apply(check)


@settled
def test_policies_are_least_privilege_on_the_bucket_only(mocks: RecordingMocks) -> pulumi.Output[None]:
    storage = _storage()
    arn = "arn:aws:s3:::ray-history-demo"

    def check(_: object) -> None:
        server = {s["Resource"]: sorted(s["Action"]) for s in _policy(mocks, "history-server")["Statement"]}
        assert server == {arn: ["s3:ListBucket"], f"{arn}/*": ["s3:GetObject"]}
        writer_statements = _policy(mocks, "history-writer-team-a")["Statement"]
        writer = {str(s["Resource"]): sorted(s["Action"]) for s in writer_statements if s["Effect"] == "Allow"}
        own = [f"{arn}/cluster-history/{kind}/team-a/*" for kind in ("raycluster", "rayjob", "rayservice")] + [
            f"{arn}/cluster-metadata/{kind}/team-a_*" for kind in ("raycluster", "rayjob", "rayservice")
        ]
        assert writer == {
            arn: ["s3:ListBucket"],  # s3:prefix is no condition key of ListBucketMultipartUploads
            str([*own, f"{arn}/_selfcheck/*"]): sorted(
                [
                    "s3:AbortMultipartUpload",
                    "s3:DeleteObject",
                    "s3:GetObject",
                    "s3:ListMultipartUploadParts",
                    "s3:PutObject",
                ]
            ),
        }
        [deny] = [s for s in writer_statements if s["Effect"] != "Allow"]
        assert deny["Sid"] == "DenySharedIndexWrites" and deny["Resource"] == f"{arn}/history-index/*"
        for role in ("history-server", "history-writer-ray", "history-writer-team-a"):
            for statement in _policy(mocks, role)["Statement"]:
                if statement["Effect"] == "Allow":  # no wildcard grant; the deny may be broad
                    assert all("*" not in action for action in statement["Action"])
        assert not mocks.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")

    return _done(storage).apply(check)


@settled
def test_irsa_wiring_annotates_service_accounts(mocks: RecordingMocks) -> pulumi.Output[None]:
    storage = _storage(root_dir="prod")
    writer = storage.wiring.writers["team-a/ray-worker"]

    def check(args: list[Any]) -> None:
        env, server_annotations, writer_annotations = args
        assert env == {
            "STORAGE_BACKEND": "s3",
            "S3_BUCKET": "ray-history-demo",
            "S3_REGION": AWS_REGION,
            "STORAGE_ROOT_DIR": "prod",
        }
        assert server_annotations == {"eks.amazonaws.com/role-arn": f"arn:aws:iam::{AWS_ACCOUNT}:role/history-server"}
        assert re.fullmatch(
            r"arn:aws:iam::\d{12}:role/history-writer-team-a", writer_annotations["eks.amazonaws.com/role-arn"]
        )
        assert set(storage.wiring.writers) == {"ray/ray-collector", "team-a/ray-worker"}

    return pulumi.Output.all(
        storage.wiring.env, storage.wiring.server.service_account_annotations, writer.service_account_annotations
    ).apply(check)


def test_pod_identity_trust_and_associations(mocks: RecordingMocks) -> None:
    built: list[S3HistoryStorage] = []

    @settled
    def program() -> pulumi.Output[Any]:
        built.append(
            _storage(
                identity_mode="pod-identity", cluster_name="demo-eks", oidc_provider_arn=None, oidc_issuer_url=None
            )
        )
        return _done(built[0])

    # The associations register once the roles' ARNs resolve: check after every
    # registration finished (settled waits for every one), not inside an apply.
    program()
    storage = built[0]
    for role in mocks.of_type("aws:iam/role:Role"):
        [statement] = json.loads(role.inputs["assumeRolePolicy"])["Statement"]
        assert statement["Principal"] == {"Service": "pods.eks.amazonaws.com"}
        assert sorted(statement["Action"]) == ["sts:AssumeRole", "sts:TagSession"]
        assert "Condition" not in statement
    associations = {
        (a.inputs["clusterName"], a.inputs["namespace"], a.inputs["serviceAccount"], a.inputs["roleArn"])
        for a in mocks.of_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")
    }
    role_arn = f"arn:aws:iam::{AWS_ACCOUNT}:role/history-"
    assert associations == {
        ("demo-eks", "ray-system", "ray-history-server", role_arn + "server"),
        ("demo-eks", "ray", "ray-collector", role_arn + "writer-ray"),
        ("demo-eks", "team-a", "ray-worker", role_arn + "writer-team-a"),
    }
    assert storage.wiring.server.service_account_annotations == {}


@settled
def test_every_resource_uses_the_explicit_provider(mocks: RecordingMocks) -> pulumi.Output[None]:
    storage = _storage(identity_mode="pod-identity", cluster_name="demo-eks")
    return _done(storage).apply(lambda _: mocks.assert_all_use_provider("aws", "aws-explicit"))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"identity_mode": "kiam"}, "S3HistoryStorageArgs.identity_mode='kiam'"),
        ({"identity_mode": "irsa"}, "S3HistoryStorageArgs.oidc_provider_arn"),
        ({"identity_mode": "pod-identity"}, "S3HistoryStorageArgs.cluster_name"),
        (
            {"identity_mode": "pod-identity", "cluster_name": "c", "bucket_name": "UPPER"},
            "S3HistoryStorageArgs.bucket_name",
        ),
        (
            {"identity_mode": "pod-identity", "cluster_name": "c", "retention_days": -1},
            "S3HistoryStorageArgs.retention_days",
        ),
    ],
)
def test_bad_args_name_the_field(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        S3HistoryStorageArgs(**overrides)


# ------------------------------------------------------------------ shared indexes
def _server_policy_for(mocks: RecordingMocks, **overrides: Any) -> dict[str, Any]:
    @settled  # the role's policy registers once the role's ARN resolves
    def program() -> None:
        _storage(**overrides)

    program()
    return _policy(mocks, "history-server")


@pytest.mark.parametrize(
    ("root_dir", "index_arn"),
    [
        ("", "arn:aws:s3:::ray-history-demo/history-index/*"),
        ("x/y", "arn:aws:s3:::ray-history-demo/x/y/history-index/*"),
    ],
)
def test_write_lets_the_server_upload_under_the_index_prefix_only(
    mocks: RecordingMocks, root_dir: str, index_arn: str
) -> None:
    """``write``: ``s3:PutObject``, the multipart calls and ``s3:DeleteObject`` (a re-indexed
    session's superseded copy is deleted) on the object ARN of the index prefix only: a key
    prefix in the Resource scopes the actions to it
    (https://docs.aws.amazon.com/AmazonS3/latest/userguide/example-policies-s3.html). Reads stay as
    they were; no delete outside the index prefix."""
    policy = _server_policy_for(mocks, root_dir=root_dir, shared_index="write")
    root_objects = f"arn:aws:s3:::ray-history-demo/{root_dir}/*" if root_dir else "arn:aws:s3:::ray-history-demo/*"
    by_resource = {s["Resource"]: sorted(s["Action"]) for s in policy["Statement"]}
    assert by_resource == {
        "arn:aws:s3:::ray-history-demo": ["s3:ListBucket"],
        root_objects: ["s3:GetObject"],
        index_arn: ["s3:AbortMultipartUpload", "s3:DeleteObject", "s3:ListMultipartUploadParts", "s3:PutObject"],
    }
    [index] = [s for s in policy["Statement"] if s["Resource"] == index_arn]
    assert index["Sid"] == "WriteSharedIndexes" and index["Effect"] == "Allow"


@pytest.mark.parametrize("mode", ["off", "read"])
def test_read_and_off_keep_the_server_read_only(mocks: RecordingMocks, mode: str) -> None:
    """Least privilege: an identity that only reads sessions never gets an upload action."""
    policy = _server_policy_for(mocks, shared_index=mode)
    actions = {action for statement in policy["Statement"] for action in statement["Action"]}
    assert actions == {"s3:ListBucket", "s3:GetObject"}


def test_write_with_sse_kms_lets_the_server_generate_data_keys(mocks: RecordingMocks) -> None:
    """Uploading under SSE-KMS needs ``kms:GenerateDataKey``
    (https://docs.aws.amazon.com/AmazonS3/latest/userguide/UsingKMSEncryption.html#require-sse-kms):
    without it every index upload fails with 403."""
    key = "arn:aws:kms:us-east-1:123456789012:key/abc"
    policy = _server_policy_for(mocks, kms_key_arn=key, shared_index="write")
    [statement] = [s for s in policy["Statement"] if s["Resource"] == key]
    assert sorted(statement["Action"]) == ["kms:Decrypt", "kms:GenerateDataKey"]


def allowed(policy: dict[str, Any], action: str, resource: str) -> bool:
    """IAM's documented evaluation for one identity policy and one request: an explicit
    ``Deny`` that matches wins, else a matching ``Allow`` allows, else the implicit deny
    (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_evaluation-logic.html).
    ``*`` in actions and resources matches any run of characters. Statements with a
    ``Condition`` (listing with an ``s3:prefix``) are skipped: these are object calls."""

    def matches(statement: dict[str, Any]) -> bool:
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        return any(fnmatchcase(action, a) for a in actions) and any(fnmatchcase(resource, r) for r in resources)

    statements = [s for s in policy["Statement"] if "Condition" not in s and matches(s)]
    if any(s["Effect"] == "Deny" for s in statements):
        return False
    return any(s["Effect"] == "Allow" for s in statements)


def _policies_for(mocks: RecordingMocks, **overrides: Any) -> dict[str, dict[str, Any]]:
    captured: dict[str, dict[str, Any]] = {}

    @settled  # the role policies register once the roles' ARNs resolve; the apply runs after them
    def program() -> pulumi.Output[None]:
        return _done(_storage(**overrides)).apply(
            lambda _: captured.update(
                {r.name: json.loads(r.inputs["policy"]) for r in mocks.of_type("aws:iam/rolePolicy:RolePolicy")}
            )
        )

    program()
    return captured


MUTATIONS = ["s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload", "s3:DeleteObjectVersion", "s3:PutObjectAcl"]


@pytest.mark.parametrize("root_dir", ["", "prod/ray"])
@pytest.mark.parametrize("mode", ["read", "write"])
def test_collectors_cannot_write_or_delete_shared_indexes(mocks: RecordingMocks, root_dir: str, mode: str) -> None:
    """A collector credential (any job code in a team's pods has it) must not plant, replace or
    delete a shared index, which every server downloads for any team's session
    (/tmp/review_bucket/test_writer_grants.py, test_shared_index_forgery.py): the collectors'
    role has an explicit ``Deny`` on ``ROOT/history-index/*``, which overrides its allow on
    ``ROOT/*``. The retention job's role (an index maintainer) has no such deny: it deletes a
    session's indexes with it."""
    policies = _policies_for(mocks, root_dir=root_dir, shared_index=mode, writers=[*WRITERS, GC])
    base = f"arn:aws:s3:::ray-history-demo/{root_dir}/" if root_dir else "arn:aws:s3:::ray-history-demo/"
    session = base + "cluster-history/raycluster/team-a/raycluster-x/session_1/node/logs/raylet.out"
    marker = base + "cluster-metadata/raycluster/team-a_raycluster-x/session_1"
    index = base + "history-index/raycluster/team-b/raycluster-y/session_1/v1-s1/" + "f" * 64 + ".sqlite.zst"
    collector = policies["history-writer-team-a-s3"]
    for action in MUTATIONS:
        assert not allowed(collector, action, index), f"a collector credential may {action} {index}"
    assert set(policies) == {
        "history-server-s3",
        "history-writer-ray-s3",
        "history-writer-team-a-s3",
        "history-maintainer-s3",
    }
    maintainer = policies["history-maintainer-s3"]
    for action in ["s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"]:
        assert allowed(collector, action, session) and allowed(collector, action, marker), action
        assert not allowed(collector, action, index), action
        assert allowed(maintainer, action, index) and allowed(maintainer, action, session), action
    # Nor read one: a collector reads only its own namespace's keys.
    assert not allowed(collector, "s3:GetObject", index)


def test_each_role_trusts_only_its_own_service_accounts(mocks: RecordingMocks) -> None:
    """IRSA: the collectors' role never trusts the gc job's account and the other way round;
    Pod Identity: each account is associated with its own role."""
    _policies_for(mocks, writers=[*WRITERS, GC])
    roles = {r.name: json.loads(r.inputs["assumeRolePolicy"]) for r in mocks.of_type("aws:iam/role:Role")}
    subjects = {
        name: role["Statement"][0]["Condition"]["StringEquals"][f"{ISSUER_HOST}:sub"] for name, role in roles.items()
    }
    assert subjects == {
        "history-server": ["system:serviceaccount:ray-system:ray-history-server"],
        "history-writer-ray": ["system:serviceaccount:ray:ray-collector"],
        "history-writer-team-a": ["system:serviceaccount:team-a:ray-worker"],
        "history-maintainer": ["system:serviceaccount:ray-system:ray-history-gc"],
    }
    mocks = RecordingMocks.install()
    _policies_for(
        mocks,
        writers=[*WRITERS, GC],
        identity_mode="pod-identity",
        cluster_name="demo-eks",
        oidc_provider_arn=None,
        oidc_issuer_url=None,
    )
    associations = {
        (a.inputs["namespace"], a.inputs["serviceAccount"]): a.inputs["roleArn"].rsplit("/", 1)[1]
        for a in mocks.of_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")
    }
    assert associations == {
        ("ray-system", "ray-history-server"): "history-server",
        ("ray", "ray-collector"): "history-writer-ray",
        ("team-a", "ray-worker"): "history-writer-team-a",
        ("ray-system", "ray-history-gc"): "history-maintainer",
    }


@settled
def test_only_the_gc_job_maintains_indexes_and_the_wiring_carries_the_mode(
    mocks: RecordingMocks,
) -> pulumi.Output[None]:
    """Only the retention job's account (default maintainer, beside the server) may delete shared indexes."""
    storage = _storage(shared_index="write", writers=[*WRITERS, GC])

    def check(_: object) -> None:
        assert storage.wiring.shared_index == "write"
        assert storage.wiring.index_maintainers == ["ray-system/ray-history-gc"]
        assert set(storage.wiring.writers) == {"ray/ray-collector", "team-a/ray-worker", "ray-system/ray-history-gc"}
        assert storage.maintainer_role is not None

    return _done(storage).apply(check)


def test_explicit_index_maintainers_must_be_writers() -> None:
    with pytest.raises(
        ValueError, match=re.escape("S3HistoryStorageArgs.index_maintainers: ['ray-system/ray-history-gc']")
    ):
        S3HistoryStorageArgs(identity_mode="pod-identity", cluster_name="c", writers=WRITERS, index_maintainers=[GC])
    args = S3HistoryStorageArgs(
        identity_mode="pod-identity", cluster_name="c", writers=[*WRITERS, GC], index_maintainers=[]
    )
    assert args.maintainers() == [] and args.collectors() == [*WRITERS, GC]


def test_bad_shared_index_names_the_field() -> None:
    with pytest.raises(ValueError, match=re.escape("S3HistoryStorageArgs.shared_index='all'")):
        S3HistoryStorageArgs(identity_mode="pod-identity", cluster_name="c", shared_index="all")


def test_role_and_policy_names_fit_aws_limits_for_a_long_component_name() -> None:
    """IAM role names are at most 64 characters and inline policy names 128
    (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_iam-quotas.html); a component
    name too long for Pulumi's auto-name (logical name + 8) gets a shortened prefix instead,
    and the default name ``history`` keeps the auto-names it always had."""
    from tests.unit.infra.components.test_aws_names import iam_naming, names_over_limit

    for name, prefixed in (("history", (False, False)), ("h" * 70, (True, False)), ("h" * 130, (True, True))):
        mocks = RecordingMocks.install()

        @settled
        def program(name: str = name) -> pulumi.Output[Any]:
            args = S3HistoryStorageArgs(
                identity_mode="pod-identity", cluster_name="demo-eks", writers=WRITERS, server=SERVER
            )
            return _done(S3HistoryStorage(name, args))

        program()
        assert names_over_limit(mocks) == []
        assert iam_naming(mocks) == (6, {("Role", prefixed[0]), ("RolePolicy", prefixed[1])})


@pytest.mark.parametrize("root_dir", ["", "prod/ray"])
def test_each_namespace_reads_and_writes_only_its_own_history(mocks: RecordingMocks, root_dir: str) -> None:
    """One team's collector credential (any job in its Ray pods holds it) can neither read
    another team's logs nor forge or erase its stored history: each namespace's role allows
    reads and writes only on object ARNs of that namespace's key prefixes, and an Allow
    applies only to a matching resource
    (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_resource.html,
    https://docs.aws.amazon.com/AmazonS3/latest/userguide/example-policies-s3.html).
    Namespace ``team`` is a prefix of ``team-a``: its keys (``team/``, markers ``team_``)
    never match ``team-a``'s."""
    writers = [*WRITERS, ServiceAccountRef("team", "ray-worker"), ServiceAccountRef("team-a", "other")]
    policies = _policies_for(mocks, root_dir=root_dir, writers=writers)
    base = f"arn:aws:s3:::ray-history-demo/{root_dir}/" if root_dir else "arn:aws:s3:::ray-history-demo/"

    def keys(namespace: str) -> list[str]:
        return [
            f"{base}cluster-history/raycluster/{namespace}/c/session_1/node/logs/raylet.out",
            f"{base}cluster-history/rayjob/{namespace}/job/c/session_1/node/job_events/x.jsonl",
            f"{base}cluster-metadata/rayservice/{namespace}_svc_c/session_1",
        ]

    assert {name.removeprefix("history-writer-").removesuffix("-s3") for name in policies if "writer" in name} == {
        "ray",
        "team-a",
        "team",
    }
    for namespace in ("ray", "team-a", "team"):
        policy = policies[f"history-writer-{namespace}-s3"]
        for other in {"ray", "team-a", "team"} - {namespace}:
            for key in keys(other):
                assert not allowed(policy, "s3:GetObject", key), key
                for action in MUTATIONS:
                    assert not allowed(policy, action, key), f"{namespace} may {action} {key}"
        for key in [*keys(namespace), f"{base}_selfcheck/probe-1"]:
            for action in ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"]:
                assert allowed(policy, action, key), f"{namespace} may not {action} {key}"


def test_a_long_namespace_keeps_role_names_within_aws_limits() -> None:
    """A namespace may have 63 characters (RFC 1123 label) and IAM role names at most 64
    (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_iam-quotas.html): the
    namespace role's name is shortened with a hash, and two long namespaces differing only
    at the end still get different names."""
    from tests.unit.infra.components.test_aws_names import names_over_limit

    mocks = RecordingMocks.install()
    long_a, long_b = "a" * 62 + "x", "a" * 62 + "y"

    @settled
    def program() -> pulumi.Output[Any]:
        writers = [ServiceAccountRef(long_a, "ray"), ServiceAccountRef(long_b, "ray")]
        args = S3HistoryStorageArgs(identity_mode="pod-identity", cluster_name="demo-eks", writers=writers)
        return _done(S3HistoryStorage("history", args))

    program()
    assert names_over_limit(mocks) == []
    prefixes = [r.inputs.get("namePrefix") for r in mocks.of_type("aws:iam/role:Role") if "writer" in r.name]
    assert len(prefixes) == 2 and all(prefixes) and len(set(prefixes)) == 2, prefixes


def test_accounts_whose_dashed_names_coincide_get_distinct_resources(mocks: RecordingMocks) -> None:
    """``a-b/c`` and ``a/b-c`` are distinct service accounts (EKS allows one Pod Identity
    association per namespace and service account), but ``NAME-KIND-NS-SA`` made both
    associations ``history-writer-a-b-c``, and Pulumi refuses a duplicate URN
    (https://www.pulumi.com/docs/iac/concepts/resources/names/#urns): a namespace holds no
    ``.``, so ``NS.SA`` is unique. An unambiguous former name stays an alias: a stack deployed
    before renames its association in place (found by reviewer helper-54)."""
    from ray_history_pulumi.storage_common import account_resource_name, former_account_aliases

    writers = [ServiceAccountRef("a-b", "c"), ServiceAccountRef("a", "b-c"), ServiceAccountRef("ray", "ray-collector")]
    _policies_for(
        mocks,
        writers=writers,
        identity_mode="pod-identity",
        cluster_name="demo-eks",
        oidc_provider_arn=None,
        oidc_issuer_url=None,
    )
    names = [a.name for a in mocks.of_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")]
    assert len(names) == len(set(names)) == 4, names
    assert "history-writer-a-b.c" in names and "history-writer-a.b-c" in names
    assert account_resource_name("history-writer", writers[2]) == "history-writer-ray.ray-collector"
    [alias] = former_account_aliases("history-writer", writers[2], writers)
    assert alias.name == "history-writer-ray-ray-collector"
    assert former_account_aliases("history-writer", writers[0], writers) == []  # ambiguous: never deployed
