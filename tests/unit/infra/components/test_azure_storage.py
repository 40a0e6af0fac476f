"""AzureBlobHistoryStorage under Pulumi mocks: account hardening, federated credentials, roles, wiring."""

from __future__ import annotations

import re
from typing import Any

import pulumi
import pulumi_azure_native as azure
import pytest

from ray_history_pulumi.azure_storage import AzureBlobHistoryStorage, AzureBlobHistoryStorageArgs
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
        container = mocks.one("azure-native:storage:BlobContainer").inputs
        assert container["publicAccess"] == "None"
        assert container["containerName"] == "ray-historyserver"

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
    container_id = mocks.one("azure-native:storage:BlobContainer").resource_id
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
    [assignment] = mocks.of_type("azure-native:authorization:RoleAssignment")
    assert assignment.inputs["scope"] == account_id
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
        assert rule["definition"]["filters"]["prefixMatch"] == ["ray-historyserver/prod/"]
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
