"""Storage-account-wide policies of :class:`~ray_history_pulumi.azure_storage.AzureBlobHistoryStorage`:
the lifecycle rule that expires old history and the soft delete of containers."""

from __future__ import annotations

import pulumi
import pulumi_azure_native as azure

from ray_history_pulumi.storage_common import index_prefix

#: Days a deleted container stays restorable by default (Azure allows 1-365).
CONTAINER_SOFT_DELETE_DAYS = 7


def retention_prefixes(container: str, root_dir: str, index_container: str, shared_index: str) -> list[str]:
    """The lifecycle rule's ``prefixMatch``: ``CONTAINER/ROOT/``, and with shared indexes
    their prefix in their own container (a session's index goes with the session)."""
    root = root_dir.strip("/")
    prefixes = [f"{container}/{root}/" if root else f"{container}/"]
    if shared_index != "off":
        prefixes.append(f"{index_container}/{index_prefix(root_dir)}")
    return prefixes


def retention_policy(
    name: str,
    *,
    account_name: pulumi.Input[str],
    resource_group_name: pulumi.Input[str],
    prefixes: list[str],
    days: int,
    opts: pulumi.ResourceOptions,
) -> azure.storage.ManagementPolicy:
    """Delete block and append blobs under ``prefixes`` not modified for ``days`` days."""
    storage = azure.storage
    return storage.ManagementPolicy(
        f"{name}-retention",
        account_name=account_name,
        resource_group_name=resource_group_name,
        management_policy_name="default",  # the only name Azure accepts
        policy=storage.ManagementPolicySchemaArgs(
            rules=[
                storage.ManagementPolicyRuleArgs(
                    name="expire-ray-history",
                    enabled=True,
                    type=storage.RuleType.LIFECYCLE,
                    definition=storage.ManagementPolicyDefinitionArgs(
                        filters=storage.ManagementPolicyFilterArgs(
                            blob_types=["blockBlob", "appendBlob"], prefix_match=prefixes
                        ),
                        actions=storage.ManagementPolicyActionArgs(
                            base_blob=storage.ManagementPolicyBaseBlobArgs(
                                delete=storage.DateAfterModificationArgs(days_after_modification_greater_than=days)
                            )
                        ),
                    ),
                )
            ]
        ),
        opts=opts,
    )


def container_soft_delete(
    name: str,
    *,
    account_name: pulumi.Input[str],
    resource_group_name: pulumi.Input[str],
    days: int | None,
    opts: pulumi.ResourceOptions,
) -> azure.storage.BlobServiceProperties:
    """Container soft delete on the account's blob service: a deleted container (and its
    blobs) can be restored for ``days`` days
    (https://learn.microsoft.com/azure/storage/blobs/soft-delete-container-overview); None
    turns it off, explicitly: the blob service's properties outlive this resource.

    Why: a collector's identity holds Storage Blob Data Contributor, whose management action
    ``containers/delete`` no ABAC condition limits, so any job in a team's Ray pods could
    delete the whole history container; with this it is restorable, not gone."""
    storage = azure.storage
    return storage.BlobServiceProperties(
        f"{name}-blob-service",
        account_name=account_name,
        resource_group_name=resource_group_name,
        blob_services_name="default",  # the only name Azure accepts
        container_delete_retention_policy=(
            storage.DeleteRetentionPolicyArgs(enabled=True, days=days)
            if days is not None
            else storage.DeleteRetentionPolicyArgs(enabled=False)
        ),
        opts=opts,
    )
