"""AzureBlobHistoryStorage under Pulumi mocks: account hardening, federated credentials, roles, wiring."""

from __future__ import annotations

import re
from typing import Any

import pulumi
import pulumi_azure_native as azure
import pytest

from ray_history_pulumi.azure_conditions import WRITE_DATA_ACTIONS, namespace_condition
from ray_history_pulumi.azure_storage import (
    AzureBlobHistoryStorage,
    AzureBlobHistoryStorageArgs,
    credentials_per_identity,
    writer_identity_resource_name,
)
from ray_history_pulumi.contracts import ServiceAccountRef
from tests.unit.infra.collector_keys import collector_keys, index_keys
from tests.unit.infra.components.test_azure_conditions import condition_allows
from tests.unit.infra.mocks import AKS_ISSUER, AZURE_SUBSCRIPTION, RecordingMocks, settled

WRITERS = [ServiceAccountRef("ray", "ray-collector"), ServiceAccountRef("team-a", "ray-worker")]
SERVER = ServiceAccountRef("ray-system", "ray-history-server")
ROLE_PREFIX = f"/subscriptions/{AZURE_SUBSCRIPTION}/providers/Microsoft.Authorization/roleDefinitions/"


@pytest.fixture
def mocks() -> RecordingMocks:
    return RecordingMocks.install()


def _storage(**overrides: Any) -> AzureBlobHistoryStorage:
    provider = azure.Provider("azure-explicit", location="westeurope")
    settings: dict[str, Any] = {
        "resource_group_name": "rg-ray",
        "account_name": "rayhistorydemo",
        "oidc_issuer_url": AKS_ISSUER,
        "writers": WRITERS,
        "server": SERVER,
        "retention_days": 30,
    }
    settings.update(overrides)
    return AzureBlobHistoryStorage(
        "history", AzureBlobHistoryStorageArgs(**settings), opts=pulumi.ResourceOptions(providers=[provider])
    )


def _done(storage: AzureBlobHistoryStorage) -> pulumi.Output[Any]:
    identities = [storage.server_identity, *storage.writer_identities.values()]
    credentials = [c.id for c in storage.federated_credentials]
    return pulumi.Output.all(storage.wiring.env, *[i.id for i in identities], *credentials, storage.container.id)


@settled
def test_account_and_container_are_private(mocks: RecordingMocks) -> pulumi.Output[None]:
    storage = _storage()

    def check(_: object) -> None:
        account = mocks.one("azure-native:storage:StorageAccount").inputs
        assert account["accountName"] == "rayhistorydemo"
        assert account["allowBlobPublicAccess"] is False
        assert account["allowSharedKeyAccess"] is False
        assert account["minimumTlsVersion"] == "TLS1_2"
        assert account["enableHttpsTrafficOnly"] is True
        assert account["kind"] == "StorageV2"
        containers = {r.inputs["containerName"]: r.inputs for r in mocks.of_type("azure-native:storage:BlobContainer")}
        # The history container and (shared_index "read" by default) the shared indexes' own.
        assert set(containers) == {"ray-historyserver", "ray-history-index"}
        assert all(container["publicAccess"] == "None" for container in containers.values())

    return _done(storage).apply(check)


@settled
def test_federated_credentials_per_service_account(mocks: RecordingMocks) -> pulumi.Output[None]:
    storage = _storage()

    def check(_: object) -> None:
        identities = {r.name: r for r in mocks.of_type("azure-native:managedidentity:UserAssignedIdentity")}
        assert set(identities) == {"history-server", "history-writer-ray", "history-writer-team-a"}
        credentials = {
            (r.inputs["resourceName"], r.inputs["subject"], r.inputs["issuer"], tuple(r.inputs["audiences"]))
            for r in mocks.of_type("azure-native:managedidentity:FederatedIdentityCredential")
        }
        audiences = ("api://AzureADTokenExchange",)
        assert credentials == {
            ("history-server", "system:serviceaccount:ray-system:ray-history-server", AKS_ISSUER, audiences),
            ("history-writer-ray", "system:serviceaccount:ray:ray-collector", AKS_ISSUER, audiences),
            ("history-writer-team-a", "system:serviceaccount:team-a:ray-worker", AKS_ISSUER, audiences),
        }
        names = [
            r.inputs["federatedIdentityCredentialResourceName"]
            for r in mocks.of_type("azure-native:managedidentity:FederatedIdentityCredential")
        ]
        assert all(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]{2,119}", n) for n in names), names

    return _done(storage).apply(check)


def test_role_assignments_scoped_to_the_container(mocks: RecordingMocks) -> None:
    @settled
    def program() -> pulumi.Output[Any]:
        return _done(_storage())

    # Role assignments register once the identities' principal ids resolve: check after
    # every registration finished (settled waits for every one), not inside an apply.
    program()
    containers = {r.inputs["containerName"]: r.resource_id for r in mocks.of_type("azure-native:storage:BlobContainer")}
    container_id = containers["ray-historyserver"]
    principals = {
        r.name: r.state["principalId"] for r in mocks.of_type("azure-native:managedidentity:UserAssignedIdentity")
    }
    assignments = {
        r.name: (
            r.inputs["principalId"],
            r.inputs["roleDefinitionId"],
            r.inputs["scope"],
            r.inputs["principalType"],
        )
        for r in mocks.of_type("azure-native:authorization:RoleAssignment")
    }
    assert assignments == {
        "history-server-blob-data": (
            principals["history-server"],
            ROLE_PREFIX + "2a2b9908-6ea1-4ae2-8e65-a410df84e7d1",  # Storage Blob Data Reader
            container_id,
            "ServicePrincipal",
        ),
        # shared_index "read" (the default): the server reads the index container too.
        "history-server-index-data": (
            principals["history-server"],
            ROLE_PREFIX + "2a2b9908-6ea1-4ae2-8e65-a410df84e7d1",  # Storage Blob Data Reader
            containers["ray-history-index"],
            "ServicePrincipal",
        ),
        # One identity per collector namespace, each Contributor under its own condition.
        **{
            f"history-writer-{ns}-blob-data": (
                principals[f"history-writer-{ns}"],
                ROLE_PREFIX + "ba92f5b4-2d11-453d-a403-e96b0029c9fe",  # Storage Blob Data Contributor
                container_id,
                "ServicePrincipal",
            )
            for ns in ("ray", "team-a")
        },
    }
    conditions = {
        r.name: (r.inputs.get("condition"), r.inputs.get("conditionVersion"))
        for r in mocks.of_type("azure-native:authorization:RoleAssignment")
    }
    assert conditions == {
        "history-server-blob-data": (None, None),
        "history-server-index-data": (None, None),
        "history-writer-ray-blob-data": (namespace_condition("", "ray", "ray-historyserver"), "2.0"),
        "history-writer-team-a-blob-data": (namespace_condition("", "team-a", "ray-historyserver"), "2.0"),
    }


def test_account_scope_option(mocks: RecordingMocks) -> None:
    built: list[AzureBlobHistoryStorage] = []

    @settled
    def program() -> pulumi.Output[Any]:
        built.append(_storage(role_scope="account", writers=[]))
        return _done(built[0])

    program()  # the role assignment registers after the identity's principal id resolves
    account_id = mocks.one("azure-native:storage:StorageAccount").resource_id
    scopes = {r.name: r.inputs["scope"] for r in mocks.of_type("azure-native:authorization:RoleAssignment")}
    index_id = next(
        r.resource_id
        for r in mocks.of_type("azure-native:storage:BlobContainer")
        if r.inputs["containerName"] == "ray-history-index"
    )
    assert scopes == {"history-server-blob-data": account_id, "history-server-index-data": index_id}
    assert built[0].writer_identities == {}
    assert built[0].wiring.writers == {}


@settled
def test_lifecycle_policy_deletes_old_history(mocks: RecordingMocks) -> pulumi.Output[None]:
    storage = _storage(root_dir="prod")

    def check(_: object) -> None:
        policy = mocks.one("azure-native:storage:ManagementPolicy").inputs
        assert policy["managementPolicyName"] == "default"
        [rule] = policy["policy"]["rules"]
        assert rule["enabled"] is True
        # The shared indexes' container: their prefix under the same root goes too.
        assert rule["definition"]["filters"]["prefixMatch"] == [
            "ray-historyserver/prod/",
            "ray-history-index/prod/history-index/",
        ]
        assert rule["definition"]["actions"]["baseBlob"]["delete"] == {"daysAfterModificationGreaterThan": 30}

    return _done(storage).apply(check)


@settled
def test_no_lifecycle_policy_without_retention(mocks: RecordingMocks) -> pulumi.Output[None]:
    storage = _storage(retention_days=None)
    return _done(storage).apply(
        lambda _: None if not mocks.of_type("azure-native:storage:ManagementPolicy") else pytest.fail()
    )


@settled
def test_a_deleted_container_stays_restorable(mocks: RecordingMocks) -> pulumi.Output[None]:
    """Storage Blob Data Contributor, which every collector identity holds, also carries the
    management action ``containers/delete``
    (https://learn.microsoft.com/azure/role-based-access-control/built-in-roles/storage#storage-blob-data-contributor),
    and role-assignment conditions are never evaluated for management actions
    (https://learn.microsoft.com/azure/storage/blobs/storage-auth-abac#supported-attributes-and-operations):
    any job in a team's Ray pods could delete the whole history container. Container soft
    delete on the account's blob service (the one named ``default``) keeps a deleted container
    restorable for the retention period, 1-365 days
    (https://learn.microsoft.com/azure/storage/blobs/soft-delete-container-overview)."""
    storage = _storage()

    def check(_: object) -> None:
        service = mocks.one("azure-native:storage:BlobServiceProperties")
        assert service.inputs["blobServicesName"] == "default"
        assert service.inputs["accountName"] == "rayhistorydemo"
        assert service.inputs["resourceGroupName"] == "rg-ray"
        assert service.inputs["containerDeleteRetentionPolicy"] == {"enabled": True, "days": 7}

    return _done(storage).apply(check)


@settled
def test_container_soft_delete_can_be_turned_off(mocks: RecordingMocks) -> pulumi.Output[None]:
    """Off is said, not implied by a missing resource: the blob service's properties are
    the account's and outlive the resource that set them."""
    storage = _storage(container_soft_delete_days=None)

    def check(_: object) -> None:
        service = mocks.one("azure-native:storage:BlobServiceProperties")
        assert service.inputs["containerDeleteRetentionPolicy"] == {"enabled": False}

    return _done(storage).apply(check)


@settled
def test_wiring_env_annotations_and_pod_label(mocks: RecordingMocks) -> pulumi.Output[None]:
    storage = _storage()
    writer = storage.wiring.writers["ray/ray-collector"]

    def check(args: list[Any]) -> None:
        env, server_annotations, writer_annotations = args
        assert env == {
            "STORAGE_BACKEND": "azureblob",
            "AZURE_STORAGE_ACCOUNT_URL": "https://rayhistorydemo.blob.core.windows.net/",
            "AZURE_STORAGE_CONTAINER": "ray-historyserver",
            "AZURE_STORAGE_AUTH_MODE": "workload_identity",
        }
        client_ids = {
            r.name: r.state["clientId"] for r in mocks.of_type("azure-native:managedidentity:UserAssignedIdentity")
        }
        assert server_annotations == {"azure.workload.identity/client-id": client_ids["history-server"]}
        assert writer_annotations == {"azure.workload.identity/client-id": client_ids["history-writer-ray"]}
        assert storage.wiring.server.pod_labels == {"azure.workload.identity/use": "true"}
        assert writer.pod_labels == {"azure.workload.identity/use": "true"}

    return pulumi.Output.all(
        storage.wiring.env, storage.wiring.server.service_account_annotations, writer.service_account_annotations
    ).apply(check)


@settled
def test_every_resource_and_invoke_uses_the_explicit_provider(mocks: RecordingMocks) -> pulumi.Output[None]:
    storage = _storage()
    return _done(storage).apply(lambda _: mocks.assert_all_use_provider("azure-native", "azure-explicit"))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"account_name": "Has-Dash"}, "AzureBlobHistoryStorageArgs.account_name"),
        ({"container_name": "x"}, "AzureBlobHistoryStorageArgs.container_name"),
        ({"role_scope": "subscription"}, "AzureBlobHistoryStorageArgs.role_scope"),
        ({"server": ServiceAccountRef("ray", "")}, "AzureBlobHistoryStorageArgs.server.name"),
        ({"container_soft_delete_days": 0}, "AzureBlobHistoryStorageArgs.container_soft_delete_days=0: whole days"),
        ({"container_soft_delete_days": 366}, "AzureBlobHistoryStorageArgs.container_soft_delete_days=366"),
        ({"container_soft_delete_days": True}, "AzureBlobHistoryStorageArgs.container_soft_delete_days=True"),
    ],
)
def test_bad_args_name_the_field(overrides: dict[str, Any], message: str) -> None:
    settings: dict[str, Any] = {
        "resource_group_name": "rg",
        "account_name": "rayhistory",
        "oidc_issuer_url": AKS_ISSUER,
        **overrides,
    }
    with pytest.raises(ValueError, match=re.escape(message)):
        AzureBlobHistoryStorageArgs(**settings)


# ------------------------------------------------------------------ shared indexes
READER = ROLE_PREFIX + "2a2b9908-6ea1-4ae2-8e65-a410df84e7d1"
CONTRIBUTOR = ROLE_PREFIX + "ba92f5b4-2d11-453d-a403-e96b0029c9fe"
GC = ServiceAccountRef("ray-system", "ray-history-gc")


def _grants(mocks: RecordingMocks, **overrides: Any) -> tuple[dict[str, tuple[str, str]], dict[str, str], Any]:
    """(assignment name -> (role, container name or "account")), container name -> id, the storage."""
    built: list[AzureBlobHistoryStorage] = []

    @settled
    def program() -> pulumi.Output[Any]:
        built.append(_storage(**overrides))
        return _done(built[0])

    program()  # role assignments register after the identities' principal ids resolve
    containers = {r.inputs["containerName"]: r.resource_id for r in mocks.of_type("azure-native:storage:BlobContainer")}
    by_id = {v: k for k, v in containers.items()}
    by_id[mocks.one("azure-native:storage:StorageAccount").resource_id] = "account"
    grants = {
        r.name: (r.inputs["roleDefinitionId"], by_id[r.inputs["scope"]])
        for r in mocks.of_type("azure-native:authorization:RoleAssignment")
    }
    return grants, containers, built[0]


@pytest.mark.parametrize(("mode", "index_role"), [("read", READER), ("write", CONTRIBUTOR)])
def test_shared_index_container_and_server_grant_per_mode(mocks: RecordingMocks, mode: str, index_role: str) -> None:
    """The shared indexes get their own container; the server's role on it is Reader with
    ``read`` and Contributor with ``write``, scoped to that container only (a container is an
    Azure role assignment's narrowest scope:
    https://learn.microsoft.com/azure/storage/blobs/assign-azure-role-data-access). The history
    container stays Reader for the server, and the collectors' identity never reaches the index
    container."""
    grants, containers, storage = _grants(mocks, shared_index=mode, index_container_name="idx-prod")
    assert set(containers) == {"ray-historyserver", "idx-prod"}
    assert grants == {
        "history-server-blob-data": (READER, "ray-historyserver"),
        "history-server-index-data": (index_role, "idx-prod"),
        "history-writer-ray-blob-data": (CONTRIBUTOR, "ray-historyserver"),
        "history-writer-team-a-blob-data": (CONTRIBUTOR, "ray-historyserver"),
    }
    assert storage.wiring.shared_index == mode
    assert storage.wiring.index_maintainers == []


def test_shared_index_off_creates_no_container_and_no_grant(mocks: RecordingMocks) -> None:
    """``off``: one container, the server Reader on it and nothing else."""
    grants, containers, storage = _grants(mocks, shared_index="off")
    assert set(containers) == {"ray-historyserver"}
    assert grants == {
        "history-server-blob-data": (READER, "ray-historyserver"),
        "history-writer-ray-blob-data": (CONTRIBUTOR, "ray-historyserver"),
        "history-writer-team-a-blob-data": (CONTRIBUTOR, "ray-historyserver"),
    }
    assert storage.wiring.shared_index == "off"
    assert storage.wiring.index_container is None


def test_read_grants_the_server_no_write_anywhere(mocks: RecordingMocks) -> None:
    """Least privilege: with ``read`` (the default) no Contributor assignment names the server."""
    grants, _, _ = _grants(mocks)
    assert [
        name for name, (role, _) in grants.items() if name.startswith("history-server") and role == CONTRIBUTOR
    ] == []


def test_index_maintainer_gets_its_own_identity_with_both_containers(mocks: RecordingMocks) -> None:
    """The retention job deletes a session's shared indexes with it: an identity of its own with
    Contributor on both containers (scoped to each,
    https://learn.microsoft.com/azure/storage/blobs/assign-azure-role-data-access), so the
    collectors' identity gains nothing."""
    grants, _, storage = _grants(mocks, writers=[*WRITERS, GC], index_maintainers=[GC])
    assert grants == {
        "history-server-blob-data": (READER, "ray-historyserver"),
        "history-server-index-data": (READER, "ray-history-index"),
        "history-writer-ray-blob-data": (CONTRIBUTOR, "ray-historyserver"),
        "history-writer-team-a-blob-data": (CONTRIBUTOR, "ray-historyserver"),
        "history-maintainer-blob-data": (CONTRIBUTOR, "ray-historyserver"),
        "history-maintainer-index-data": (CONTRIBUTOR, "ray-history-index"),
    }
    credentials = {
        r.inputs["subject"]: r.inputs["resourceName"]
        for r in mocks.of_type("azure-native:managedidentity:FederatedIdentityCredential")
    }
    assert credentials["system:serviceaccount:ray-system:ray-history-gc"] == "history-maintainer"
    assert credentials["system:serviceaccount:ray:ray-collector"] == "history-writer-ray"
    assert storage.wiring.index_maintainers == ["ray-system/ray-history-gc"]
    assert set(storage.wiring.writers) == {"ray/ray-collector", "team-a/ray-worker", "ray-system/ray-history-gc"}


def _accounts(count: int, name: str = "ray-collector") -> list[ServiceAccountRef]:
    return [ServiceAccountRef(f"team-{i}", name) for i in range(count)]


def _args(writers: list[ServiceAccountRef], maintainers: list[ServiceAccountRef]) -> AzureBlobHistoryStorageArgs:
    return AzureBlobHistoryStorageArgs(
        resource_group_name="rg",
        account_name="rayhistory",
        oidc_issuer_url=AKS_ISSUER,
        writers=writers,
        index_maintainers=maintainers,
    )


def test_twenty_one_service_accounts_in_one_namespace_are_refused_naming_it() -> None:
    """Azure: "A maximum of 20 federated identity credentials can be added to an application or
    user-assigned managed identity"
    (https://learn.microsoft.com/en-us/entra/workload-id/workload-identity-federation-considerations).
    The collectors of one namespace share its identity, one credential per service account: the
    21st in a namespace is refused here, naming the argument and the namespace, not by Azure in
    the middle of ``pulumi up``."""
    crowded = [ServiceAccountRef("team-a", f"sa-{i}") for i in range(21)]
    with pytest.raises(
        ValueError,
        match=r"AzureBlobHistoryStorageArgs\.writers: 21 service accounts would share namespace 'team-a'.*at most 20",
    ):
        _args([*crowded, ServiceAccountRef("team-b", "sa-0")], [])


def test_twenty_one_maintainers_are_refused() -> None:
    """The index maintainers share one identity (same Azure limit, same page as above)."""
    with pytest.raises(ValueError, match=r"AzureBlobHistoryStorageArgs\.index_maintainers: 21 service accounts"):
        _args(_accounts(21), _accounts(21))


def test_twenty_one_namespaces_with_a_collector_each_fit() -> None:
    """One identity per collector namespace: 21 namespaces (more than the old shared identity
    took) with one service account each give 21 identities of one credential each, within Azure's
    20 per identity
    (https://learn.microsoft.com/en-us/entra/workload-id/workload-identity-federation-considerations),
    and 20 service accounts in one namespace fit too; the maintainer's credential is on its own."""
    gc = ServiceAccountRef("ray-system", "ray-history-gc")
    args = _args([*_accounts(21), gc], [gc])
    counts = credentials_per_identity(args.writers, args.index_maintainers)
    assert counts == {"server": 1, "maintainer": 1, **{f"writer:team-{i}": 1 for i in range(21)}}
    full = [ServiceAccountRef("team-a", f"sa-{i}") for i in range(20)]
    assert credentials_per_identity(_args(full, []).writers)["writer:team-a"] == 20


def test_identity_names_fit_azure_with_their_random_suffix() -> None:
    """Azure names a user-assigned identity with 3-128 letters, digits, ``-`` and ``_``
    (https://learn.microsoft.com/azure/azure-resource-manager/management/resource-name-rules#microsoftmanagedidentity);
    auto-naming appends 8 random characters to the Pulumi name, so that stays within 120, cut
    deterministically (a hash of the full name) when a long component name meets a 63-character
    namespace, and distinct per namespace."""
    assert writer_identity_resource_name("history", "team-a") == "history-writer-team-a"
    long_name, ns_a, ns_b = "h" * 60, "a" * 62 + "1", "a" * 62 + "2"
    cut_a, cut_b = writer_identity_resource_name(long_name, ns_a), writer_identity_resource_name(long_name, ns_b)
    assert len(cut_a) == len(cut_b) == 120 and cut_a != cut_b
    assert cut_a == writer_identity_resource_name(long_name, ns_a)
    assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]*", cut_a)


def test_each_collector_namespace_gets_its_own_identity_limited_to_its_keys(mocks: RecordingMocks) -> None:
    """The collectors of every namespace used to share one Contributor identity: any team's
    credential (which any job code in its Ray pods holds) could overwrite or delete another
    team's history. Now each namespace has an identity of its own, with federated credentials for
    its own service accounts only, and its Storage Blob Data Contributor assignment carries an
    ABAC condition (conditionVersion 2.0) allowing writes, creations, deletes and renames only
    under its namespace's keys and the self-check probes
    (https://learn.microsoft.com/azure/storage/blobs/storage-auth-abac-examples#example-write-blobs-in-named-containers-with-a-path,
    https://learn.microsoft.com/azure/storage/blobs/storage-auth-abac-attributes#blob-path). The
    retention job's identity keeps its unconditional Contributor on both containers; each
    service account's annotation names its own namespace's identity."""
    writers = [
        ServiceAccountRef("team-a", "ray-worker"),
        ServiceAccountRef("team-a", "ray-head"),
        ServiceAccountRef("team-b", "ray-worker"),
        GC,
    ]
    grants, _, storage = _grants(mocks, writers=writers, index_maintainers=[GC], root_dir="prod")
    assert set(storage.writer_identities) == {"team-a", "team-b"}
    credentials = {
        r.inputs["subject"]: r.inputs["resourceName"]
        for r in mocks.of_type("azure-native:managedidentity:FederatedIdentityCredential")
    }
    assert credentials == {
        "system:serviceaccount:ray-system:ray-history-server": "history-server",
        "system:serviceaccount:team-a:ray-worker": "history-writer-team-a",
        "system:serviceaccount:team-a:ray-head": "history-writer-team-a",
        "system:serviceaccount:team-b:ray-worker": "history-writer-team-b",
        "system:serviceaccount:ray-system:ray-history-gc": "history-maintainer",
    }
    assignments = {r.name: r.inputs for r in mocks.of_type("azure-native:authorization:RoleAssignment")}
    principals = {
        r.name: r.state["principalId"] for r in mocks.of_type("azure-native:managedidentity:UserAssignedIdentity")
    }
    for team, other in (("team-a", "team-b"), ("team-b", "team-a")):
        assignment = assignments[f"history-writer-{team}-blob-data"]
        assert assignment["principalId"] == principals[f"history-writer-{team}"]
        assert grants[f"history-writer-{team}-blob-data"] == (CONTRIBUTOR, "ray-historyserver")
        assert assignment["conditionVersion"] == "2.0"
        condition = assignment["condition"]
        own, foreign = collector_keys("prod", team), collector_keys("prod", other)
        for action in WRITE_DATA_ACTIONS:
            for what in own:
                assert condition_allows(condition, action, "ray-historyserver", own[what]), (team, what)
                assert not condition_allows(condition, action, "ray-historyserver", foreign[what]), (team, what)
            for key in index_keys("prod", team).values():
                assert not condition_allows(condition, action, "ray-historyserver", key)
            assert condition_allows(condition, action, "ray-historyserver", "prod/_selfcheck/probe")
    for name in ("history-maintainer-blob-data", "history-maintainer-index-data", "history-server-blob-data"):
        assert "condition" not in assignments[name], name
    assert {n for n in grants if n.startswith("history-writer")} == {
        "history-writer-team-a-blob-data",
        "history-writer-team-b-blob-data",
    }

    client_ids = {
        r.name: r.state["clientId"] for r in mocks.of_type("azure-native:managedidentity:UserAssignedIdentity")
    }
    annotations: dict[str, Any] = {}

    @pulumi.runtime.test
    def program() -> pulumi.Output[Any]:
        wirings = storage.wiring.writers
        keys = sorted(wirings)
        outputs = [wirings[k].service_account_annotations for k in keys]
        return pulumi.Output.all(*outputs).apply(lambda values: annotations.update(zip(keys, values, strict=True)))

    program()
    key = "azure.workload.identity/client-id"
    assert annotations == {
        "team-a/ray-worker": {key: client_ids["history-writer-team-a"]},
        "team-a/ray-head": {key: client_ids["history-writer-team-a"]},
        "team-b/ray-worker": {key: client_ids["history-writer-team-b"]},
        "ray-system/ray-history-gc": {key: client_ids["history-maintainer"]},
    }


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"shared_index": "rw"}, "AzureBlobHistoryStorageArgs.shared_index='rw'"),
        ({"index_container_name": "Idx"}, "AzureBlobHistoryStorageArgs.index_container_name"),
        ({"index_container_name": "a--b"}, "AzureBlobHistoryStorageArgs.index_container_name"),
        ({"index_container_name": "ray-historyserver"}, "AzureBlobHistoryStorageArgs.index_container_name"),
        ({"index_maintainers": [GC]}, "AzureBlobHistoryStorageArgs.index_maintainers"),
    ],
)
def test_bad_shared_index_args_name_the_field(overrides: dict[str, Any], message: str) -> None:
    settings: dict[str, Any] = {
        "resource_group_name": "rg",
        "account_name": "rayhistory",
        "oidc_issuer_url": AKS_ISSUER,
        **overrides,
    }
    with pytest.raises(ValueError, match=re.escape(message)):
        AzureBlobHistoryStorageArgs(**settings)


@pytest.mark.parametrize("mode", ["read", "write"])
def test_account_scope_with_an_index_container_is_refused_for_collectors(mode: str) -> None:
    """An account-scoped Storage Blob Data Contributor writes every container of the account
    (the scope levels: https://learn.microsoft.com/azure/storage/blobs/assign-azure-role-data-access),
    the shared-index container included: a collector credential (any job code in a team's pods)
    could plant an index the server serves for another team's session. Refused, naming the field."""
    with pytest.raises(
        ValueError, match=re.escape(f"AzureBlobHistoryStorageArgs.role_scope='account' with shared_index={mode!r}")
    ):
        AzureBlobHistoryStorageArgs(
            resource_group_name="rg",
            account_name="rayhistory",
            oidc_issuer_url=AKS_ISSUER,
            writers=[*WRITERS, GC],
            index_maintainers=[GC],
            role_scope="account",
            shared_index=mode,
        )


@pytest.mark.parametrize(
    ("overrides", "scope"),
    [
        ({"role_scope": "container", "shared_index": "write"}, "container"),
        ({"role_scope": "container", "shared_index": "read"}, "container"),
        ({"role_scope": "account", "shared_index": "off"}, "account"),
        ({"role_scope": "account", "shared_index": "write", "writers": [GC]}, "maintainers only"),
    ],
)
def test_collectors_never_reach_the_index_container(
    mocks: RecordingMocks, overrides: dict[str, Any], scope: str
) -> None:
    """Every accepted combination: the collectors' identity is assigned roles on the history
    container (or, with no index container, the account) and never on the index container; only
    the maintainer's identity and the server's reach it."""
    settings: dict[str, Any] = {"writers": [*WRITERS, GC], "index_maintainers": [GC], **overrides}
    grants, containers, storage = _grants(mocks, **settings)
    collectors = {name: where for name, (_, where) in grants.items() if name.startswith("history-writer")}
    if scope == "maintainers only":
        assert collectors == {} and storage.writer_identities == {}
    else:
        assert set(collectors.values()) == {"ray-historyserver" if scope == "container" else "account"}
    if "ray-history-index" in containers:
        assert "account" not in collectors.values()
        reaching = {name for name, (_, where) in grants.items() if where in ("ray-history-index", "account")}
        assert all(name.startswith(("history-server", "history-maintainer")) for name in reaching), reaching
