"""The IAM policy documents of :mod:`ray_history_pulumi.aws_storage`: role trust (IRSA, EKS
Pod Identity), the least-privilege bucket access of writers and the server, and the bucket's
TLS-only policy. Pure functions of ARNs and names, JSON out."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ray_history_pulumi.contracts import ServiceAccountRef
from ray_history_pulumi.storage_common import index_prefix

SERVER_OBJECT_ACTIONS = ["s3:GetObject"]
SERVER_BUCKET_ACTIONS = ["s3:ListBucket"]
WRITER_OBJECT_ACTIONS = [
    "s3:GetObject",
    "s3:PutObject",
    "s3:DeleteObject",
    "s3:AbortMultipartUpload",
    "s3:ListMultipartUploadParts",
]
WRITER_BUCKET_ACTIONS = ["s3:ListBucket", "s3:ListBucketMultipartUploads"]
#: The server's actions on the shared-index prefix with ``shared_index="write"``: large
#: indexes go up in parts, and a session re-indexed as its events grew replaces its older
#: copy (another key: the events fingerprint is in it), so the superseded one is deleted.
INDEX_WRITE_ACTIONS = ["s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"]
#: Denied to collectors on the shared-index prefix: every way to create, replace or delete an
#: object there (multipart uploads are authorized as ``s3:PutObject``).
INDEX_DENY_ACTIONS = ["s3:PutObject*", "s3:DeleteObject*", "s3:AbortMultipartUpload"]


def irsa_trust_policy(oidc_provider_arn: str, issuer_url: str, accounts: Sequence[ServiceAccountRef]) -> str:
    """Trust policy letting exactly these service accounts assume the role via IRSA."""
    issuer_host = issuer_url.removeprefix("https://").rstrip("/")
    statement = {
        "Effect": "Allow",
        "Principal": {"Federated": oidc_provider_arn},
        "Action": "sts:AssumeRoleWithWebIdentity",
        "Condition": {
            "StringEquals": {
                f"{issuer_host}:sub": sorted(sa.subject for sa in accounts),
                f"{issuer_host}:aud": "sts.amazonaws.com",
            }
        },
    }
    return json.dumps({"Version": "2012-10-17", "Statement": [statement]}, sort_keys=True)


def pod_identity_trust_policy() -> str:
    """Trust policy for EKS Pod Identity (the association names the service account)."""
    statement = {
        "Effect": "Allow",
        "Principal": {"Service": "pods.eks.amazonaws.com"},
        "Action": ["sts:AssumeRole", "sts:TagSession"],
    }
    return json.dumps({"Version": "2012-10-17", "Statement": [statement]}, sort_keys=True)


def bucket_access_policy(
    bucket_arn: str,
    *,
    write: bool,
    root_dir: str = "",
    kms_key_arn: str | None = None,
    index_write: bool = False,
    deny_index_write: bool = False,
    own_prefixes: Sequence[str] | None = None,
) -> str:
    """Least-privilege S3 policy on one bucket's history prefix: read-only for the server,
    read/write for writers; with SSE-KMS, the key operations those S3 calls need.

    Objects are reachable only under ``root_dir/`` (the whole bucket when empty), and
    listing is allowed only with an ``s3:prefix`` inside it. The server lists with
    ``Delimiter`` from the root itself, hence ``root_dir/`` as well as ``root_dir/*``.
    ``index_write`` (the server with ``shared_index="write"``) adds uploads to
    ``root_dir/history-index/*`` only: an object ARN with a key prefix scopes the actions to
    it (https://docs.aws.amazon.com/AmazonS3/latest/userguide/example-policies-s3.html).
    ``deny_index_write`` (the collectors' writer role) adds an explicit ``Deny`` of
    :data:`INDEX_DENY_ACTIONS` on ``root_dir/history-index/*``: an explicit deny overrides
    any allow (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_evaluation-logic.html),
    so a collector credential cannot plant, replace or delete a shared index.
    ``own_prefixes`` (a collector namespace's role: its own namespace's key prefixes and the
    storage check's probe prefix) narrows a writer to those keys for everything: it reads,
    writes and deletes only ``bucket/PREFIX*`` and lists only with an ``s3:prefix`` matching
    ``PREFIX*``, so one team's collector credential (which any job in its Ray pods holds)
    can neither read nor change another team's history.
    """
    root = root_dir.strip("/")
    base = f"{root}/" if root else ""
    if own_prefixes is not None and (
        not write or not own_prefixes or any(not p or not p.startswith(base) for p in own_prefixes)
    ):
        raise ValueError(f"own_prefixes={list(own_prefixes)!r}: a writer's key prefixes, one or more under {root!r}")
    list_statement: dict[str, Any] = {
        "Sid": "ListHistoryBucket",
        "Effect": "Allow",
        "Action": WRITER_BUCKET_ACTIONS if write else SERVER_BUCKET_ACTIONS,
        "Resource": bucket_arn,
    }
    objects: dict[str, Any] = {
        "Sid": "WriteHistoryObjects" if write else "ReadHistoryObjects",
        "Effect": "Allow",
        "Action": WRITER_OBJECT_ACTIONS if write else SERVER_OBJECT_ACTIONS,
        "Resource": f"{bucket_arn}/{root}/*" if root else f"{bucket_arn}/*",
    }
    if own_prefixes is not None:
        # "If the key ... is not present in the request context ... the condition is
        # false": a listing without a prefix (HeadBucket too) is denied.
        # Listing objects only: s3:prefix is no condition key of ListBucketMultipartUploads.
        list_statement["Action"] = SERVER_BUCKET_ACTIONS
        list_statement["Condition"] = {"StringLike": {"s3:prefix": [f"{prefix}*" for prefix in own_prefixes]}}
        objects.update(Sid="OwnNamespaceObjects", Resource=[f"{bucket_arn}/{prefix}*" for prefix in own_prefixes])
    elif root:
        list_statement["Condition"] = {"StringLike": {"s3:prefix": [f"{root}/", f"{root}/*"]}}
    statements: list[dict[str, Any]] = [list_statement, objects]
    if index_write:
        statements.append(
            {
                "Sid": "WriteSharedIndexes",
                "Effect": "Allow",
                "Action": INDEX_WRITE_ACTIONS,
                "Resource": f"{bucket_arn}/{index_prefix(root)}*",
            }
        )
    if deny_index_write:
        statements.append(
            {
                "Sid": "DenySharedIndexWrites",
                "Effect": "Deny",
                "Action": INDEX_DENY_ACTIONS,
                "Resource": f"{bucket_arn}/{index_prefix(root)}*",
            }
        )
    if kms_key_arn:
        # SSE-KMS: GetObject needs Decrypt; PutObject and multipart uploads need GenerateDataKey
        # (and Decrypt to complete a multipart upload).
        statements.append(
            {
                "Sid": "UseHistoryKey",
                "Effect": "Allow",
                "Action": ["kms:Decrypt", "kms:GenerateDataKey"] if write or index_write else ["kms:Decrypt"],
                "Resource": kms_key_arn,
            }
        )
    return json.dumps({"Version": "2012-10-17", "Statement": statements}, sort_keys=True)


def tls_only_bucket_policy(bucket_arn: str) -> str:
    """Bucket policy denying every request not made over TLS (``aws:SecureTransport``)."""
    statement = {
        "Sid": "DenyInsecureTransport",
        "Effect": "Deny",
        "Principal": "*",
        "Action": "s3:*",
        "Resource": [bucket_arn, f"{bucket_arn}/*"],
        "Condition": {"Bool": {"aws:SecureTransport": "false"}},
    }
    return json.dumps({"Version": "2012-10-17", "Statement": [statement]}, sort_keys=True)
