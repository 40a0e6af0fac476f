"""GcsHistoryStorage under Pulumi mocks: bucket hardening, WIF members, roles, wiring."""

from __future__ import annotations

import re

import pulumi
import pulumi_gcp as gcp
import pytest

from ray_history_pulumi.contracts import ServiceAccountRef
from ray_history_pulumi.gcp_storage import (
    INDEX_WRITER_ROLE,
    SERVER_ROLE,
    WRITER_LIST_ROLE,
    WRITER_ROLE,
    GcsHistoryStorage,
    GcsHistoryStorageArgs,
    workload_identity_principal,
)
from tests.unit.infra.collector_keys import collector_keys, index_keys
from tests.unit.infra.mocks import GCP_PROJECT_NUMBER, RecordingMocks, settled

WRITERS = [ServiceAccountRef("ray", "ray-collector"), ServiceAccountRef("team-a", "ray-worker")]
SERVER = ServiceAccountRef("ray-system", "ray-history-server")
#: The retention job's account beside the server: the default index maintainer.
GC = ServiceAccountRef("ray-system", "ray-history-gc")
_CLAUSE = re.compile(r'^resource\.name\.startsWith\("([^"]+)"\)$')
_EQUALS = re.compile(r'^resource\.name == "([^"]+)"$')


def condition_allows(expression: str, resource_name: str) -> bool:
    """Evaluate the IAM condition expressions these components write: ``resource.name.startsWith("...")``
    and ``resource.name == "..."`` clauses joined by ``||``. Anything else fails the test (the
    evaluator would be wrong)."""
    allowed = False
    for clause in expression.split(" || "):
        starts, equals = _CLAUSE.fullmatch(clause), _EQUALS.fullmatch(clause)
        assert starts or equals, f"unexpected CEL {clause!r} in {expression!r}"
        allowed |= resource_name.startswith(starts.group(1)) if starts else resource_name == equals.group(1)  # type: ignore[union-attr]
    return allowed


@pytest.fixture
def mocks() -> RecordingMocks:
    return RecordingMocks.install()


def _storage(**overrides: object) -> GcsHistoryStorage:
    provider = gcp.Provider("gcp-explicit", project="demo-proj")
    settings: dict[str, object] = {
        "project": "demo-proj",
        "location": "US",
        "writers": WRITERS,
        "server": SERVER,
        "retention_days": 30,
    }
    settings.update(overrides)
    return GcsHistoryStorage(
        "history",
        GcsHistoryStorageArgs(**settings),
        opts=pulumi.ResourceOptions(providers=[provider]),  # type: ignore[arg-type]
    )


def test_principal_string_matches_gke_format() -> None:
    member = workload_identity_principal("42", "proj", ServiceAccountRef("ns1", "ksa"))
    assert member == (
        "principal://iam.googleapis.com/projects/42/locations/global/workloadIdentityPools/"
        "proj.svc.id.goog/subject/ns/ns1/sa/ksa"
    )


@settled
def test_bucket_is_private_uniform_and_expires(mocks: RecordingMocks) -> pulumi.Output[None]:
    storage = _storage()

    def check(_: object) -> None:
        bucket = mocks.one("gcp:storage/bucket:Bucket").inputs
        assert bucket["uniformBucketLevelAccess"] is True
        assert bucket["publicAccessPrevention"] == "enforced"
        assert bucket["location"] == "US"
        assert bucket["lifecycleRules"] == [{"action": {"type": "Delete"}, "condition": {"age": 30}}]

    return storage.bucket_name.apply(check)


@settled
def test_no_lifecycle_rule_without_retention(mocks: RecordingMocks) -> pulumi.Output[None]:
    storage = _storage(retention_days=None)
    return storage.bucket_name.apply(
        lambda _: None if not mocks.one("gcp:storage/bucket:Bucket").inputs.get("lifecycleRules") else pytest.fail()
    )


@settled
def test_writers_get_object_user_and_server_read_only(mocks: RecordingMocks) -> pulumi.Output[None]:
    storage = _storage()

    def check(_: object) -> None:
        grants = {
            (r.inputs["member"], r.inputs["role"], r.inputs["bucket"])
            for r in mocks.of_type("gcp:storage/bucketIAMMember:BucketIAMMember")
        }
        bucket = "history-bucket"  # auto-named under mocks
        prefix = (
            f"principal://iam.googleapis.com/projects/{GCP_PROJECT_NUMBER}/locations/global/"
            "workloadIdentityPools/demo-proj.svc.id.goog/subject"
        )
        assert grants == {
            (f"{prefix}/ns/ray/sa/ray-collector", WRITER_ROLE, bucket),
            (f"{prefix}/ns/ray/sa/ray-collector", WRITER_LIST_ROLE, bucket),
            (f"{prefix}/ns/team-a/sa/ray-worker", WRITER_ROLE, bucket),
            (f"{prefix}/ns/team-a/sa/ray-worker", WRITER_LIST_ROLE, bucket),
            (f"{prefix}/ns/ray-system/sa/ray-history-server", SERVER_ROLE, bucket),
        }
        assert SERVER_ROLE == WRITER_LIST_ROLE == "roles/storage.objectViewer"  # the collectors' conditional
        assert WRITER_ROLE == "roles/storage.objectUser"
        # No authoritative policy resources that would wipe other grants.
        assert not mocks.of_type("gcp:storage/bucketIAMPolicy:BucketIAMPolicy")
        assert not mocks.of_type("gcp:storage/bucketIAMBinding:BucketIAMBinding")

    return pulumi.Output.all(*storage.members.values()).apply(check)


@settled
def test_known_project_number_skips_lookup(mocks: RecordingMocks) -> pulumi.Output[None]:
    storage = _storage(project_number="111")

    def check(member: str) -> None:
        assert "/projects/111/" in member
        assert not [c for c in mocks.calls if c[0] == "gcp:organizations/getProject:getProject"]

    return storage.members["server"].apply(check)


@settled
def test_project_lookup_waits_for_the_components_dependencies(mocks: RecordingMocks) -> pulumi.Output[None]:
    """The ``getProject`` lookup waits for the component's ``depends_on`` (the project's enabled APIs).

    GCP: ``projects.get`` is a Cloud Resource Manager method
    (https://cloud.google.com/iam/docs/write-policy-client-libraries), off in a new project
    (https://cloud.google.com/service-usage/docs/enabled-service#default): looked up before
    ``serviceusage`` enables it, it fails with ``SERVICE_DISABLED``. The bucket and grants wait for
    the component's ``depends_on`` through their parent; an invoke does not by itself.
    """
    from ray_history_pulumi.gcp_services import GcpProjectServices, GcpProjectServicesArgs

    apis = GcpProjectServices("apis", GcpProjectServicesArgs(project="demo-proj"))
    storage = GcsHistoryStorage(
        "history",
        GcsHistoryStorageArgs(project="demo-proj", location="US", writers=WRITERS, server=SERVER),
        opts=pulumi.ResourceOptions(depends_on=[apis]),
    )

    def check(_: str) -> None:
        (lookup,) = mocks.invokes_of("gcp:organizations/getProject:getProject")
        services = {r.name for r in mocks.of_type("gcp:projects/service:Service")}
        assert services and services <= lookup.dependency_names(), lookup.dependency_names()

    return storage.members["server"].apply(check)


@settled
def test_wiring_env_and_identities(mocks: RecordingMocks) -> pulumi.Output[None]:
    storage = _storage(bucket_name="my-ray-history", root_dir="/prod/")

    def check(env: dict[str, str]) -> None:
        assert env == {
            "STORAGE_BACKEND": "gcs",
            "GCS_BUCKET": "my-ray-history",
            "GOOGLE_CLOUD_PROJECT": "demo-proj",
            "STORAGE_ROOT_DIR": "prod",
        }
        assert storage.wiring.backend == "gcs"
        assert set(storage.wiring.writers) == {"ray/ray-collector", "team-a/ray-worker"}
        assert storage.wiring.server.service_account_annotations == {}
        assert storage.wiring.secret_env == {}

    return pulumi.Output.from_input(storage.wiring.env).apply(check)


@settled
def test_every_resource_and_invoke_uses_the_explicit_provider(mocks: RecordingMocks) -> pulumi.Output[None]:
    storage = _storage()
    return pulumi.Output.all(*storage.members.values()).apply(
        lambda _: mocks.assert_all_use_provider("gcp", "gcp-explicit")
    )


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"project": ""}, "project"),
        ({"bucket_name": "Bad_Name!"}, "bucket_name"),
        ({"retention_days": 0}, "retention_days"),
        ({"writers": [ServiceAccountRef("Bad NS", "sa")]}, "writers[0].namespace"),
        ({"writers": [WRITERS[0], WRITERS[0]]}, "writers"),
    ],
)
def test_bad_args_name_the_field(overrides: dict[str, object], field: str) -> None:
    settings: dict[str, object] = {"project": "p", "location": "US", **overrides}
    with pytest.raises(ValueError, match=re.escape(f"GcsHistoryStorageArgs.{field}")):
        GcsHistoryStorageArgs(**settings)  # type: ignore[arg-type]


@settled
def test_provider_check_catches_a_default_provider(mocks: RecordingMocks) -> pulumi.Output[None]:
    """The helper the provider tests rely on fails when a component falls back to the default provider."""
    storage = GcsHistoryStorage("history", GcsHistoryStorageArgs(project="demo-proj", location="US"))

    def check(_: object) -> None:
        with pytest.raises(AssertionError, match="not using provider 'gcp-explicit'"):
            mocks.assert_all_use_provider("gcp", "gcp-explicit")

    return pulumi.Output.all(*storage.members.values()).apply(check)


# ------------------------------------------------------------------ shared indexes
def _iam(mocks: RecordingMocks, **overrides: object) -> list[dict[str, object]]:
    captured: list[dict[str, object]] = []

    @settled
    def program() -> pulumi.Output[None]:
        storage = _storage(**overrides)
        return pulumi.Output.all(storage.bucket_name, *storage.members.values()).apply(lambda _: None)

    program()  # the conditional grant registers once the bucket's name resolves
    for r in mocks.of_type("gcp:storage/bucketIAMMember:BucketIAMMember"):
        captured.append(
            {
                "name": r.name,
                "member": r.inputs["member"].split("/subject/")[1],
                "role": r.inputs["role"],
                "condition": r.inputs.get("condition"),
            }
        )
    return captured


@pytest.mark.parametrize(
    ("root_dir", "prefix"),
    [("", "history-index/"), ("x/y", "x/y/history-index/"), ("/x/y/", "x/y/history-index/")],
)
def test_write_adds_a_grant_conditioned_on_the_index_prefix(mocks: RecordingMocks, root_dir: str, prefix: str) -> None:
    """``write``: the server gets roles/storage.objectUser (create, and delete, which an overwrite
    needs) only where ``resource.name`` starts with the index prefix; Cloud Storage names objects
    ``projects/_/buckets/BUCKET/objects/KEY`` in IAM conditions
    (https://cloud.google.com/storage/docs/access-control/iam#conditions,
    https://cloud.google.com/iam/docs/conditions-attribute-reference#resource-name).
    objectViewer stays unconditional for reads."""
    grants = _iam(mocks, bucket_name="my-ray-history", root_dir=root_dir, shared_index="write", writers=[])
    server = {
        g["name"]: {k: v for k, v in g.items() if k != "member"}
        for g in grants
        if str(g["name"]).startswith("history-server")
    }
    assert server == {
        "history-server-ray-system.ray-history-server": {
            "name": "history-server-ray-system.ray-history-server",
            "role": SERVER_ROLE,
            "condition": None,
        },
        "history-server-index-writer": {
            "name": "history-server-index-writer",
            "role": INDEX_WRITER_ROLE,
            "condition": {
                "title": "shared-index-only",
                "description": "Ray history server: write shared indexes only",
                "expression": f'resource.name.startsWith("projects/_/buckets/my-ray-history/objects/{prefix}")',
            },
        },
    }
    assert INDEX_WRITER_ROLE == "roles/storage.objectUser"


@pytest.mark.parametrize("mode", ["off", "read"])
def test_read_and_off_grant_the_server_no_write(mocks: RecordingMocks, mode: str) -> None:
    """Least privilege: only ``write`` adds a grant; the server keeps objectViewer alone."""
    grants = _iam(mocks, shared_index=mode)
    assert [(g["role"], g["condition"]) for g in grants if g["member"] == "ns/ray-system/sa/ray-history-server"] == [
        (SERVER_ROLE, None)
    ]


@settled
def test_wiring_carries_the_mode_and_only_the_gc_job_maintains_indexes(mocks: RecordingMocks) -> pulumi.Output[None]:
    """Only the retention job's account (the default maintainer, beside the server) may delete
    shared indexes; the collectors' grants exclude them."""
    storage = _storage(shared_index="write", writers=[*WRITERS, GC])

    def check(_: object) -> None:
        assert storage.wiring.shared_index == "write"
        assert storage.wiring.index_container is None
        assert storage.wiring.index_maintainers == ["ray-system/ray-history-gc"]
        assert set(storage.wiring.writers) == {"ray/ray-collector", "team-a/ray-worker", "ray-system/ray-history-gc"}

    return pulumi.Output.all(*storage.members.values()).apply(check)


@pytest.mark.parametrize("root_dir", ["", "prod/ray"])
def test_collectors_read_and_write_only_their_namespace_never_shared_indexes(
    mocks: RecordingMocks, root_dir: str
) -> None:
    """A collector credential (any job code in that team's pods has it) may read, create,
    overwrite and delete only its own namespace's history and markers: not another team's
    sessions or logs, and not ``ROOT/history-index/``, so it can neither read another team's
    logs nor plant an index the server serves for another team.

    Encoded behaviour: a conditional binding applies only where its expression is true, and
    Cloud Storage names an object ``projects/_/buckets/BUCKET/objects/KEY`` and the bucket
    ``projects/_/buckets/BUCKET`` in ``resource.name``
    (https://cloud.google.com/storage/docs/access-control/iam#conditions,
    https://cloud.google.com/iam/docs/conditions-attribute-reference#resource-name). Listing is a
    method on the bucket (https://cloud.google.com/iam/docs/downscoping-short-lived-credentials):
    it comes from the collector's objectViewer conditioned on the bucket's own name, which no
    object's name equals, so that role reads no object at all."""
    writers = [ServiceAccountRef("team-a", "ray-worker"), ServiceAccountRef("team-b", "ray-worker"), GC]
    grants = _iam(mocks, bucket_name="hist", root_dir=root_dir, shared_index="write", writers=writers)
    objects = "projects/_/buckets/hist/objects/"
    by_member: dict[str, list[dict[str, object]]] = {}
    for g in grants:
        by_member.setdefault(str(g["member"]), []).append(g)
    for team, other in (("team-a", "team-b"), ("team-b", "team-a")):
        mine = by_member[f"ns/{team}/sa/ray-worker"]
        assert sorted((str(g["role"]), g["condition"] is None) for g in mine) == [
            (WRITER_ROLE, False),
            (WRITER_LIST_ROLE, False),
        ]
        (names,) = [g for g in mine if g["role"] == WRITER_LIST_ROLE]
        names_condition = names["condition"]
        assert isinstance(names_condition, dict) and names_condition["title"] == "list-names-only"
        names_only = str(names_condition["expression"])
        assert condition_allows(names_only, "projects/_/buckets/hist")  # listing object names
        assert not condition_allows(names_only, "projects/_/buckets/hist-other")
        for key in [*collector_keys(root_dir, other).values(), *collector_keys(root_dir, team).values()]:
            assert not condition_allows(names_only, objects + key), key  # reads come from the namespace grant
        (write,) = [g for g in mine if g["role"] == WRITER_ROLE]
        condition = write["condition"]
        assert isinstance(condition, dict)
        assert condition["title"] == "own-namespace-only"
        expression = str(condition["expression"])
        own = {**collector_keys(root_dir, team), **index_keys(root_dir, team)}
        foreign = {**collector_keys(root_dir, other), **index_keys(root_dir, other)}
        for what in ("log", "job-log", "events", "ended", "marker", "job-marker", "serve-marker"):
            assert condition_allows(expression, objects + own[what]), (team, what, own[what])
            assert not condition_allows(expression, objects + foreign[what]), (team, what, foreign[what])
        for what in ("index", "job-index"):
            assert not condition_allows(expression, objects + own[what]), (team, what)
            assert not condition_allows(expression, objects + foreign[what]), (team, what)
        # A namespace that only starts with this one is another namespace.
        longer = collector_keys(root_dir, f"{team}-x")
        assert not condition_allows(expression, objects + longer["log"])
        assert not condition_allows(expression, objects + longer["marker"])
        assert not condition_allows(expression, "projects/_/buckets/hist")
        # ``python -m runtime.storage check`` with the collector's account still writes its probes.
        probe = f"{root_dir}/_selfcheck/abc/probe" if root_dir else "_selfcheck/abc/probe"
        assert condition_allows(expression, objects + probe)
    # The retention job deletes every namespace's sessions and their indexes: unconditional.
    assert [(g["role"], g["condition"]) for g in by_member["ns/ray-system/sa/ray-history-gc"]] == [(WRITER_ROLE, None)]
    # Nothing but the gc job and the server's index grant holds objectUser without a namespace condition.
    unconditional_users = {g["member"] for g in grants if g["role"] == WRITER_ROLE and g["condition"] is None}
    assert unconditional_users == {"ns/ray-system/sa/ray-history-gc"}
    # No collector reads any object unconditionally.
    unconditional = {g["member"] for g in grants if g["condition"] is None}
    assert unconditional == {"ns/ray-system/sa/ray-history-gc", "ns/ray-system/sa/ray-history-server"}


def test_explicit_index_maintainers_and_strangers(mocks: RecordingMocks) -> None:
    """``index_maintainers`` names the unconditional writers; [] makes every writer a collector."""
    grants = _iam(mocks, writers=[*WRITERS, GC], index_maintainers=[WRITERS[0]])
    unconditional = {g["member"] for g in grants if g["role"] == WRITER_ROLE and g["condition"] is None}
    assert unconditional == {"ns/ray/sa/ray-collector"}
    with pytest.raises(
        ValueError, match=re.escape("GcsHistoryStorageArgs.index_maintainers: ['ray-system/ray-history-gc']")
    ):
        GcsHistoryStorageArgs(project="p", location="US", writers=WRITERS, index_maintainers=[GC])


def test_bad_shared_index_names_the_field() -> None:
    with pytest.raises(ValueError, match=re.escape("GcsHistoryStorageArgs.shared_index='yes'")):
        GcsHistoryStorageArgs(project="p", location="US", shared_index="yes")
