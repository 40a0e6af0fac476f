"""Whole-session retention on Kubernetes: a daily CronJob running ``ray-history gc``.

The bucket's age rule deletes objects one by one: a cluster that runs for months
loses its early logs while still running, and a finished session is left
half-deleted. ``ray-history gc`` deletes whole sessions, and only those that have
ended (docs/operations.md). It runs in the history server's namespace with the
server's image (``images/server/Dockerfile`` installs the ``ray-history`` script;
``gc`` needs only the ``[server]`` extra it has), as its own ServiceAccount:

* a *writer* of the storage component (writers may delete; the history server's
  identity stays read-only) that may also delete shared indexes (an index maintainer:
  on GCS and S3 every writer is one; on Azure the storage component gives it the
  index container too, and the job gets ``SHARED_INDEX_CONTAINER``), and
* bound to a ClusterRole allowing only ``list`` on ``rayclusters.ray.io``
  (``--live-check kubernetes``: a cluster whose RayCluster is gone has ended).

With retention on, the bucket's age rule is kept as a backstop at
:data:`BACKSTOP_FACTOR` times the retention period (:func:`backstop_days`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from ray_history_pulumi.contracts import IdentityWiring, StorageWiring
from ray_history_pulumi.history_server import container_env
from ray_history_pulumi.pod_security import restricted_container_security, restricted_pod_security
from runtime.cli.gc import MAX_AGE_DAYS  # what `ray-history gc --older-than` accepts

RETENTION_SERVICE_ACCOUNT = "ray-history-gc"
CRON_JOB_NAME = "ray-history-gc"
#: The bucket's age rule, with retention on: far enough beyond it that only sessions the
#: job cannot see (another root, a job failing for weeks) or that run this long reach it.
BACKSTOP_FACTOR = 3
#: Daily, at a quiet minute (UTC).
DEFAULT_SCHEDULE = "17 3 * * *"
#: Listing and deleting are I/O-bound; the memory holds one record per stored session
#: and one session's object list at a time.
DEFAULT_GC_RESOURCES: dict[str, dict[str, str]] = {
    "requests": {"cpu": "100m", "memory": "256Mi", "ephemeral-storage": "128Mi"},
    "limits": {"cpu": "1", "memory": "512Mi", "ephemeral-storage": "256Mi"},
}
#: A run that has not finished after this long is stopped; the next one carries on.
ACTIVE_DEADLINE_SECONDS = 6 * 3600
#: The five fields of ``spec.schedule`` and their ranges, as the API server checks them: it
#: parses the schedule with robfig/cron v3 ``ParseStandard``, whose bounds are minute 0-59,
#: hour 0-23, day of month 1-31, month 1-12 and day of week 0-6: 7 for Sunday is refused
#: ("end of range (7) above maximum (6)"; https://github.com/robfig/cron/blob/v3.0.1/spec.go,
#: https://kubernetes.io/docs/concepts/workloads/controllers/cron-jobs/#schedule-syntax).
CRON_FIELDS: tuple[tuple[str, int, int], ...] = (
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day of month", 1, 31),
    ("month", 1, 12),
    ("day of week", 0, 6),
)
_CRON_RANGE = re.compile(r"(?:(\*)|([0-9]+)(?:-([0-9]+))?)(?:/([0-9]+))?")
_K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


def check_cron_schedule(schedule: str) -> None:
    """Raise ValueError naming the field of ``schedule`` the API server would refuse.

    Five fields (:data:`CRON_FIELDS`), each a comma-separated list of ``*``, ``N`` or ``A-B``,
    each optionally ``/STEP`` (``N/STEP`` runs from N to the field's maximum), numbers in the
    field's range, ``A <= B`` and ``STEP >= 1``. Names (``mon``, ``jan``), ``?`` and macros
    (``@daily``), which the API server would take, are refused here too: a schedule in numbers
    says the same.
    """
    fields = schedule.split()
    if len(fields) != len(CRON_FIELDS):
        raise ValueError(
            f"schedule: {schedule!r} has {len(fields)} fields; a cron schedule has 5 "
            f"(minute hour day-of-month month day-of-week), like {DEFAULT_SCHEDULE!r}"
        )
    for text, (what, low, high) in zip(fields, CRON_FIELDS, strict=True):
        for item in text.split(","):
            problem = _cron_item_problem(item, low, high)
            if problem:
                raise ValueError(f"schedule: {schedule!r}: the {what} field {text!r}: {problem}")


def _cron_item_problem(item: str, low: int, high: int) -> str | None:
    """What is wrong with one list item of a cron field whose values run ``low``-``high``."""
    match = _CRON_RANGE.fullmatch(item)
    if not match:
        return f"{item!r} is not *, N or A-B (each optionally /STEP), numbers only"
    _, start, end, step = match.groups()
    for number in (start, end):
        if number is not None and not (len(number) <= 9 and low <= int(number) <= high):
            return f"{number} is outside {low}-{high}"
    if start is not None and end is not None and int(start) > int(end):
        return f"the range {start}-{end} runs backwards"
    if step is not None and (len(step) > 9 or int(step) < 1):
        return f"the step in {item!r} must be a whole number from 1"
    return None


def backstop_days(days: int) -> int:
    """The bucket age rule's days when whole-session retention keeps ``days``."""
    return days * BACKSTOP_FACTOR


@dataclass
class SessionRetentionArgs:
    """Arguments of :class:`SessionRetention`.

    Attributes:
        image: an image with the ``ray-history`` script (the history server's).
        wiring: the storage component's wiring; ``writers`` must hold
            ``namespace/account_name`` (give the storage component that account as a writer).
        days: delete sessions that ended more than this many days ago (1 to ``MAX_AGE_DAYS``, 36500).
        namespace: where the CronJob runs (the history server's; it must exist).
        account_name: the job's ServiceAccount.
        cluster_role_name: the ClusterRole listing RayClusters (cluster-scoped: one per stack).
        schedule: cron schedule, UTC.
        resources: requests and limits of the gc container.
        image_pull_policy: Kubernetes pull policy.
        image_ready: what must exist before nodes can pull ``image``.
        node_selector: the job pods' ``nodeSelector`` (as the server's); empty = none.
    """

    image: pulumi.Input[str]
    wiring: StorageWiring
    days: int
    namespace: str = "ray-history"
    account_name: str = RETENTION_SERVICE_ACCOUNT
    cluster_role_name: str = "ray-history-gc"
    schedule: str = DEFAULT_SCHEDULE
    resources: dict[str, dict[str, str]] = field(default_factory=lambda: DEFAULT_GC_RESOURCES)
    image_pull_policy: str = "IfNotPresent"
    image_ready: list[pulumi.Resource] = field(default_factory=list)
    node_selector: dict[str, str] = field(default_factory=dict)

    def validate(self) -> None:
        if isinstance(self.image, str) and not self.image.strip():
            raise ValueError("image: an image with the ray-history script is required")
        if isinstance(self.days, bool) or not isinstance(self.days, int) or self.days < 1:
            raise ValueError(f"days: must be a whole number of days, at least 1 (got {self.days!r})")
        if self.days > MAX_AGE_DAYS:
            raise ValueError(
                f"days: at most {MAX_AGE_DAYS} (100 years: what `ray-history gc --older-than` accepts), got {self.days}"
            )
        for what, value in (("namespace", self.namespace), ("account_name", self.account_name),
                            ("cluster_role_name", self.cluster_role_name)):  # fmt: skip
            if not _K8S_NAME.match(value):
                raise ValueError(f"{what}: {value!r} is not a valid Kubernetes name")
        check_cron_schedule(self.schedule)
        if self.wiring.backend not in ("gcs", "s3", "azureblob", "local"):
            raise ValueError(f"wiring.backend: {self.wiring.backend!r} is not gcs, s3, azureblob or local")
        if not self.wiring.secret_env and self.writer_key not in self.wiring.writers:
            raise ValueError(
                f"wiring.writers: no identity for {self.writer_key}; give the storage component this account "
                "as a writer (writers may delete, the history server may not)"
            )
        if (
            not self.wiring.secret_env
            and self.wiring.shared_index != "off"
            and self.writer_key not in self.wiring.index_maintainers
        ):
            raise ValueError(
                f"wiring.index_maintainers: {self.writer_key} may not delete shared indexes; give the storage "
                "component this account as an index maintainer (a session's indexes are deleted with it)"
            )
        for part in ("requests", "limits"):
            if not self.resources.get(part):
                raise ValueError(f"resources: '{part}' is required")

    def index_env(self) -> dict[str, pulumi.Input[str]]:
        """``SHARED_INDEX_CONTAINER`` where the shared indexes have a container of their own (Azure)."""
        container = self.wiring.index_container
        return {"SHARED_INDEX_CONTAINER": container} if container is not None else {}

    @property
    def writer_key(self) -> str:
        return f"{self.namespace}/{self.account_name}"

    def identity(self) -> IdentityWiring:
        return self.wiring.writers.get(self.writer_key, IdentityWiring())

    def gc_args(self) -> list[str]:
        """The ``ray-history`` command line; storage comes from the environment."""
        return ["gc", f"--older-than={self.days}d", "--live-check=kubernetes", "--json"]


class SessionRetention(pulumi.ComponentResource):
    """ServiceAccount ``ray-history-gc`` (a storage writer), a ClusterRole listing RayClusters
    and its binding, and a CronJob running ``ray-history gc`` daily in a hardened pod.

    Example::

        account = ServiceAccountRef("ray-history", RETENTION_SERVICE_ACCOUNT)
        storage = GcsHistoryStorage("history", GcsHistoryStorageArgs(..., writers=[*writers, account],
                                    retention_days=backstop_days(30)))
        SessionRetention("retention", SessionRetentionArgs(image=server_image, wiring=storage.wiring,
                         days=30, namespace="ray-history"), opts=pulumi.ResourceOptions(provider=k8s_provider))
    """

    cron_job: k8s.batch.v1.CronJob
    service_account_name: str

    def __init__(self, name: str, args: SessionRetentionArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("rayhistory:k8s:SessionRetention", name, None, opts)
        args.validate()
        ns, identity = args.namespace, args.identity()
        labels = {
            "app.kubernetes.io/name": "ray-history-gc",
            "app.kubernetes.io/component": "retention",
            "app.kubernetes.io/part-of": "ray-history",
        }
        child = pulumi.ResourceOptions(parent=self)
        account = k8s.core.v1.ServiceAccount(
            f"{name}-sa",
            metadata={
                "name": args.account_name,
                "namespace": ns,
                # Older Azure webhooks read the label on the account, newer ones on the pod.
                "labels": {**labels, **identity.pod_labels},
                "annotations": identity.service_account_annotations,
            },
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(identity.ready)),
        )
        role = k8s.rbac.v1.ClusterRole(
            f"{name}-lister",
            metadata={"name": args.cluster_role_name, "labels": labels},
            # Only list: liveness is "is the RayCluster still there", nothing else is read.
            rules=[{"api_groups": ["ray.io"], "resources": ["rayclusters"], "verbs": ["list"]}],
            opts=child,
        )
        binding = k8s.rbac.v1.ClusterRoleBinding(
            f"{name}-lister-binding",
            metadata={"name": f"{args.cluster_role_name}-{ns}-{args.account_name}", "labels": labels},
            role_ref={"api_group": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": args.cluster_role_name},
            subjects=[{"kind": "ServiceAccount", "name": args.account_name, "namespace": ns}],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[role, account]),
        )
        env = pulumi.Output.all(
            pulumi.Output.from_input(args.wiring.env),
            pulumi.Output.from_input(identity.env),
            pulumi.Output.all(**args.index_env()),
        ).apply(
            lambda parts: container_env(
                {**dict(parts[0] or {}), **dict(parts[2])}, dict(parts[1] or {}), args.wiring.secret_env
            )
        )
        self.cron_job = k8s.batch.v1.CronJob(
            f"{name}-cronjob",
            metadata={"name": CRON_JOB_NAME, "namespace": ns, "labels": labels},
            spec={
                "schedule": args.schedule,
                "time_zone": "Etc/UTC",
                "concurrency_policy": "Forbid",  # two runs would race to delete the same sessions
                "starting_deadline_seconds": 3600,
                "successful_jobs_history_limit": 3,
                "failed_jobs_history_limit": 3,
                "job_template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "backoff_limit": 2,
                        "active_deadline_seconds": ACTIVE_DEADLINE_SECONDS,
                        "template": {
                            "metadata": {"labels": {**labels, **identity.pod_labels}},
                            "spec": _pod_spec(args, env),
                        },
                    },
                },
            },
            # The pod's credentials work only once the cloud side of its identity exists.
            opts=pulumi.ResourceOptions(parent=self, depends_on=[account, binding, *identity.ready, *args.image_ready]),
        )
        self.service_account_name = args.account_name
        self.register_outputs({"cronJob": CRON_JOB_NAME, "serviceAccount": args.account_name, "days": args.days})


def _pod_spec(args: SessionRetentionArgs, env: pulumi.Output[list[dict[str, Any]]]) -> dict[str, Any]:
    """Non-root, read-only root filesystem, no capabilities: the "restricted" Pod Security Standard."""
    return {
        "service_account_name": args.account_name,
        "automount_service_account_token": True,  # --live-check kubernetes lists RayClusters
        "restart_policy": "Never",  # the Job's backoff_limit retries, in a fresh pod
        "security_context": restricted_pod_security(),
        **({"node_selector": dict(args.node_selector)} if args.node_selector else {}),
        "containers": [
            {
                "name": "gc",
                "image": args.image,
                "image_pull_policy": args.image_pull_policy,
                # The image's entrypoint is the history server.
                "command": ["ray-history"],
                "args": args.gc_args(),
                "env": env,
                "resources": args.resources,
                "security_context": restricted_container_security(),
                "volume_mounts": [{"name": "tmp", "mount_path": "/tmp"}],  # noqa: S108 - an emptyDir
            }
        ],
        "volumes": [{"name": "tmp", "empty_dir": {"size_limit": "64Mi"}}],
    }
