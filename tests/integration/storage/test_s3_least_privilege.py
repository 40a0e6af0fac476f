"""The S3 stores work under exactly the bucket policy the Pulumi program writes for them.

moto stores the objects but does not evaluate ``s3:prefix`` conditions (its
``moto/iam/access_control.py`` only knows ``sts:ExternalId``), so every call a store
makes here first passes an IAM check in the client that follows AWS's documented rules
for the constructs our policies use:

- each S3 operation needs the policy action AWS lists for it; HeadBucket needs
  ``s3:ListBucket`` and HeadObject ``s3:GetObject``
  (https://docs.aws.amazon.com/AmazonS3/latest/userguide/using-with-s3-policy-actions.html,
  https://docs.aws.amazon.com/AmazonS3/latest/API/API_HeadBucket.html);
- ``s3:prefix`` is in the request context only for a listing with a ``prefix``
  parameter (https://docs.aws.amazon.com/AmazonS3/latest/userguide/amazon-s3-policy-keys.html);
- "If the key that you specify in a policy condition is not present in the request
  context, the values do not match and the condition is false"
  (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_condition_operators.html).

So with a storage root, a HeadBucket is denied (no ``s3:prefix``): every binary checked
its bucket that way at start and failed on a real bucket, which no emulator showed.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse

from ray_history_pulumi.aws_policies import bucket_access_policy
from ray_history_pulumi.storage_common import index_prefix, namespace_prefixes, probe_prefix
from runtime.storage.base import ObjectStore
from runtime.storage.config import StorageConfig, open_store
from runtime.storage.errors import PermanentStorageError
from runtime.storage.layout import ClusterRef, KeyLayout
from runtime.storage.selfcheck import run_selfcheck
from tests.integration.conftest import TEST_RETRY, new_bucket_name
from tests.integration.emulators.base import Emulator
from tests.integration.emulators.registry import EmulatorPool

pytestmark = pytest.mark.integration

#: Operation -> (policy action, whether its resource is the bucket rather than an object).
POLICY_ACTIONS: dict[str, tuple[str, bool]] = {
    "HeadBucket": ("s3:ListBucket", True),
    "ListObjects": ("s3:ListBucket", True),
    "ListObjectsV2": ("s3:ListBucket", True),
    "ListMultipartUploads": ("s3:ListBucketMultipartUploads", True),
    "GetObject": ("s3:GetObject", False),
    "HeadObject": ("s3:GetObject", False),
    "PutObject": ("s3:PutObject", False),
    "CreateMultipartUpload": ("s3:PutObject", False),
    "UploadPart": ("s3:PutObject", False),
    "CompleteMultipartUpload": ("s3:PutObject", False),
    "AbortMultipartUpload": ("s3:AbortMultipartUpload", False),
    "ListParts": ("s3:ListMultipartUploadParts", False),
    "DeleteObject": ("s3:DeleteObject", False),
}
LISTINGS = {"ListObjects", "ListObjectsV2", "ListMultipartUploads"}


def _like(pattern: str, value: str) -> bool:
    """IAM's ``*`` / ``?`` wildcards (in ARNs and StringLike), nothing else special."""
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value, re.DOTALL) is not None


def _listed(element: str | list[str]) -> list[str]:
    return [element] if isinstance(element, str) else element


def allowed(policy: dict[str, Any], action: str, resource: str, context: dict[str, str]) -> bool:
    """Whether an identity policy of Allow statements allows one request."""
    for statement in policy["Statement"]:
        assert statement["Effect"] == "Allow", f"this check knows Allow statements only: {statement}"
        if not any(_like(a, action) for a in _listed(statement["Action"])):
            continue
        if not any(_like(r, resource) for r in _listed(statement["Resource"])):
            continue
        conditions = statement.get("Condition", {})
        assert set(conditions) <= {"StringLike"}, f"this check knows StringLike only: {conditions}"
        if all(
            key in context and any(_like(p, context[key]) for p in _listed(patterns))
            for key, patterns in conditions.get("StringLike", {}).items()
        ):
            return True
    return False


@dataclass
class IamCheck:
    """Answers 403 AccessDenied, as S3 would, to any call the policy does not allow."""

    policy: dict[str, Any]
    bucket: str
    calls: list[str] = field(default_factory=list)
    denied: list[str] = field(default_factory=list)

    def install(self, store: ObjectStore) -> None:
        events = store._client.meta.events  # type: ignore[attr-defined]  # an S3Store's boto3 client
        events.register("before-parameter-build.s3", self._keep_params)
        events.register("before-call.s3", self._check)

    @staticmethod
    def _keep_params(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        context["api_params"] = dict(params)

    def _check(self, model: Any, context: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
        operation, params = model.name, context["api_params"]
        action, on_bucket = POLICY_ACTIONS.get(operation, (f"<unmapped {operation}>", True))
        resource = f"arn:aws:s3:::{self.bucket}" + ("" if on_bucket else f"/{params['Key']}")
        request = {"s3:prefix": params["Prefix"]} if operation in LISTINGS and "Prefix" in params else {}
        what = f"{operation} {resource} {request}"
        self.calls.append(what)
        if allowed(self.policy, action, resource, request):
            return None
        self.denied.append(what)
        error = {"Code": "AccessDenied", "Message": "Access Denied"}
        body = {"Error": error, "ResponseMetadata": {"HTTPStatusCode": 403}}
        return AWSResponse(f"https://{self.bucket}.s3.amazonaws.com/", 403, {}, None), body


@pytest.fixture
def s3(emulator_pool: EmulatorPool) -> Emulator:
    return emulator_pool.get("s3")


def policed_store(
    s3: Emulator, bucket: str, root: str, *, write: bool, own_prefixes: list[str] | None = None
) -> tuple[ObjectStore, IamCheck]:
    """A store built as the binaries build theirs, behind the policy Pulumi gives them."""
    config = StorageConfig.from_env({**s3.env(bucket), "STORAGE_ROOT_DIR": root})
    store = open_store(config, retry=TEST_RETRY, check=False)
    arn = f"arn:aws:s3:::{bucket}"
    policy = json.loads(bucket_access_policy(arn, write=write, root_dir=root, own_prefixes=own_prefixes))
    iam = IamCheck(policy, bucket)
    iam.install(store)
    return store, iam


@pytest.fixture
def seeded_bucket(s3: Emulator) -> Iterator[str]:
    bucket = new_bucket_name()
    s3.create_bucket(bucket)
    with s3.make_store(bucket, retry=TEST_RETRY) as admin:
        for root in ("prod/", ""):
            admin.put_bytes(f"{root}cluster-history/raycluster/ns/c/session_x/node/logs/raylet.out", b"raylet\n")
        admin.put_bytes("elsewhere/secret.txt", b"not ours")
    yield bucket


@pytest.mark.parametrize("root", ["prod", ""])
def test_the_server_checks_lists_and_reads_under_its_policy(s3: Emulator, seeded_bucket: str, root: str) -> None:
    store, iam = policed_store(s3, seeded_bucket, root, write=False)
    layout = KeyLayout(root)
    with store:
        store.check()  # what every binary does at start
        history = store.list(layout.history_prefix(), delimiter="/")
        assert history.prefixes == [layout.history_prefix() + "raycluster/"]
        # An empty answer makes the store prove once that the bucket is there.
        assert store.list(layout.session_prefix(ClusterRef("ns", "gone"), "session_x")).objects == []
        key = f"{layout.session_prefix(ClusterRef('ns', 'c'), 'session_x')}node/logs/raylet.out"
        assert store.get_bytes(key) == b"raylet\n" and store.stat(key).size == 7
    assert iam.denied == [], iam.calls
    assert any(call.startswith("ListObjectsV2") for call in iam.calls)


def test_a_writer_checks_writes_and_deletes_under_its_root(s3: Emulator, seeded_bucket: str) -> None:
    store, iam = policed_store(s3, seeded_bucket, "prod", write=True)
    key = "prod/cluster-history/raycluster/ns/c/session_y/node/logs/worker.out"
    with store:
        store.check()
        store.put_stream(key, io.BytesIO(b"x" * 1000), size=1000)
        assert [o.key for o in store.list(key.rsplit("/", 1)[0] + "/").objects] == [key]
        store.delete(key)
    assert iam.denied == [], iam.calls


@pytest.mark.parametrize("root", ["prod", ""])
def test_a_collector_reads_and_writes_its_own_namespace_only(s3: Emulator, seeded_bucket: str, root: str) -> None:
    """A collector namespace's role (what ``S3HistoryStorage`` gives ``team-a``'s collectors)
    under AWS's rules: an Allow statement applies when the request's resource matches one of
    its ``Resource`` ARNs, and an object ARN ending in a key prefix and ``*`` scopes the
    actions to the keys under it
    (https://docs.aws.amazon.com/AmazonS3/latest/userguide/example-policies-s3.html,
    https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_resource.html);
    a listing is allowed only when its ``s3:prefix`` matches the statement's patterns.
    The collector checks its bucket, uploads, lists, reads and deletes its own sessions and
    markers; another team's session or marker, namespace ``team`` (a prefix of ``team-a``)
    and the shared indexes can be neither read, listed nor written, so a job's stolen
    credential can neither read another team's logs nor forge or erase its history."""
    prefixes = [*namespace_prefixes(root, "team-a"), probe_prefix(root)]
    store, iam = policed_store(s3, seeded_bucket, root, write=True, own_prefixes=prefixes)
    layout, node = KeyLayout(root), "ab" * 28
    own = layout.log_key(ClusterRef("team-a", "c"), "session_y", node, "worker.out")
    own_marker = layout.marker_key(ClusterRef("team-a", "c"), "session_y")
    seeded = f"{layout.session_prefix(ClusterRef('ns', 'c'), 'session_x')}node/logs/raylet.out"
    forbidden = [
        layout.log_key(ClusterRef("team-b", "c"), "session_y", node, "worker.out"),
        layout.marker_key(ClusterRef("team-b", "c"), "session_y"),
        layout.log_key(ClusterRef("team", "a-c"), "session_y", node, "worker.out"),
        layout.marker_key(ClusterRef("team", "a-c"), "session_y"),
        f"{index_prefix(root)}raycluster/team-b/c/session_y/v1/{'f' * 64}.sqlite.zst",
    ]
    unlistable = [layout.history_prefix(), layout.markers_prefix(), seeded.rsplit("/", 1)[0] + "/"]
    with store:
        store.check()
        store.put_stream(own, io.BytesIO(b"x" * 1000), size=1000)
        store.put_bytes(own_marker, b"")
        assert [o.key for o in store.list(own.rsplit("/", 1)[0] + "/").objects] == [own]
        assert store.get_bytes(own) == b"x" * 1000 and store.stat(own_marker).size == 0
        for key in forbidden:
            with pytest.raises(PermanentStorageError):
                store.put_bytes(key, b"forged")
        with pytest.raises(PermanentStorageError):
            store.get_bytes(seeded)
        for prefix in unlistable:
            with pytest.raises(PermanentStorageError):
                store.list(prefix)
        with pytest.raises(PermanentStorageError):
            store.delete(seeded)
        store.delete(own)
        store.delete(own_marker)
    denied = [call.split()[1].split(":::", 1)[1] for call in iam.denied]
    assert denied == [f"{seeded_bucket}/{key}" for key in [*forbidden, seeded]] + [seeded_bucket] * len(unlistable) + [
        f"{seeded_bucket}/{seeded}"
    ], iam.calls
    with s3.make_store(seeded_bucket, retry=TEST_RETRY) as admin:
        assert admin.get_bytes(seeded) == b"raylet\n"


def test_a_missing_bucket_is_still_named_missing_under_the_policy(s3: Emulator) -> None:
    store, iam = policed_store(s3, new_bucket_name(), "prod", write=False)
    with store, pytest.raises(PermanentStorageError, match="does not exist"):
        store.check()
    assert iam.denied == [], iam.calls


def test_the_check_follows_iams_rules_outside_the_root() -> None:
    """The rules above, on their own: without this, a check that allows everything
    would pass every test here."""
    arn = "arn:aws:s3:::b"
    policy = json.loads(bucket_access_policy(arn, write=False, root_dir="prod"))
    assert allowed(policy, "s3:ListBucket", arn, {"s3:prefix": "prod/cluster-history/"})
    assert not allowed(policy, "s3:ListBucket", arn, {})  # HeadBucket, or a listing of everything
    assert not allowed(policy, "s3:ListBucket", arn, {"s3:prefix": "elsewhere/"})
    assert allowed(policy, "s3:GetObject", f"{arn}/prod/x", {})
    assert not allowed(policy, "s3:GetObject", f"{arn}/elsewhere/secret.txt", {})
    assert not allowed(policy, "s3:PutObject", f"{arn}/prod/x", {})
    team_a = json.loads(
        bucket_access_policy(arn, write=True, root_dir="prod", own_prefixes=namespace_prefixes("prod", "team-a"))
    )
    own = f"{arn}/prod/cluster-history/raycluster/team-a/c/s/n/logs/x"
    assert allowed(team_a, "s3:PutObject", own, {}) and allowed(team_a, "s3:GetObject", own, {})
    other = f"{arn}/prod/cluster-history/raycluster/team-b/c/s/n/logs/x"
    assert not allowed(team_a, "s3:GetObject", other, {}) and not allowed(team_a, "s3:PutObject", other, {})
    assert allowed(team_a, "s3:ListBucket", arn, {"s3:prefix": "prod/cluster-history/raycluster/team-a/c/"})
    assert not allowed(team_a, "s3:ListBucket", arn, {"s3:prefix": "prod/cluster-history/raycluster/"})


def test_the_storage_check_passes_for_a_collector_that_names_its_namespace(s3: Emulator, seeded_bucket: str) -> None:
    """``python -m runtime.storage check`` run with a collector's credential: the probes
    and its own namespace's count pass; counting every namespace's sessions is refused
    by the policy, and the step says to name the namespace."""
    root = "prod"
    store, iam = policed_store(
        s3, seeded_bucket, root, write=True, own_prefixes=[*namespace_prefixes(root, "team-a"), probe_prefix(root)]
    )
    with store:
        store.put_bytes(
            KeyLayout(root).marker_key(ClusterRef("team-a", "c"), "session_2026-11-22_01-45-25_333080_9"), b""
        )
        scoped = run_selfcheck(store, KeyLayout(root), "team-a")
        assert scoped.ok, scoped.steps
        assert scoped.sessions == 1 and scoped.steps[-1].detail == "1 stored sessions of namespace team-a"
        assert iam.denied == [], iam.calls
        everyone = run_selfcheck(store, KeyLayout(root))
    assert [step.name for step in everyone.steps if not step.ok] == ["history"]
    assert "lists only its own namespace, use --namespace NS" in everyone.steps[-1].detail
    assert [call.split()[0] for call in iam.denied] == ["ListObjectsV2"]
