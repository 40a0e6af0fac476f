"""S3 bucket for Ray history + IAM roles for the collector writers and the history server (EKS).

The bucket enforces bucket-owner object ownership (ACLs off), blocks every kind of public
access, encrypts at rest (SSE-S3, or SSE-KMS with a given key) and optionally expires old
history. IAM roles with least-privilege inline policies: a role per collector namespace
(reads, lists, writes, deletes and multipart uploads only under its own namespace's keys and
the storage check's probe prefix, with an explicit ``Deny`` of writes and deletes on
``ROOT/history-index/*`` besides), index maintainers (the retention job, which deletes
sessions with their shared indexes: a role of its own, writing anywhere under the root) and
the server (``s3:GetObject`` + ``s3:ListBucket``; with ``shared_index="write"`` also
``s3:PutObject`` and the multipart calls on ``ROOT/history-index/*`` only). Roles are assumed
either through IRSA (OIDC web identity) or EKS Pod Identity (one ``PodIdentityAssociation`` per
service account).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import pulumi
import pulumi_aws as aws

from ray_history_pulumi.aws_names import IAM_POLICY_NAME_MAX, IAM_ROLE_NAME_MAX, name_args
from ray_history_pulumi.aws_policies import (
    INDEX_DENY_ACTIONS,
    INDEX_WRITE_ACTIONS,
    SERVER_BUCKET_ACTIONS,
    SERVER_OBJECT_ACTIONS,
    WRITER_BUCKET_ACTIONS,
    WRITER_OBJECT_ACTIONS,
    bucket_access_policy,
    irsa_trust_policy,
    pod_identity_trust_policy,
    tls_only_bucket_policy,
)
from ray_history_pulumi.contracts import (
    SERVER_SERVICE_ACCOUNT,
    IdentityWiring,
    ServiceAccountRef,
    StorageWiring,
)
from ray_history_pulumi.retention import RETENTION_SERVICE_ACCOUNT
from ray_history_pulumi.storage_common import (
    account_resource_name,
    collector_prefixes,
    former_account_aliases,
    resolve_index_maintainers,
    storage_env,
    validate_common,
    validate_shared_index,
    writer_key,
)

# The policy documents live in aws_policies; importable from here as before.
__all__ = [
    "INDEX_DENY_ACTIONS",
    "INDEX_WRITE_ACTIONS",
    "IRSA_ANNOTATION",
    "SERVER_BUCKET_ACTIONS",
    "SERVER_OBJECT_ACTIONS",
    "WRITER_BUCKET_ACTIONS",
    "WRITER_OBJECT_ACTIONS",
    "IdentityMode",
    "S3HistoryStorage",
    "S3HistoryStorageArgs",
    "bucket_access_policy",
    "irsa_trust_policy",
    "pod_identity_trust_policy",
    "tls_only_bucket_policy",
]

IdentityMode = Literal["irsa", "pod-identity"]
IRSA_ANNOTATION = "eks.amazonaws.com/role-arn"
_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
#: The longest end of a role's logical name a shortened IAM name keeps (beside the hash).
_KEEP_MAX = 20


@dataclass
class S3HistoryStorageArgs:
    """Settings of :class:`S3HistoryStorage`.

    Attributes:
        identity_mode: ``irsa`` (needs ``oidc_provider_arn`` + ``oidc_issuer_url``) or
            ``pod-identity`` (needs ``cluster_name``; the cluster needs the
            ``eks-pod-identity-agent`` add-on).
        writers: service accounts of Ray pods whose collector sidecar writes history, and the
            index maintainers. The collectors of one namespace share a role, which writes and
            deletes only that namespace's keys (never under ``ROOT/history-index/``).
        server: the history server's service account (read-only).
        index_maintainers: writers that delete sessions together with their shared indexes
            (the retention job's account): a role of their own, writes and deletes anywhere
            under the root. None (default): the writer ``SERVER_NAMESPACE/ray-history-gc``, if listed.
        oidc_provider_arn: IAM OIDC provider of the cluster (IRSA).
        oidc_issuer_url: the cluster's OIDC issuer URL, with or without ``https://`` (IRSA).
        cluster_name: EKS cluster name (Pod Identity).
        bucket_name: explicit, globally unique bucket name; None auto-names from ``bucket_prefix``.
        bucket_prefix: prefix for the auto-generated name.
        retention_days: expire objects older than this many days; None keeps them forever.
            Object by object, a running session's too: with whole-session retention
            (:mod:`ray_history_pulumi.retention`) use it as a backstop, ``backstop_days(days)``.
        root_dir: key prefix inside the bucket (``STORAGE_ROOT_DIR``); "" = bucket root.
        kms_key_arn: encrypt with this KMS key (SSE-KMS) instead of SSE-S3 (AES256).
        force_destroy: let ``pulumi destroy`` delete a non-empty bucket.
        tags: tags on every AWS resource.
        shared_index: ``off``, ``read`` (default) or ``write``: ``write`` adds uploads under
            ``ROOT/history-index/`` to the server's policy; the other two leave it read-only.
    """

    identity_mode: IdentityMode
    writers: Sequence[ServiceAccountRef] = ()
    server: ServiceAccountRef = field(default_factory=lambda: ServiceAccountRef("ray-system", SERVER_SERVICE_ACCOUNT))
    oidc_provider_arn: pulumi.Input[str] | None = None
    oidc_issuer_url: pulumi.Input[str] | None = None
    cluster_name: pulumi.Input[str] | None = None
    bucket_name: str | None = None
    bucket_prefix: str = "ray-history-"
    retention_days: int | None = None
    root_dir: str = ""
    kms_key_arn: pulumi.Input[str] | None = None
    force_destroy: bool = False
    tags: dict[str, str] = field(default_factory=dict)
    shared_index: str = "read"
    index_maintainers: Sequence[ServiceAccountRef] | None = None

    def __post_init__(self) -> None:
        if self.identity_mode not in ("irsa", "pod-identity"):
            raise ValueError(
                f"S3HistoryStorageArgs.identity_mode={self.identity_mode!r}: must be 'irsa' or 'pod-identity'"
            )
        if self.identity_mode == "irsa" and (self.oidc_provider_arn is None or self.oidc_issuer_url is None):
            raise ValueError("S3HistoryStorageArgs.oidc_provider_arn and .oidc_issuer_url are required for irsa")
        if self.identity_mode == "pod-identity" and self.cluster_name is None:
            raise ValueError("S3HistoryStorageArgs.cluster_name is required for pod-identity")
        if self.bucket_name is not None and not _BUCKET_NAME.match(self.bucket_name):
            raise ValueError(
                f"S3HistoryStorageArgs.bucket_name={self.bucket_name!r}: 3-63 lowercase letters, digits, '-', '.'"
            )
        validate_common("S3HistoryStorageArgs", self.writers, self.server, self.retention_days)
        validate_shared_index("S3HistoryStorageArgs.shared_index", self.shared_index)
        self.maintainers()

    def maintainers(self) -> list[ServiceAccountRef]:
        """The writers with the maintainer role (see ``index_maintainers``)."""
        gc_account = ServiceAccountRef(self.server.namespace, RETENTION_SERVICE_ACCOUNT)
        what = "S3HistoryStorageArgs.index_maintainers"
        return resolve_index_maintainers(what, self.writers, self.index_maintainers, gc_account)

    def collectors(self) -> list[ServiceAccountRef]:
        """The writers that are not index maintainers."""
        maintainers = self.maintainers()
        return [sa for sa in self.writers if sa not in maintainers]


class S3HistoryStorage(pulumi.ComponentResource):
    """An S3 bucket for Ray history plus IAM roles (IRSA or EKS Pod Identity) for writers and the server.

    Example::

        aws_provider = aws.Provider("aws", region="us-west-2")
        on_aws = pulumi.ResourceOptions(providers=[aws_provider])
        cluster = EksCluster("eks", EksClusterArgs(subnet_ids=["subnet-1", "subnet-2"]), opts=on_aws)
        storage = S3HistoryStorage(
            "history",
            S3HistoryStorageArgs(
                identity_mode="irsa",
                oidc_provider_arn=cluster.oidc_provider_arn,
                oidc_issuer_url=cluster.oidc_issuer_url,
                writers=[ServiceAccountRef("ray", "ray-collector")],
                retention_days=30,
            ),
            opts=on_aws,
        )
        storage.wiring.server.service_account_annotations  # {"eks.amazonaws.com/role-arn": ...}

    Attributes:
        bucket: the ``aws.s3.Bucket``; ``bucket_name`` its name.
        writer_roles: the collectors' ``aws.iam.Role`` by namespace: each reads, lists, writes
            and deletes only its own namespace's keys (and the storage check's probes).
        maintainer_role / server_role: the index maintainers' (None without such writers) and
            the server's ``aws.iam.Role``.
        wiring: what the Kubernetes components need (:class:`StorageWiring`).
    """

    def __init__(self, name: str, args: S3HistoryStorageArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("rayhistory:aws:HistoryStorage", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = args.tags or None

        self.bucket = aws.s3.Bucket(
            f"{name}-bucket",
            bucket=args.bucket_name,
            bucket_prefix=None if args.bucket_name else args.bucket_prefix,
            force_destroy=args.force_destroy,
            tags=tags,
            opts=child,
        )
        self.bucket_name: pulumi.Output[str] = self.bucket.bucket
        bucket_settings = self._harden_bucket(name, args, child)

        # Per account (``server`` or ``namespace/name``): what its credentials need to exist.
        self.ready: dict[str, list[pulumi.Resource]] = {}
        self.server_role = self._role(name, "server", [args.server], args, write=False)
        collectors, maintainers = args.collectors(), args.maintainers()
        # A role per collector namespace, writing under that namespace's keys only: one
        # team's credential (any job in its Ray pods holds it) cannot change another's history.
        by_namespace: dict[str, list[ServiceAccountRef]] = {}
        for sa in collectors:
            by_namespace.setdefault(sa.namespace, []).append(sa)
        self.writer_roles = {
            namespace: self._role(name, "writer", accounts, args, write=True, namespace=namespace)
            for namespace, accounts in by_namespace.items()
        }
        self.maintainer_role = self._role(name, "maintainer", maintainers, args, write=True) if maintainers else None
        role_of = {writer_key(sa): self.writer_roles[sa.namespace] for sa in collectors}
        role_of.update({writer_key(sa): self.maintainer_role for sa in maintainers})

        env = storage_env(
            {"STORAGE_BACKEND": "s3", "S3_BUCKET": self.bucket.bucket, "S3_REGION": self.bucket.region},
            args.root_dir,
        )
        self.wiring = StorageWiring(
            backend="s3",
            bucket=self.bucket.bucket,
            # Consumers must not start before the bucket refuses public access and encrypts.
            env=pulumi.Output.all(env, *bucket_settings).apply(lambda parts: parts[0]),
            server=self._identity(self.server_role, args, self.ready["server"]),
            writers={key: self._identity(role, args, self.ready[key]) for key, role in role_of.items()},
            shared_index=args.shared_index,
            # Only their role may write or delete shared indexes; the collectors' denies it.
            index_maintainers=[writer_key(sa) for sa in maintainers],
        )
        self.register_outputs(
            {
                "bucket_name": self.bucket.bucket,
                "server_role_arn": self.server_role.arn,
                "writer_role_arns": {namespace: role.arn for namespace, role in self.writer_roles.items()},
                "maintainer_role_arn": self.maintainer_role.arn if self.maintainer_role else None,
            }
        )

    def _harden_bucket(self, name: str, args: S3HistoryStorageArgs, child: pulumi.ResourceOptions) -> list[Any]:
        """Ownership, public access block, encryption, lifecycle and the TLS-only policy, one
        after the other; returns outputs to wait on.

        S3 answers ``OperationAborted`` ("A conflicting conditional operation is currently in
        progress against this resource") to concurrent configuration writes on one bucket,
        so each setting waits for the previous one.
        """

        def after(previous: pulumi.Resource) -> pulumi.ResourceOptions:
            return pulumi.ResourceOptions(parent=self, depends_on=[previous])

        ownership = aws.s3.BucketOwnershipControls(
            f"{name}-ownership",
            bucket=self.bucket.id,
            rule={"object_ownership": "BucketOwnerEnforced"},
            opts=child,
        )
        public_block = aws.s3.BucketPublicAccessBlock(
            f"{name}-public-access",
            bucket=self.bucket.id,
            block_public_acls=True,
            block_public_policy=True,
            ignore_public_acls=True,
            restrict_public_buckets=True,
            opts=after(ownership),
        )
        s3 = aws.s3
        default_encryption = (
            s3.BucketServerSideEncryptionConfigurationRuleApplyServerSideEncryptionByDefaultArgs(
                sse_algorithm="aws:kms", kms_master_key_id=args.kms_key_arn
            )
            if args.kms_key_arn is not None
            else s3.BucketServerSideEncryptionConfigurationRuleApplyServerSideEncryptionByDefaultArgs(
                sse_algorithm="AES256"
            )
        )
        encryption = s3.BucketServerSideEncryptionConfiguration(
            f"{name}-encryption",
            bucket=self.bucket.id,
            rules=[
                s3.BucketServerSideEncryptionConfigurationRuleArgs(
                    apply_server_side_encryption_by_default=default_encryption,
                    bucket_key_enabled=args.kms_key_arn is not None,
                )
            ],
            opts=after(public_block),
        )
        # Multipart uploads abandoned by a killed collector cost storage until aborted.
        rules = [
            s3.BucketLifecycleConfigurationRuleArgs(
                id="abort-incomplete-uploads",
                status="Enabled",
                filter=s3.BucketLifecycleConfigurationRuleFilterArgs(prefix=""),
                abort_incomplete_multipart_upload=s3.BucketLifecycleConfigurationRuleAbortIncompleteMultipartUploadArgs(
                    days_after_initiation=2
                ),
            )
        ]
        if args.retention_days is not None:
            root = args.root_dir.strip("/")
            rules.append(
                s3.BucketLifecycleConfigurationRuleArgs(
                    id="expire-history",
                    status="Enabled",
                    filter=s3.BucketLifecycleConfigurationRuleFilterArgs(prefix=f"{root}/" if root else ""),
                    expiration=s3.BucketLifecycleConfigurationRuleExpirationArgs(days=args.retention_days),
                )
            )
        lifecycle = s3.BucketLifecycleConfiguration(
            f"{name}-lifecycle", bucket=self.bucket.id, rules=rules, opts=after(encryption)
        )
        tls_only = s3.BucketPolicy(
            f"{name}-tls-only",
            bucket=self.bucket.id,
            policy=self.bucket.arn.apply(tls_only_bucket_policy),
            opts=after(lifecycle),
        )
        return [ownership.id, public_block.id, encryption.id, lifecycle.id, tls_only.id]

    def _role(
        self,
        name: str,
        kind: str,
        accounts: Sequence[ServiceAccountRef],
        args: S3HistoryStorageArgs,
        *,
        write: bool,
        namespace: str | None = None,
    ) -> aws.iam.Role:
        """``namespace``: a collector namespace's role, writing under its keys only."""
        child = pulumi.ResourceOptions(parent=self)
        role_name = f"{name}-{kind}-{namespace}" if namespace else f"{name}-{kind}"
        # A shortened name keeps its namespace readable when that fits beside the hash.
        keep = role_name.removeprefix(name) if len(role_name) - len(name) <= _KEEP_MAX else ""
        own_prefixes = None
        description = f"Ray history {kind}: {'read/write' if write else 'read-only'} access to one S3 bucket"
        if namespace:
            own_prefixes = collector_prefixes(args.root_dir, namespace)
            description = f"Ray history {kind} for namespace {namespace}: reads and writes its keys in one S3 bucket"
        if args.identity_mode == "irsa":
            trust: pulumi.Input[str] = pulumi.Output.all(args.oidc_provider_arn, args.oidc_issuer_url).apply(
                lambda a: irsa_trust_policy(str(a[0]), str(a[1]), accounts)
            )
        else:
            trust = pod_identity_trust_policy()
        role = aws.iam.Role(
            role_name,
            **name_args(role_name, IAM_ROLE_NAME_MAX, keep=keep),
            assume_role_policy=trust,
            description=description,
            tags=args.tags or None,
            opts=child,
        )
        policy = aws.iam.RolePolicy(
            f"{role_name}-s3",
            **name_args(f"{role_name}-s3", IAM_POLICY_NAME_MAX, keep=f"{keep}-s3"),
            role=role.id,
            policy=pulumi.Output.all(self.bucket.arn, args.kms_key_arn).apply(
                lambda a: bucket_access_policy(
                    a[0],
                    write=write,
                    root_dir=args.root_dir,
                    kms_key_arn=a[1],
                    index_write=not write and args.shared_index == "write",
                    deny_index_write=kind == "writer",
                    own_prefixes=own_prefixes,
                )
            ),
            opts=child,
        )
        self.ready.update({writer_key(sa) if write else "server": [policy] for sa in accounts})
        if args.identity_mode == "pod-identity":
            # Every collector had the one writer role before roles were per namespace.
            all_accounts = args.collectors() if kind == "writer" else accounts
            for sa in accounts:
                self.ready[writer_key(sa) if write else "server"].append(
                    aws.eks.PodIdentityAssociation(
                        account_resource_name(f"{name}-{kind}", sa),
                        cluster_name=args.cluster_name,
                        namespace=sa.namespace,
                        service_account=sa.name,
                        role_arn=role.arn,
                        tags=args.tags or None,
                        opts=pulumi.ResourceOptions.merge(
                            child,
                            pulumi.ResourceOptions(aliases=former_account_aliases(f"{name}-{kind}", sa, all_accounts)),
                        ),
                    )
                )
        return role

    @staticmethod
    def _identity(
        role: aws.iam.Role | None, args: S3HistoryStorageArgs, ready: list[pulumi.Resource]
    ) -> IdentityWiring:
        if role is None or args.identity_mode == "pod-identity":
            # The association names the service account: nothing on the pod, but the EKS
            # webhook injects credentials only into pods admitted after it exists.
            return IdentityWiring(ready=ready)
        annotations = role.arn.apply(lambda arn: {IRSA_ANNOTATION: arn})
        return IdentityWiring(service_account_annotations=annotations, ready=ready)
