"""AzureBlobHistoryStorage under Pulumi mocks: account hardening, federated credentials, roles, wiring."""

from __future__ import annotations

import re
from typing import Any

import pulumi
import pulumi_azure_native as azure
import pytest

from ray_history_pulumi.azure_storage import (
    AzureBlobHistoryStorage,
    AzureBlobHistoryStorageArgs,
    credentials_per_identity,
)
from ray_history_pulumi.contracts import ServiceAccountRef
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
    identities = [storage.server_identity] + ([storage.writer_identity] if storage.writer_identity else [])
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
        assert set(identities) == {"history-server", "history-writer"}
        credentials = {
            (r.inputs["resourceName"], r.inputs["subject"], r.inputs["issuer"], tuple(r.inputs["audiences"]))
            for r in mocks.of_type("azure-native:managedidentity:FederatedIdentityCredential")
        }
        audiences = ("api://AzureADTokenExchange",)
        assert credentials == {
            ("history-server", "system:serviceaccount:ray-system:ray-history-server", AKS_ISSUER, audiences),
            ("history-writer", "system:serviceaccount:ray:ray-collector", AKS_ISSUER, audiences),
            ("history-writer", "system:serviceaccount:team-a:ray-worker", AKS_ISSUER, audiences),
        }
        names = [
            r.inputs["federatedIdentityCredentialResourceName"]
            for r in mocks.of_type("azure-native:managedidentity:FederatedIdentityCredential")
        ]
        assert all(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]{2,119}", n) for n in names), names

    return _done(storage).apply(check)


def test_role_assignments_scoped_to_the_container(mocks: RecordingMocks) -> None:
    @pulumi.runtime.test
    def program() -> pulumi.Output[Any]:
        return _done(_storage())

    # Role assignments register once the identities' principal ids resolve: check after
    # every registration finished (the decorator waits for them), not inside an apply.
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
        "history-writer-blob-data": (
            principals["history-writer"],
            ROLE_PREFIX + "ba92f5b4-2d11-453d-a403-e96b0029c9fe",  # Storage Blob Data Contributor
            container_id,
            "ServicePrincipal",
        ),
    }


def test_account_scope_option(mocks: RecordingMocks) -> None:
    built: list[AzureBlobHistoryStorage] = []

    @pulumi.runtime.test
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
    assert built[0].writer_identity is None
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
        assert writer_annotations == {"azure.workload.identity/client-id": client_ids["history-writer"]}
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

    @pulumi.runtime.test
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
        "history-writer-blob-data": (CONTRIBUTOR, "ray-historyserver"),
    }
    assert storage.wiring.shared_index == mode
    assert storage.wiring.index_maintainers == []


def test_shared_index_off_creates_no_container_and_no_grant(mocks: RecordingMocks) -> None:
    """``off``: one container, the server Reader on it and nothing else."""
    grants, containers, storage = _grants(mocks, shared_index="off")
    assert set(containers) == {"ray-historyserver"}
    assert grants == {
        "history-server-blob-data": (READER, "ray-historyserver"),
        "history-writer-blob-data": (CONTRIBUTOR, "ray-historyserver"),
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
        "history-writer-blob-data": (CONTRIBUTOR, "ray-historyserver"),
        "history-maintainer-blob-data": (CONTRIBUTOR, "ray-historyserver"),
        "history-maintainer-index-data": (CONTRIBUTOR, "ray-history-index"),
    }
    credentials = {
        r.inputs["subject"]: r.inputs["resourceName"]
        for r in mocks.of_type("azure-native:managedidentity:FederatedIdentityCredential")
    }
    assert credentials["system:serviceaccount:ray-system:ray-history-gc"] == "history-maintainer"
    assert credentials["system:serviceaccount:ray:ray-collector"] == "history-writer"
    assert storage.wiring.index_maintainers == ["ray-system/ray-history-gc"]
    assert set(storage.wiring.writers) == {"ray/ray-collector", "team-a/ray-worker", "ray-system/ray-history-gc"}


def _accounts(count: int, name: str = "ray-collector") -> list[ServiceAccountRef]:
    return [ServiceAccountRef(f"team-{i}", name) for i in range(count)]


@pytest.mark.parametrize(
    ("writers", "maintainers", "field"),
    [(_accounts(21), [], "writers"), (_accounts(21), _accounts(21), "index_maintainers")],
)
def test_no_identity_gets_more_federated_credentials_than_azure_allows(
    writers: list[ServiceAccountRef], maintainers: list[ServiceAccountRef], field: str
) -> None:
    """Azure: "A maximum of 20 federated identity credentials can be added to an application or
    user-assigned managed identity"
    (https://learn.microsoft.com/en-us/entra/workload-id/workload-identity-federation-considerations).
    The writers (and the index maintainers) share one identity, one credential per service account:
    the 21st is refused here, naming the argument, not by Azure in the middle of ``pulumi up``."""
    with pytest.raises(ValueError, match=rf"AzureBlobHistoryStorageArgs\.{field}: 21 service accounts.*at most 20"):
        AzureBlobHistoryStorageArgs(
            resource_group_name="rg",
            account_name="rayhistory",
            oidc_issuer_url=AKS_ISSUER,
            writers=writers,
            index_maintainers=maintainers,
        )


def test_twenty_writers_and_a_maintainer_fit() -> None:
    """At the limit: 20 collectors on the writer identity; the maintainer's credential is on its own."""
    gc = ServiceAccountRef("ray-system", "ray-history-gc")
    args = AzureBlobHistoryStorageArgs(
        resource_group_name="rg",
        account_name="rayhistory",
        oidc_issuer_url=AKS_ISSUER,
        writers=[*_accounts(20), gc],
        index_maintainers=[gc],
    )
    assert credentials_per_identity(args.writers, args.index_maintainers) == {
        "server": 1,
        "writer": 20,
        "maintainer": 1,
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
        assert collectors == {} and storage.writer_identity is None
    else:
        assert set(collectors.values()) == {"ray-historyserver" if scope == "container" else "account"}
    if "ray-history-index" in containers:
        assert "account" not in collectors.values()
        reaching = {name for name, (_, where) in grants.items() if where in ("ray-history-index", "account")}
        assert all(name.startswith(("history-server", "history-maintainer")) for name in reaching), reaching
