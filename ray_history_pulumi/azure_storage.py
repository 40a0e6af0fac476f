"""Azure Blob storage for Ray history + AKS workload identities.

A StorageV2 account with no public blob access, TLS >= 1.2, HTTPS only and shared keys
disabled (Entra ID only); one private container; user-assigned managed identities (the
server's, one per collector namespace, the index maintainers') with one federated credential
per Kubernetes service account; Storage Blob Data Contributor / Reader role assignments scoped
to the container (or the account); and an optional lifecycle management policy that deletes
old history.

Shared indexes live in a second container of the account (``shared_index`` ``read`` or
``write``; none with ``off``): the server gets Storage Blob Data Reader on it, or Contributor
with ``write``, scoped to that container only; the history container stays read-only for it.
Writers listed in ``index_maintainers`` (the retention job) get an identity of their own with
Contributor on both containers; the collectors' identities never reach the index container
(``role_scope="account"``, which would, is refused while there are collectors and an index
container). Each collector namespace gets an identity of its own, Contributor under an Azure
ABAC condition (:func:`~ray_history_pulumi.azure_conditions.namespace_condition`): it
reads, lists, writes, creates, deletes and renames only its own namespace's keys (and the
self-check probes), so no team's credential reads another team's logs.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Literal

import pulumi
import pulumi_azure_native as azure

from ray_history_pulumi.azure_account_policies import (
    CONTAINER_SOFT_DELETE_DAYS,
    container_soft_delete,
    retention_policy,
    retention_prefixes,
)
from ray_history_pulumi.azure_conditions import CONDITION_VERSION, namespace_condition
from ray_history_pulumi.contracts import (
    SERVER_SERVICE_ACCOUNT,
    IdentityWiring,
    ServiceAccountRef,
    StorageWiring,
)
from ray_history_pulumi.storage_common import (
    account_resource_name,
    former_account_aliases,
    storage_env,
    validate_common,
    validate_shared_index,
    writer_key,
)

#: Built-in role definition GUIDs (identical in every Azure tenant).
BLOB_DATA_CONTRIBUTOR = "ba92f5b4-2d11-453d-a403-e96b0029c9fe"
BLOB_DATA_READER = "2a2b9908-6ea1-4ae2-8e65-a410df84e7d1"
TOKEN_EXCHANGE_AUDIENCE = "api://AzureADTokenExchange"  # noqa: S105 - an audience, not a secret
CLIENT_ID_ANNOTATION = "azure.workload.identity/client-id"
USE_LABEL = "azure.workload.identity/use"
#: Azure: "A maximum of 20 federated identity credentials can be added to an application or
#: user-assigned managed identity"
#: (https://learn.microsoft.com/en-us/entra/workload-id/workload-identity-federation-considerations).
MAX_FEDERATED_CREDENTIALS = 20
#: Auto-named identities get 8 random characters after the Pulumi name; Azure allows 3-128
#: (https://learn.microsoft.com/azure/azure-resource-manager/management/resource-name-rules#microsoftmanagedidentity).
_MAX_IDENTITY_RESOURCE_NAME = 128 - 8
_ACCOUNT_NAME = re.compile(r"^[a-z0-9]{3,24}$")
_CONTAINER_NAME = re.compile(r"^[a-z0-9](?!.*--)[a-z0-9-]{1,61}[a-z0-9]$")
#: One role assignment of an identity: (name suffix, scope, built-in role GUID, ABAC condition or None).
_Grant = tuple[str, pulumi.Input[str], str, str | None]


def role_definition_id(subscription_id: str, role_guid: str) -> str:
    """Fully qualified id of a built-in role definition in one subscription."""
    return f"/subscriptions/{subscription_id}/providers/Microsoft.Authorization/roleDefinitions/{role_guid}"


def federated_credential_name(account: ServiceAccountRef) -> str:
    """Name of the federated credential for one service account (unique per identity, <= 120 chars)."""
    return f"{account.namespace}-{account.name}".replace(".", "-")[:120]


def writer_identity_resource_name(name: str, namespace: str) -> str:
    """Pulumi name of one collector namespace's identity: ``NAME-writer-NS``, cut to what an
    auto-named identity allows with a hash of the full name kept (unique, deterministic)."""
    full = f"{name}-writer-{namespace}"
    if len(full) <= _MAX_IDENTITY_RESOURCE_NAME:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:8]
    return f"{full[: _MAX_IDENTITY_RESOURCE_NAME - 9]}-{digest}"


def credentials_per_identity(
    writers: Sequence[ServiceAccountRef], index_maintainers: Sequence[ServiceAccountRef] = ()
) -> dict[str, int]:
    """How many federated credentials each managed identity of :class:`AzureBlobHistoryStorage`
    gets, one per service account using it, by identity: ``server``, ``maintainer`` and
    ``writer:NS`` for each collector namespace ``NS``."""
    maintainers = {writer_key(sa) for sa in index_maintainers}
    collectors = Counter(sa.namespace for sa in writers if writer_key(sa) not in maintainers)
    counts = {"server": 1, "maintainer": len(writers) - sum(collectors.values())}
    counts.update({f"writer:{ns}": count for ns, count in collectors.items()})
    return counts


@dataclass
class AzureBlobHistoryStorageArgs:
    """Settings of :class:`AzureBlobHistoryStorage`.

    Attributes:
        resource_group_name: resource group holding the account and the identities.
        account_name: globally unique storage account name (3-24 lowercase letters/digits).
        oidc_issuer_url: the AKS cluster's OIDC issuer URL (``AksCluster.oidc_issuer_url``), as returned.
        writers: service accounts of Ray pods whose collector sidecar writes history. Those not
            in ``index_maintainers`` get one identity per namespace, one federated credential
            each: at most :data:`MAX_FEDERATED_CREDENTIALS` (Azure's limit per identity) in one
            namespace.
        server: the history server's service account (read-only).
        location: Azure region; None = the resource group's.
        container_name: blob container (``AZURE_STORAGE_CONTAINER``).
        role_scope: ``container`` (default, least privilege) or ``account``. ``account`` would
            cover the shared-index container too, so it needs ``shared_index="off"`` when there
            are collectors (writers not in ``index_maintainers``): their identity must never
            reach the indexes the server serves.
        container_soft_delete_days: keep a deleted container restorable this many days (1-365;
            None: off, set explicitly where it was on). Storage Blob Data Contributor, which the
            collectors hold, carries the management action ``containers/delete`` that no ABAC
            condition limits.
        retention_days: delete blobs not modified for this many days; None keeps them forever.
            Object by object, a running session's too: with whole-session retention
            (:mod:`ray_history_pulumi.retention`) use it as a backstop, ``backstop_days(days)``.
        root_dir: key prefix inside the container (``STORAGE_ROOT_DIR``); "" = container root.
        tags: tags on the account and identities.
        shared_index: ``off``, ``read`` (default) or ``write``: ``read`` and ``write`` create
            ``index_container_name``, where the server has Reader (``read``) or Contributor
            (``write``) scoped to that container.
        index_container_name: the shared-index container (``--shared-index-container``).
        index_maintainers: writers that delete shared indexes (the retention job's account):
            an identity of their own, Contributor on both containers (at most
            :data:`MAX_FEDERATED_CREDENTIALS`).
    """

    resource_group_name: pulumi.Input[str]
    account_name: str
    oidc_issuer_url: pulumi.Input[str]
    writers: Sequence[ServiceAccountRef] = ()
    server: ServiceAccountRef = field(default_factory=lambda: ServiceAccountRef("ray-system", SERVER_SERVICE_ACCOUNT))
    location: pulumi.Input[str] | None = None
    container_name: str = "ray-historyserver"
    role_scope: Literal["container", "account"] = "container"
    retention_days: int | None = None
    container_soft_delete_days: int | None = CONTAINER_SOFT_DELETE_DAYS
    root_dir: str = ""
    tags: dict[str, str] = field(default_factory=dict)
    shared_index: str = "read"
    index_container_name: str = "ray-history-index"
    index_maintainers: Sequence[ServiceAccountRef] = ()

    def __post_init__(self) -> None:
        if not _ACCOUNT_NAME.match(self.account_name):
            raise ValueError(
                f"AzureBlobHistoryStorageArgs.account_name={self.account_name!r}: 3-24 lowercase letters and digits"
            )
        if not _CONTAINER_NAME.match(self.container_name):
            raise ValueError(
                f"AzureBlobHistoryStorageArgs.container_name={self.container_name!r}: 3-63 lowercase letters, "
                "digits and single '-'"
            )
        if self.role_scope not in ("container", "account"):
            raise ValueError(
                f"AzureBlobHistoryStorageArgs.role_scope={self.role_scope!r}: must be 'container' or 'account'"
            )
        validate_common("AzureBlobHistoryStorageArgs", self.writers, self.server, self.retention_days)
        days = self.container_soft_delete_days
        if days is not None and (isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= 365):
            raise ValueError(
                f"AzureBlobHistoryStorageArgs.container_soft_delete_days={days!r}: whole days, 1-365, or None"
            )
        validate_shared_index("AzureBlobHistoryStorageArgs.shared_index", self.shared_index)
        if not _CONTAINER_NAME.match(self.index_container_name) or self.index_container_name == self.container_name:
            raise ValueError(
                f"AzureBlobHistoryStorageArgs.index_container_name={self.index_container_name!r}: 3-63 lowercase "
                "letters, digits and single '-', other than container_name"
            )
        maintainer_keys = {writer_key(sa) for sa in self.index_maintainers}
        collectors = [writer_key(sa) for sa in self.writers if writer_key(sa) not in maintainer_keys]
        if self.role_scope == "account" and self.shared_index != "off" and collectors:
            # An account-scoped Contributor writes every container of the account
            # (https://learn.microsoft.com/azure/storage/blobs/assign-azure-role-data-access):
            # the collectors could plant shared indexes the server then serves.
            raise ValueError(
                f"AzureBlobHistoryStorageArgs.role_scope='account' with shared_index={self.shared_index!r}: the "
                f"collectors' identities ({', '.join(collectors)}) would be Contributor on the shared-index container "
                "too; use role_scope='container' or shared_index='off'"
            )
        strangers = sorted({writer_key(sa) for sa in self.index_maintainers} - {writer_key(sa) for sa in self.writers})
        if strangers:
            raise ValueError(f"AzureBlobHistoryStorageArgs.index_maintainers: {strangers} are not writers")
        # Azure rejects the 21st credential mid-deploy, after the first 20 exist: refuse up front.
        counts = credentials_per_identity(self.writers, self.index_maintainers)
        for identity, count in counts.items():
            if count <= MAX_FEDERATED_CREDENTIALS:
                continue
            field_name, whose = ("index_maintainers", "the maintainers'")
            if identity.startswith("writer:"):
                field_name, whose = ("writers", f"namespace {identity.removeprefix('writer:')!r}'s collector")
            raise ValueError(
                f"AzureBlobHistoryStorageArgs.{field_name}: {count} service accounts would share {whose} managed "
                f"identity, one federated credential each; Azure allows at most {MAX_FEDERATED_CREDENTIALS} per "
                "identity"
            )


class AzureBlobHistoryStorage(pulumi.ComponentResource):
    """An Azure storage account + container for Ray history, with AKS workload identities.

    Example::

        azure_provider = azure.Provider("azure", location="westeurope")
        on_azure = pulumi.ResourceOptions(providers=[azure_provider])
        aks = AksCluster("aks", AksClusterArgs(resource_group_name=rg.name), opts=on_azure)
        storage = AzureBlobHistoryStorage(
            "history",
            AzureBlobHistoryStorageArgs(
                resource_group_name=rg.name,
                account_name="rayhistorydemo",
                oidc_issuer_url=aks.oidc_issuer_url,
                writers=[ServiceAccountRef("ray", "ray-collector")],
                retention_days=30,
            ),
            opts=on_azure,
        )
        storage.wiring.server.pod_labels  # {"azure.workload.identity/use": "true"}

    Attributes:
        account / container: the storage account and the blob container.
        bucket_name: the container name.
        server_identity / maintainer_identity: the user-assigned managed identities (the
            maintainers' only if there are index maintainers).
        writer_identities: one collector identity per namespace, by namespace.
        wiring: what the Kubernetes components need (:class:`StorageWiring`).
    """

    def __init__(
        self, name: str, args: AzureBlobHistoryStorageArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("rayhistory:azure:HistoryStorage", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        storage = azure.storage

        self.account = storage.StorageAccount(
            f"{name}-account",
            account_name=args.account_name,
            resource_group_name=args.resource_group_name,
            location=args.location,
            kind=storage.Kind.STORAGE_V2,
            sku=storage.SkuArgs(name=storage.SkuName.STANDARD_LRS),
            allow_blob_public_access=False,
            allow_shared_key_access=False,  # Entra ID (workload identity) only
            default_to_o_auth_authentication=True,
            minimum_tls_version=storage.MinimumTlsVersion.TLS1_2,
            enable_https_traffic_only=True,
            tags=args.tags or None,
            opts=child,
        )
        self.container = storage.BlobContainer(
            f"{name}-container",
            container_name=args.container_name,
            account_name=self.account.name,
            resource_group_name=args.resource_group_name,
            public_access=storage.PublicAccess.NONE,
            opts=child,
        )
        self.bucket_name: pulumi.Output[str] = self.container.name
        self.federated_credentials: list[azure.managedidentity.FederatedIdentityCredential] = []
        # Per account (``server`` or ``namespace/name``): what its credentials need to exist.
        self.ready: dict[str, list[pulumi.Resource]] = {}
        if args.retention_days is not None:
            retention_policy(
                name,
                account_name=self.account.name,
                resource_group_name=args.resource_group_name,
                prefixes=retention_prefixes(
                    args.container_name, args.root_dir, args.index_container_name, args.shared_index
                ),
                days=args.retention_days,
                opts=child,
            )
        container_soft_delete(
            name,
            account_name=self.account.name,
            resource_group_name=args.resource_group_name,
            days=args.container_soft_delete_days,
            opts=child,
        )

        # The shared indexes get a container of their own: a role assignment's narrowest
        # scope is a container (https://learn.microsoft.com/azure/storage/blobs/assign-azure-role-data-access).
        self.index_container = (
            storage.BlobContainer(
                f"{name}-index-container",
                container_name=args.index_container_name,
                account_name=self.account.name,
                resource_group_name=args.resource_group_name,
                public_access=storage.PublicAccess.NONE,
                opts=child,
            )
            if args.shared_index != "off"
            else None
        )
        client = azure.authorization.get_client_config_output(opts=pulumi.InvokeOutputOptions(parent=self))
        scope = self.container.id if args.role_scope == "container" else self.account.id
        history_reader: list[_Grant] = [("blob-data", scope, BLOB_DATA_READER, None)]
        history_writer: list[_Grant] = [("blob-data", scope, BLOB_DATA_CONTRIBUTOR, None)]
        server_grants, maintainer_grants = history_reader, history_writer
        if self.index_container is not None:
            server_role = BLOB_DATA_CONTRIBUTOR if args.shared_index == "write" else BLOB_DATA_READER
            index_grant = ("index-data", self.index_container.id, BLOB_DATA_CONTRIBUTOR, None)
            server_grants = [*history_reader, ("index-data", self.index_container.id, server_role, None)]
            maintainer_grants = [*history_writer, index_grant]
        self.server_identity = self._identity(
            f"{name}-server", kind="server", accounts=[args.server], args=args, client=client, grants=server_grants
        )
        maintainer_keys = {writer_key(sa) for sa in args.index_maintainers}
        collectors = [sa for sa in args.writers if writer_key(sa) not in maintainer_keys]
        maintainers = [sa for sa in args.writers if writer_key(sa) in maintainer_keys]
        # One identity per collector namespace: its Contributor assignment reads and writes only
        # that namespace's keys (an ABAC condition), so no team's credential reaches another's history.
        self.writer_identities: dict[str, azure.managedidentity.UserAssignedIdentity] = {}
        for namespace in dict.fromkeys(sa.namespace for sa in collectors):
            condition = namespace_condition(args.root_dir, namespace, args.container_name)
            self.writer_identities[namespace] = self._identity(
                writer_identity_resource_name(name, namespace),
                kind="writer",
                accounts=[sa for sa in collectors if sa.namespace == namespace],
                args=args,
                client=client,
                grants=[("blob-data", scope, BLOB_DATA_CONTRIBUTOR, condition)],
                credential_prefix=f"{name}-writer",
                all_accounts=collectors,  # all were on one writer identity before
            )
        self.maintainer_identity = (
            self._identity(
                f"{name}-maintainer",
                kind="maintainer",
                accounts=maintainers,
                args=args,
                client=client,
                grants=maintainer_grants,
            )
            if maintainers
            else None
        )
        identity_of = {writer_key(sa): self.writer_identities[sa.namespace] for sa in collectors}
        identity_of.update({writer_key(sa): self.maintainer_identity for sa in maintainers})

        env = storage_env(
            {
                "STORAGE_BACKEND": "azureblob",
                "AZURE_STORAGE_ACCOUNT_URL": self.account.primary_endpoints.blob,
                "AZURE_STORAGE_CONTAINER": self.container.name,
                "AZURE_STORAGE_AUTH_MODE": "workload_identity",
            },
            args.root_dir,
        )
        self.wiring = StorageWiring(
            backend="azureblob",
            bucket=self.container.name,
            env=env,
            server=self._wiring_for(self.server_identity, self.ready["server"]),
            writers={
                key: self._wiring_for(identity, self.ready[key]) for key, identity in identity_of.items() if identity
            },
            shared_index=args.shared_index,
            index_container=self.index_container.name if self.index_container is not None else None,
            index_maintainers=sorted(maintainer_keys) if self.index_container is not None else [],
        )
        self.register_outputs(
            {
                "account_name": self.account.name,
                "container_name": self.container.name,
                "server_client_id": self.server_identity.client_id,
                "writer_client_ids": {ns: identity.client_id for ns, identity in self.writer_identities.items()},
                "index_container_name": self.index_container.name if self.index_container is not None else None,
            }
        )

    def _identity(
        self,
        resource_name: str,
        *,
        kind: str,
        accounts: Sequence[ServiceAccountRef],
        args: AzureBlobHistoryStorageArgs,
        client: pulumi.Output[azure.authorization.GetClientConfigResult],
        grants: list[_Grant],
        credential_prefix: str | None = None,
        all_accounts: Sequence[ServiceAccountRef] | None = None,
    ) -> azure.managedidentity.UserAssignedIdentity:
        """An identity named ``resource_name``, a federated credential per account
        (``CREDENTIAL_PREFIX-NS.NAME``) and a role assignment per grant (``RESOURCE_NAME-SUFFIX``)."""
        identity = azure.managedidentity.UserAssignedIdentity(
            resource_name,
            resource_group_name=args.resource_group_name,
            location=args.location,
            tags=args.tags or None,
            opts=pulumi.ResourceOptions(parent=self),
        )
        # Azure rejects concurrent federated-credential writes on one identity: chain them.
        previous: list[pulumi.Resource] = []
        credentials: dict[str, pulumi.Resource] = {}
        for account in accounts:
            prefix = credential_prefix or resource_name
            credential = azure.managedidentity.FederatedIdentityCredential(
                account_resource_name(prefix, account),
                resource_group_name=args.resource_group_name,
                resource_name_=identity.name,
                federated_identity_credential_resource_name=federated_credential_name(account),
                issuer=args.oidc_issuer_url,
                subject=account.subject,
                audiences=[TOKEN_EXCHANGE_AUDIENCE],
                opts=pulumi.ResourceOptions(
                    parent=self,
                    depends_on=previous,
                    aliases=former_account_aliases(prefix, account, all_accounts or accounts),
                ),
            )
            previous = [credential]
            self.federated_credentials.append(credential)
            credentials["server" if kind == "server" else writer_key(account)] = credential
        assignments = [
            azure.authorization.RoleAssignment(
                f"{resource_name}-{suffix}",
                principal_id=identity.principal_id,
                # A brand-new identity may not have replicated yet; the type skips the lookup.
                principal_type=azure.authorization.PrincipalType.SERVICE_PRINCIPAL,
                role_definition_id=client.subscription_id.apply(partial(role_definition_id, role_guid=role_guid)),
                scope=scope,
                condition=condition,
                condition_version=CONDITION_VERSION if condition else None,
                opts=pulumi.ResourceOptions(parent=self),
            )
            for suffix, scope, role_guid, condition in grants
        ]
        # A token exchanged before its federated credential exists, or used before the role
        # assignment, fails; the workload identity webhook only mutates pods at admission.
        for key, credential in credentials.items():
            self.ready[key] = [credential, *assignments]
        return identity

    @staticmethod
    def _wiring_for(
        identity: azure.managedidentity.UserAssignedIdentity, ready: list[pulumi.Resource]
    ) -> IdentityWiring:
        # The workload identity webhook reads the client id from the SA and keys on the pod label.
        return IdentityWiring(
            service_account_annotations=identity.client_id.apply(lambda cid: {CLIENT_ID_ANNOTATION: cid}),
            pod_labels={USE_LABEL: "true"},
            ready=ready,
        )
