"""ray_history_pulumi/workloads.py: writer service accounts per namespace."""

from __future__ import annotations

from typing import Any

import pulumi
import pytest

from ray_history_pulumi.contracts import IdentityWiring, StorageWiring
from ray_history_pulumi.workloads import RayWorkloadAccounts, RayWorkloadAccountsArgs
from tests.unit.infra.mocks import RecordedResource, RecordingMocks, settled
from tests.unit.infra.schema_validation import validate_k8s

ROLE = "arn:aws:iam::123456789012:role/ray-history-writer"


def _wiring(writers: dict[str, IdentityWiring], secret_env: dict[str, tuple[str, str]] | None = None) -> StorageWiring:
    return StorageWiring(
        backend="s3",
        bucket="hist",
        env={"STORAGE_BACKEND": "s3", "S3_BUCKET": "hist"},
        server=IdentityWiring(),
        writers=writers,
        secret_env=secret_env or {},
    )


IRSA = _wiring(
    {
        "team-a/ray-history-collector": IdentityWiring(
            service_account_annotations=pulumi.Output.from_input({"eks.amazonaws.com/role-arn": ROLE})
        ),
        "team-b/ray-history-collector": IdentityWiring(
            service_account_annotations={"eks.amazonaws.com/role-arn": ROLE},
            pod_labels={"azure.workload.identity/use": "true"},
        ),
    }
)


def _deploy(args: RayWorkloadAccountsArgs) -> tuple[RayWorkloadAccounts, list[RecordedResource]]:
    mocks = RecordingMocks.install()
    out: list[Any] = []

    @settled
    def run() -> pulumi.Output[None]:
        accounts = RayWorkloadAccounts("writers", args)
        out.append(accounts)
        return pulumi.Output.all(*[sa.urn for sa in accounts.accounts.values()]).apply(lambda _: None)

    run()
    return out[0], [r for r in mocks.resources if r.typ.startswith("kubernetes:")]


def test_one_annotated_account_per_namespace() -> None:
    accounts, resources = _deploy(
        RayWorkloadAccountsArgs(namespaces=["team-a", "team-b"], wiring=IRSA, create_namespaces=True)
    )
    for r in resources:
        validate_k8s(r.inputs)
    namespaces = sorted(r.inputs["metadata"]["name"] for r in resources if r.inputs["kind"] == "Namespace")
    assert namespaces == ["team-a", "team-b"]
    sas = {r.inputs["metadata"]["namespace"]: r.inputs for r in resources if r.inputs["kind"] == "ServiceAccount"}
    assert set(sas) == {"team-a", "team-b"}
    for sa in sas.values():
        assert sa["metadata"]["name"] == "ray-history-collector"
        assert sa["metadata"]["annotations"] == {"eks.amazonaws.com/role-arn": ROLE}
    assert sas["team-b"]["metadata"]["labels"]["azure.workload.identity/use"] == "true"
    assert accounts.pod_labels == {"team-a": {}, "team-b": {"azure.workload.identity/use": "true"}}
    assert accounts.account_name == "ray-history-collector"


def test_existing_namespaces_are_not_created_and_secret_wiring_needs_no_writers() -> None:
    wiring = _wiring({}, secret_env={"AWS_ACCESS_KEY_ID": ("minio", "access-key")})
    _accounts, resources = _deploy(RayWorkloadAccountsArgs(namespaces=["ml"], wiring=wiring, account_name="ray-runner"))
    kinds = [r.inputs["kind"] for r in resources]
    assert kinds == ["ServiceAccount"]
    assert resources[0].inputs["metadata"]["name"] == "ray-runner"
    validate_k8s(resources[0].inputs)


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"namespaces": []}, "namespaces"),
        ({"namespaces": ["Team_A"]}, "namespaces"),
        ({"namespaces": ["team-a", "team-a"]}, "listed twice"),
        ({"namespaces": ["team-a"], "account_name": "Bad Name"}, "account_name"),
        ({"namespaces": ["team-c"]}, r"wiring.writers: no identity for \['team-c/ray-history-collector'\]"),
    ],
)
def test_bad_args_name_the_parameter(kw: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        RayWorkloadAccountsArgs(wiring=IRSA, **kw).validate()
