"""GCS bucket for Ray history + Workload Identity Federation grants (GKE).

The bucket has uniform bucket-level access and enforced public access prevention. Each
Kubernetes service account gets direct ``principal://`` grants on the bucket (no Google service
account, no annotation). A collector (a writer) reads and writes with
``roles/storage.objectUser`` under an IAM condition naming its own namespace's keys only
(``ROOT/cluster-history/KIND/NS/`` and ``ROOT/cluster-metadata/KIND/NS_``): never another
namespace's sessions or logs, never the shared indexes under ``ROOT/history-index/``. It lists
with ``roles/storage.objectViewer`` under a condition naming the bucket itself, which object
listings are checked against: it sees object names, never another namespace's contents (IAM
conditions cannot limit a listing to a prefix; only Credential Access Boundaries can). An index
maintainer (the retention job, which deletes whole sessions and their indexes) gets
``roles/storage.objectUser`` unconditionally. The history server gets
``roles/storage.objectViewer``; with ``shared_index="write"`` also ``roles/storage.objectUser``
under an IAM condition on the object name: only keys under ``ROOT/history-index/`` (creating and
overwriting an object needs ``storage.objects.create`` and ``.delete``, both in that role).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial

import pulumi
import pulumi_gcp as gcp

from ray_history_pulumi.contracts import (
    SERVER_SERVICE_ACCOUNT,
    IdentityWiring,
    ServiceAccountRef,
    StorageWiring,
)
from ray_history_pulumi.gcp_services import lookup_options
from ray_history_pulumi.retention import RETENTION_SERVICE_ACCOUNT
from ray_history_pulumi.storage_common import (
    account_resource_name,
    collector_prefixes,
    former_account_aliases,
    index_prefix,
    resolve_index_maintainers,
    storage_env,
    validate_common,
    validate_shared_index,
    writer_key,
)

#: A writer's role: unconditional for index maintainers, limited to its namespace for collectors.
WRITER_ROLE = "roles/storage.objectUser"
#: A collector's second role, conditioned on the bucket itself: object listings (names) only.
WRITER_LIST_ROLE = "roles/storage.objectViewer"
WRITER_CONDITION_TITLE = "own-namespace-only"
WRITER_LIST_CONDITION_TITLE = "list-names-only"
SERVER_ROLE = "roles/storage.objectViewer"
#: The server's role on the shared-index prefix with ``shared_index="write"`` (conditional).
INDEX_WRITER_ROLE = "roles/storage.objectUser"
INDEX_CONDITION_TITLE = "shared-index-only"
_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$")


def workload_identity_principal(project_number: str, project_id: str, account: ServiceAccountRef) -> str:
    """The IAM member naming one Kubernetes service account through GKE Workload Identity Federation."""
    return (
        f"principal://iam.googleapis.com/projects/{project_number}/locations/global/workloadIdentityPools/"
        f"{project_id}.svc.id.goog/subject/ns/{account.namespace}/sa/{account.name}"
    )


def index_write_condition(bucket: str, root_dir: str) -> str:
    """The IAM condition expression limiting a bucket grant to the shared-index objects.

    Cloud Storage names an object ``projects/_/buckets/BUCKET/objects/KEY`` in conditions
    (https://cloud.google.com/iam/docs/conditions-attribute-reference#resource-name); the
    bucket itself (listing) never matches, so listing stays with the unconditional reader role.
    """
    return f'resource.name.startsWith("projects/_/buckets/{bucket}/objects/{index_prefix(root_dir)}")'


def bucket_only_condition(bucket: str) -> str:
    """The IAM condition expression true only for requests on the bucket itself.

    Listing objects is a method on the bucket, so its ``resource.name`` is
    ``projects/_/buckets/BUCKET`` (https://cloud.google.com/iam/docs/downscoping-short-lived-credentials,
    https://cloud.google.com/iam/docs/conditions-attribute-reference#resource-name), while
    reading an object is checked against ``projects/_/buckets/BUCKET/objects/KEY``: on
    ``roles/storage.objectViewer`` it grants listings of object names and no object's contents.
    The listing's prefix (``storage.googleapis.com/objectListPrefix``) is documented for
    Credential Access Boundaries only, not for role bindings, so names stay listable bucket-wide.
    """
    return f'resource.name == "projects/_/buckets/{bucket}"'


def namespace_write_condition(bucket: str, root_dir: str, namespace: str) -> str:
    """The IAM condition expression limiting a collector's grant to its namespace's keys.

    True only for objects named by :func:`~ray_history_pulumi.storage_common.namespace_prefixes`
    and the ``python -m runtime.storage check`` probes (``ROOT/_selfcheck/``, which nothing
    serves) (``projects/_/buckets/BUCKET/objects/KEY`` in conditions:
    https://cloud.google.com/iam/docs/conditions-attribute-reference#resource-name); false for
    every other namespace's keys, for ``ROOT/history-index/`` and for the bucket itself, so
    listing comes from the collector's bucket-only ``roles/storage.objectViewer``
    (:func:`bucket_only_condition`).
    """
    objects = f"projects/_/buckets/{bucket}/objects/"
    prefixes = collector_prefixes(root_dir, namespace)
    return " || ".join(f'resource.name.startsWith("{objects}{prefix}")' for prefix in prefixes)


def _principal_for(project_number: str, *, project_id: str, account: ServiceAccountRef) -> str:
    return workload_identity_principal(project_number, project_id, account)


@dataclass
class GcsHistoryStorageArgs:
    """Settings of :class:`GcsHistoryStorage`.

    Attributes:
        project: Google Cloud project id that owns the bucket and the GKE workload pool.
        location: bucket location (``US``, ``EU``, ``us-central1`` ...).
        writers: service accounts of Ray pods whose collector sidecar writes history (their
            own namespace's keys only), and the index maintainers.
        server: the history server's service account (read-only).
        index_maintainers: writers that delete every namespace's sessions and the shared
            indexes (the retention job's account): ``roles/storage.objectUser`` on the whole
            bucket. None (default): the writer ``SERVER_NAMESPACE/ray-history-gc``, if listed.
        bucket_name: explicit, globally unique bucket name; None lets Pulumi auto-name it.
        retention_days: delete objects older than this many days; None keeps them forever.
            Object by object, a running session's too: with whole-session retention
            (:mod:`ray_history_pulumi.retention`) use it as a backstop, ``backstop_days(days)``.
        root_dir: key prefix inside the bucket (``STORAGE_ROOT_DIR``); "" = bucket root.
        project_number: the project's number if already known (e.g. ``GkeCluster.project_number``);
            None looks it up with ``gcp.organizations.get_project`` (a Cloud Resource Manager
            call, made after the component's ``depends_on``: pass the enabled APIs there).
        force_destroy: let ``pulumi destroy`` delete a non-empty bucket.
        labels: labels on the bucket.
        workload_pool_ready: the resources that create the ``PROJECT.svc.id.goog`` identity
            pool (a created GKE cluster and its node pool). IAM rejects a ``principal://``
            grant naming a pool that does not exist yet, so the grants wait for them.
        shared_index: ``off``, ``read`` (default) or ``write``: ``write`` lets the server
            create and overwrite objects under ``ROOT/history-index/`` only (an IAM condition);
            the other two grant it nothing beyond ``roles/storage.objectViewer``.
    """

    project: str
    location: str
    writers: Sequence[ServiceAccountRef] = ()
    server: ServiceAccountRef = field(default_factory=lambda: ServiceAccountRef("ray-system", SERVER_SERVICE_ACCOUNT))
    bucket_name: str | None = None
    retention_days: int | None = None
    root_dir: str = ""
    project_number: pulumi.Input[str] | None = None
    force_destroy: bool = False
    labels: dict[str, str] = field(default_factory=dict)
    workload_pool_ready: Sequence[pulumi.Resource] = ()
    shared_index: str = "read"
    index_maintainers: Sequence[ServiceAccountRef] | None = None

    def __post_init__(self) -> None:
        if not self.project:
            raise ValueError("GcsHistoryStorageArgs.project: a Google Cloud project id is required")
        if not self.location:
            raise ValueError("GcsHistoryStorageArgs.location: a bucket location is required (e.g. US)")
        if self.bucket_name is not None and not _BUCKET_NAME.match(self.bucket_name):
            raise ValueError(
                f"GcsHistoryStorageArgs.bucket_name={self.bucket_name!r}: 3-63 lowercase letters, digits, '-', '_', '.'"
            )
        validate_common("GcsHistoryStorageArgs", self.writers, self.server, self.retention_days)
        validate_shared_index("GcsHistoryStorageArgs.shared_index", self.shared_index)
        self.maintainers()

    def maintainers(self) -> list[ServiceAccountRef]:
        """The writers with the unconditional write grant (see ``index_maintainers``)."""
        gc_account = ServiceAccountRef(self.server.namespace, RETENTION_SERVICE_ACCOUNT)
        what = "GcsHistoryStorageArgs.index_maintainers"
        return resolve_index_maintainers(what, self.writers, self.index_maintainers, gc_account)


class GcsHistoryStorage(pulumi.ComponentResource):
    """A GCS bucket for Ray history plus Workload Identity grants for the writers and the server.

    Example::

        gcp_provider = gcp.Provider("gcp", project="my-proj", region="us-central1")
        storage = GcsHistoryStorage(
            "history",
            GcsHistoryStorageArgs(
                project="my-proj",
                location="US",
                writers=[ServiceAccountRef("ray", "ray-collector")],
                server=ServiceAccountRef("ray-system", "ray-history-server"),
                retention_days=30,
            ),
            opts=pulumi.ResourceOptions(providers=[gcp_provider]),
        )
        storage.wiring.env  # {"STORAGE_BACKEND": "gcs", "GCS_BUCKET": ..., ...}

    Attributes:
        bucket: the ``gcp.storage.Bucket``.
        bucket_name: its name.
        members: IAM member string per service account (``namespace/name``).
        wiring: what the Kubernetes components need (:class:`StorageWiring`).
    """

    def __init__(self, name: str, args: GcsHistoryStorageArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("rayhistory:gcp:HistoryStorage", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)

        lifecycle_rules: list[gcp.storage.BucketLifecycleRuleArgs] = []
        if args.retention_days is not None:
            lifecycle_rules.append(
                gcp.storage.BucketLifecycleRuleArgs(
                    action=gcp.storage.BucketLifecycleRuleActionArgs(type="Delete"),
                    condition=gcp.storage.BucketLifecycleRuleConditionArgs(age=args.retention_days),
                )
            )
        self.bucket = gcp.storage.Bucket(
            f"{name}-bucket",
            name=args.bucket_name,
            project=args.project,
            location=args.location,
            uniform_bucket_level_access=True,
            public_access_prevention="enforced",
            force_destroy=args.force_destroy,
            lifecycle_rules=lifecycle_rules,
            labels=args.labels or None,
            opts=child,
        )
        self.bucket_name: pulumi.Output[str] = self.bucket.name

        if args.project_number is not None:
            project_number: pulumi.Output[str] = pulumi.Output.from_input(args.project_number)
        else:
            # projects.get is Cloud Resource Manager: the lookup waits for what the component
            # waits for (the stack's enabled APIs), which an invoke does not do by itself.
            project = gcp.organizations.get_project_output(project_id=args.project, opts=lookup_options(self, opts))
            project_number = project.number

        self.members: dict[str, pulumi.Output[str]] = {}
        self.grants: dict[str, gcp.storage.BucketIAMMember] = {}
        ready: dict[str, list[pulumi.Resource]] = {}
        maintainer_keys = {writer_key(sa) for sa in args.maintainers()}
        after_pool = pulumi.ResourceOptions(parent=self, depends_on=list(args.workload_pool_ready))

        def grant(
            kind: str,
            account: ServiceAccountRef,
            role: str,
            condition: gcp.storage.BucketIAMMemberConditionArgs | None = None,
        ) -> None:
            member = project_number.apply(partial(_principal_for, project_id=args.project, account=account))
            key = "server" if kind == "server" else writer_key(account)
            accounts = [args.server] if kind == "server" else args.writers
            binding = gcp.storage.BucketIAMMember(
                account_resource_name(f"{name}-{kind}", account),
                bucket=self.bucket.name,
                role=role,
                member=member,
                condition=condition,
                opts=pulumi.ResourceOptions.merge(
                    after_pool,
                    pulumi.ResourceOptions(aliases=former_account_aliases(f"{name}-{kind}", account, accounts)),
                ),
            )
            ready.setdefault(key, []).append(binding)
            if key not in self.grants:
                # The grant's own output, so readers of ``members`` wait until the grant exists.
                self.members[key] = binding.member
                self.grants[key] = binding

        for sa in args.writers:
            if writer_key(sa) in maintainer_keys:
                # Deletes whole sessions of every namespace and their shared indexes.
                grant("writer", sa, WRITER_ROLE)
                continue
            condition = gcp.storage.BucketIAMMemberConditionArgs(
                title=WRITER_CONDITION_TITLE,
                description=f"Ray history collector: read and write namespace {sa.namespace}'s history only",
                expression=self.bucket.name.apply(
                    partial(namespace_write_condition, root_dir=args.root_dir, namespace=sa.namespace)
                ),
            )
            grant("writer", sa, WRITER_ROLE, condition)
            names_only = gcp.storage.BucketIAMMemberConditionArgs(
                title=WRITER_LIST_CONDITION_TITLE,
                description="Ray history collector: list object names, read no object",
                expression=self.bucket.name.apply(bucket_only_condition),
            )
            grant("reader", sa, WRITER_LIST_ROLE, names_only)
        grant("server", args.server, SERVER_ROLE)
        server_ready: list[pulumi.Resource] = [self.grants["server"]]
        if args.shared_index == "write":
            # A second binding: the reader role stays unconditional for everything else.
            index_grant = gcp.storage.BucketIAMMember(
                f"{name}-server-index-writer",
                bucket=self.bucket.name,
                role=INDEX_WRITER_ROLE,
                member=self.grants["server"].member,
                condition=gcp.storage.BucketIAMMemberConditionArgs(
                    title=INDEX_CONDITION_TITLE,
                    description="Ray history server: write shared indexes only",
                    expression=self.bucket.name.apply(lambda bucket: index_write_condition(bucket, args.root_dir)),
                ),
                opts=after_pool,
            )
            server_ready.append(index_grant)

        env = storage_env(
            {"STORAGE_BACKEND": "gcs", "GCS_BUCKET": self.bucket.name, "GOOGLE_CLOUD_PROJECT": args.project},
            args.root_dir,
        )
        # Direct Workload Identity Federation: no annotation, no pod label.
        self.wiring = StorageWiring(
            backend="gcs",
            bucket=self.bucket.name,
            env=env,
            server=IdentityWiring(ready=server_ready),
            writers={writer_key(sa): IdentityWiring(ready=ready[writer_key(sa)]) for sa in args.writers},
            shared_index=args.shared_index,
            # Only they hold objectUser outside their namespace: the collectors never reach indexes.
            index_maintainers=[writer_key(sa) for sa in args.maintainers()],
        )
        self.register_outputs({"bucket_name": self.bucket.name, "members": self.members, "env": env})
