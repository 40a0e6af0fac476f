"""ray_history_pulumi/retention.py under Pulumi mocks (every object schema-validated), and the
program with ``retention.days``: the job's account is a storage writer, the server's is not,
and the bucket's age rule becomes a backstop at 3x."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pulumi
import pytest

from infra.policy.rules import RULES
from infra.program import deploy
from ray_history_pulumi.contracts import IdentityWiring, StorageWiring
from ray_history_pulumi.retention import (
    BACKSTOP_FACTOR,
    RETENTION_SERVICE_ACCOUNT,
    SessionRetention,
    SessionRetentionArgs,
    backstop_days,
)
from runtime.cli.main import build_parser
from tests.unit.infra.mocks import FAKE_KUBECONFIG, RecordedResource, RecordingMocks, settled
from tests.unit.infra.schema_validation import validate_k8s
from tests.unit.infra.test_config import stack_values
from tests.unit.infra.test_program import engine_config

K8S = "kubernetes:"
GC_KEY = f"ray-history/{RETENTION_SERVICE_ACCOUNT}"
AZURE_WIRING = StorageWiring(
    backend="azureblob",
    bucket="ray-history",
    env=pulumi.Output.from_input({"STORAGE_BACKEND": "azureblob", "AZURE_STORAGE_CONTAINER": "ray-history"}),
    server=IdentityWiring(env={"AZURE_CLIENT_ID": "server-cid"}),
    writers={
        GC_KEY: IdentityWiring(
            service_account_annotations=pulumi.Output.from_input({"azure.workload.identity/client-id": "writer-cid"}),
            pod_labels={"azure.workload.identity/use": "true"},
            env={"AZURE_CLIENT_ID": "writer-cid"},
        )
    },
    index_container="ray-history-index",
    index_maintainers=[GC_KEY],
)


def _deploy(args: SessionRetentionArgs) -> list[RecordedResource]:
    mocks = RecordingMocks.install()

    @settled  # every resource registered before they are read
    def run() -> None:
        SessionRetention("retention", args)

    run()
    return [r for r in mocks.resources if r.typ.startswith(K8S)]


def _by_kind(resources: list[RecordedResource]) -> dict[str, dict[str, Any]]:
    objects: dict[str, dict[str, Any]] = {}
    for r in resources:
        assert r.inputs["kind"] not in objects, f"two {r.inputs['kind']}"
        objects[r.inputs["kind"]] = r.inputs
    return objects


def _args(**kw: Any) -> SessionRetentionArgs:
    values: dict[str, Any] = {"image": "registry.example/ray-history-server:0.1.0", "wiring": AZURE_WIRING, "days": 30}
    return SessionRetentionArgs(**{**values, **kw})


def test_every_object_is_schema_valid_and_wired() -> None:
    objects = _by_kind(_deploy(_args()))
    assert set(objects) == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "CronJob"}
    for obj in objects.values():
        validate_k8s(obj)

    sa = objects["ServiceAccount"]["metadata"]
    assert (sa["name"], sa["namespace"]) == (RETENTION_SERVICE_ACCOUNT, "ray-history")
    assert sa["annotations"] == {"azure.workload.identity/client-id": "writer-cid"}
    assert objects["ClusterRole"]["rules"] == [
        {"apiGroups": ["ray.io"], "resources": ["rayclusters"], "verbs": ["list"]}
    ]
    binding = objects["ClusterRoleBinding"]
    assert binding["roleRef"]["name"] == objects["ClusterRole"]["metadata"]["name"] == "ray-history-gc"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": RETENTION_SERVICE_ACCOUNT, "namespace": "ray-history"}
    ]

    cron = objects["CronJob"]
    assert cron["metadata"]["namespace"] == "ray-history"
    assert cron["spec"]["schedule"] == "17 3 * * *"
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]
    assert pod["metadata"]["labels"]["azure.workload.identity/use"] == "true"
    spec = pod["spec"]
    assert spec["serviceAccountName"] == RETENTION_SERVICE_ACCOUNT
    assert spec["restartPolicy"] == "Never"
    assert spec["securityContext"]["runAsNonRoot"] is True
    (container,) = spec["containers"]
    assert container["image"] == "registry.example/ray-history-server:0.1.0"
    assert container["command"] == ["ray-history"]
    assert container["args"] == ["gc", "--older-than=30d", "--live-check=kubernetes", "--json"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env == {
        "STORAGE_BACKEND": "azureblob",
        "AZURE_STORAGE_CONTAINER": "ray-history",
        # ``gc`` deletes a session's shared indexes from their own container too.
        "SHARED_INDEX_CONTAINER": "ray-history-index",
        "AZURE_CLIENT_ID": "writer-cid",
    }
    hardened = container["securityContext"]
    assert hardened["readOnlyRootFilesystem"] is True and hardened["allowPrivilegeEscalation"] is False
    assert hardened["capabilities"] == {"drop": ["ALL"]}
    assert set(container["resources"]) == {"requests", "limits"}
    assert {"cpu", "memory", "ephemeral-storage"} <= set(container["resources"]["limits"])


def test_job_args_are_accepted_by_the_real_cli_parser() -> None:
    args = build_parser().parse_args(_args(days=7).gc_args())
    assert (args.command, args.older_than, args.live_check, args.json) == ("gc", 7 * 86400, "kubernetes", True)


def test_cron_job_waits_for_the_writer_identity() -> None:
    mocks = RecordingMocks.install()
    done: list[str] = []

    @settled
    def run() -> pulumi.Output[None]:
        grant = pulumi.CustomResource("test:index:Grant", "gc-grant", {})
        wiring = StorageWiring(backend="s3", bucket="b", env={"STORAGE_BACKEND": "s3"}, server=IdentityWiring(),
                               writers={GC_KEY: IdentityWiring(ready=[grant])}, index_maintainers=[GC_KEY])  # fmt: skip
        retention = SessionRetention("retention", SessionRetentionArgs(image="i:1", wiring=wiring, days=3))
        return retention.cron_job.urn.apply(lambda _: done.append("ok"))

    run()
    assert mocks.one("kubernetes:batch/v1:CronJob").depends_on("gc-grant")


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"days": 0}, "days"),
        ({"days": True}, "days"),
        ({"image": " "}, "image"),
        ({"schedule": "daily"}, "schedule"),
        ({"days": 40000}, "days: at most 36500"),
        ({"namespace": "Bad_NS"}, "namespace"),
        ({"account_name": "other"}, r"wiring.writers: no identity for ray-history/other"),
        (
            {"wiring": dataclasses.replace(AZURE_WIRING, index_maintainers=[])},
            r"wiring.index_maintainers: ray-history/ray-history-gc may not delete shared indexes",
        ),
        ({"resources": {"requests": {"cpu": "1"}}}, "resources"),
    ],
)
def test_bad_args_name_the_parameter(kw: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        _args(**kw).validate()


def test_days_are_bounded_by_what_the_gc_cli_accepts() -> None:
    """The CronJob runs ``ray-history gc --older-than=<days>d``, which refuses more than
    runtime/cli/gc.py's MAX_AGE_DAYS: validate() refuses what the job could never run."""
    from runtime.cli.gc import MAX_AGE_DAYS

    most = _args(days=MAX_AGE_DAYS)
    most.validate()
    assert build_parser().parse_args(most.gc_args()).older_than == MAX_AGE_DAYS * 86400
    beyond = _args(days=MAX_AGE_DAYS + 1)
    with pytest.raises(SystemExit):  # the real CLI refuses the job's own arguments
        build_parser().parse_args(beyond.gc_args())
    with pytest.raises(ValueError, match=f"days: at most {MAX_AGE_DAYS}"):
        beyond.validate()


@pytest.mark.parametrize(
    "schedule",
    [
        "17 3 * * *",
        "0 0 1 1 0",
        "59 23 31 12 6",
        "*/15 * * * *",
        "0 1-5/2 * * 1-5",
        "0,30 8-18 1,15 */3 *",
        "5/10 * * * *",
        "00 03 * * *",
    ],
)
def test_schedules_the_api_server_accepts_pass(schedule: str) -> None:
    _args(schedule=schedule).validate()


@pytest.mark.parametrize(
    ("schedule", "field"),
    [
        ("60 3 * * *", "minute field '60': 60 is outside 0-59"),
        ("17 24 * * *", "hour field '24': 24 is outside 0-23"),
        ("17 3 0 * *", "day of month field '0': 0 is outside 1-31"),
        ("17 3 32 * *", "day of month field '32'"),
        ("17 3 * 13 *", "month field '13': 13 is outside 1-12"),
        ("17 3 * 0 *", "month field '0'"),
        # robfig/cron v3 (the API server's parser) bounds the weekday 0-6: 7 is refused.
        ("17 3 * * 7", "day of week field '7': 7 is outside 0-6"),
        ("17 3 * * 1-7", "day of week field '1-7'"),
        ("0 5-2 * * *", "hour field '5-2': the range 5-2 runs backwards"),
        ("*/0 * * * *", "minute field '*/0': the step"),
        ("0,60 * * * *", "minute field '0,60'"),
        ("0,,5 * * * *", "minute field"),
        ("0 * * *", "has 4 fields"),
        ("0 0 * * * *", "has 6 fields"),
        ("0 0 * * mon", "day of week field 'mon'"),
        ("17 \u0663 * * *", "hour field"),  # a digit to Python, not to Go's strconv.Atoi
        ("@daily", "has 1 fields"),
    ],
)
def test_out_of_range_schedules_name_the_field(schedule: str, field: str) -> None:
    """kube-apiserver parses spec.schedule and refuses a field out of its range (minute 0-59,
    hour 0-23, day of month 1-31, month 1-12, day of week 0-6:
    https://kubernetes.io/docs/concepts/workloads/controllers/cron-jobs/#schedule-syntax)."""
    with pytest.raises(ValueError, match=f"^schedule: .*{re.escape(field)}"):
        _args(schedule=schedule).validate()


# -------------------------------------------------------------------- program
def _deploy_stack(stack: str, days: int | None) -> RecordingMocks:
    values = stack_values(stack)
    values["kubeconfig"] = FAKE_KUBECONFIG
    if days is not None:
        values["retention"] = {"days": days}
    mocks = RecordingMocks.install()
    pulumi.runtime.set_all_config(engine_config(values))

    @settled
    def program() -> pulumi.Output[None]:
        return pulumi.Output.from_input(deploy().outputs).apply(lambda _: None)

    try:
        program()
    finally:
        pulumi.runtime.set_all_config({})
    return mocks


def _gc_objects(mocks: RecordingMocks) -> list[dict[str, Any]]:
    return [
        r.inputs
        for r in mocks.resources
        if r.typ.startswith(K8S) and "gc" in str((r.inputs.get("metadata") or {}).get("name", ""))
    ]


@pytest.mark.parametrize("stack", ["gke", "eks", "aks", "kind"])
def test_program_runs_the_job_as_a_writer_and_keeps_the_bucket_rule_as_a_backstop(stack: str) -> None:
    mocks = _deploy_stack(stack, 30)
    assert backstop_days(30) == 30 * BACKSTOP_FACTOR == 90
    cron = mocks.one("kubernetes:batch/v1:CronJob").inputs
    validate_k8s(cron)
    # The stack's policy pack (non-root, resource limits, ...) accepts the job.
    assert [m for _, _, rule in RULES for m in rule("kubernetes:batch/v1:CronJob", cron)] == []
    container = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    assert container["args"][:2] == ["gc", "--older-than=30d"]
    server = next(
        r for r in mocks.of_type("kubernetes:apps/v1:Deployment") if r.inputs["metadata"]["name"] == "historyserver"
    )
    assert container["image"] == server.inputs["spec"]["template"]["spec"]["containers"][0]["image"]
    namespace = server.inputs["metadata"]["namespace"]
    assert cron["metadata"]["namespace"] == namespace
    gc_subject = f"ns/{namespace}/sa/{RETENTION_SERVICE_ACCOUNT}"
    if stack == "gke":
        grants = {r.inputs["member"].split("/subject/")[1]: r.inputs["role"]
                  for r in mocks.of_type("gcp:storage/bucketIAMMember:BucketIAMMember")}  # fmt: skip
        assert grants[gc_subject] == "roles/storage.objectUser"  # may delete
        assert grants[f"ns/{namespace}/sa/ray-history-server"] == "roles/storage.objectViewer"  # may not
        (rule,) = mocks.one("gcp:storage/bucket:Bucket").inputs["lifecycleRules"]
        assert rule == {"action": {"type": "Delete"}, "condition": {"age": 90}}
    elif stack == "eks":
        associations = {f"{r.inputs['namespace']}/{r.inputs['serviceAccount']}": r.inputs["roleArn"]
                        for r in mocks.of_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")}  # fmt: skip
        roles = {r.state["arn"]: r for r in mocks.of_type("aws:iam/role:Role")}
        writer_role = roles[associations[f"{namespace}/{RETENTION_SERVICE_ACCOUNT}"]]
        server_role = roles[associations[f"{namespace}/ray-history-server"]]
        assert writer_role is not server_role
        policies = {r.inputs["role"]: str(r.inputs["policy"]) for r in mocks.of_type("aws:iam/rolePolicy:RolePolicy")}
        assert "s3:DeleteObject" in policies[writer_role.resource_id]
        assert "s3:DeleteObject" not in policies[server_role.resource_id]
        (lifecycle,) = mocks.of_type("aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration")
        expiry = [rule["expiration"] for rule in lifecycle.inputs["rules"] if "expiration" in rule]
        assert expiry == [{"days": 90}]
    elif stack == "aks":
        # The gc account federates into an identity of its own (Blob Data Contributor on the history
        # and the shared-index containers), the server's into the read-only one.
        credentials = mocks.of_type("azure-native:managedidentity:FederatedIdentityCredential")
        on_identity = {c.inputs["subject"]: c.name for c in credentials}
        assert "-maintainer-" in on_identity[f"system:serviceaccount:{namespace}:{RETENTION_SERVICE_ACCOUNT}"]
        assert {e["name"]: e.get("value") for e in container["env"]}["SHARED_INDEX_CONTAINER"] == "ray-history-index"
        assert "-server-" in on_identity[f"system:serviceaccount:{namespace}:ray-history-server"]
        (policy,) = mocks.of_type("azure-native:storage:ManagementPolicy")
        (rule,) = policy.inputs["policy"]["rules"]
        assert rule["definition"]["actions"]["baseBlob"]["delete"] == {"daysAfterModificationGreaterThan": 90}
    else:  # kind: MinIO's keys from the copy of its Secret in the server's namespace
        env = {e["name"] for e in container["env"]}
        assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "S3_ENDPOINT"} <= env


@pytest.mark.parametrize("stack", ["gke", "eks"])
def test_without_retention_there_is_no_job_and_no_age_rule(stack: str) -> None:
    mocks = _deploy_stack(stack, None)
    assert not mocks.of_type("kubernetes:batch/v1:CronJob")
    assert not _gc_objects(mocks)
    if stack == "gke":
        assert not mocks.one("gcp:storage/bucket:Bucket").inputs.get("lifecycleRules")
    else:
        (lifecycle,) = mocks.of_type("aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration")
        assert not [rule for rule in lifecycle.inputs["rules"] if "expiration" in rule]
