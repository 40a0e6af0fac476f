"""Azure ABAC role-assignment conditions of :mod:`ray_history_pulumi.azure_storage` (pure, unit tested).

A condition (``conditionVersion`` "2.0") on a Storage Blob Data Contributor assignment lets
the actions it names through only where its expression is true; every other action of the
role is untouched. Grammar, operators and evaluation
(https://learn.microsoft.com/azure/role-based-access-control/conditions-format): ``(
(!(ActionMatches{'A'}) AND ...) OR (EXPRESSION) )``: an action not named passes, a named one
needs the expression. The role's DataActions (blobs ``delete``, ``read``, ``write``,
``move/action``, ``add/action``:
https://learn.microsoft.com/azure/role-based-access-control/built-in-roles/storage#storage-blob-data-contributor)
are conditioned all but ``read`` (reads and listings stay unconditional), each of them
supports the blob path and container name resource attributes, and the path is given without
the container name or a leading ``/``
(https://learn.microsoft.com/azure/storage/blobs/storage-auth-abac-attributes#blob-path); the
write, add and delete triple and the container + path pair follow Microsoft's own examples
(https://learn.microsoft.com/azure/storage/blobs/storage-auth-abac-examples#example-write-blobs-in-named-containers-with-a-path),
``move/action`` is conditioned too because a rename would otherwise move a blob past a path
condition (https://learn.microsoft.com/azure/storage/blobs/storage-auth-abac-security#blob-path).
Conditions are evaluated for Entra ID and user delegation SAS requests, never for Shared Key
(disabled on the account) or account / service SAS (same page, "Use of other authorization
mechanisms"), and never for management Actions such as ``containers/delete``
(https://learn.microsoft.com/azure/storage/blobs/storage-auth-abac#supported-attributes-and-operations).
"""

from __future__ import annotations

import re

from ray_history_pulumi.storage_common import namespace_prefixes, probe_prefix

CONDITION_VERSION = "2.0"
_BLOBS = "Microsoft.Storage/storageAccounts/blobServices/containers/blobs"
#: Storage Blob Data Contributor's DataActions that change data: all of them but ``blobs/read``.
WRITE_DATA_ACTIONS = (f"{_BLOBS}/write", f"{_BLOBS}/add/action", f"{_BLOBS}/delete", f"{_BLOBS}/move/action")
BLOB_PATH = f"@Resource[{_BLOBS}:path]"
CONTAINER_NAME = "@Resource[Microsoft.Storage/storageAccounts/blobServices/containers:name]"
#: What a value may hold: key prefixes and container names need no quoting or escaping.
_PLAIN = re.compile(r"^[A-Za-z0-9._/-]+$")


def _literal(value: str) -> str:
    if not _PLAIN.match(value):
        raise ValueError(f"{value!r}: a condition value must be letters, digits, '.', '_', '/' and '-'")
    return f"'{value}'"


def namespace_write_condition(root_dir: str, namespace: str, container: str) -> str:
    """The condition limiting a collector identity's writes, creations, deletes and renames to
    blobs of ``container`` under its namespace's prefixes
    (:func:`~ray_history_pulumi.storage_common.namespace_prefixes`) and under the
    ``python -m runtime.storage check`` probes (``ROOT/_selfcheck/``, which nothing serves):
    never another namespace's sessions or markers, never ``ROOT/history-index/``.
    ``StringStartsWith`` is case-sensitive (conditions-format, operators)."""
    prefixes = [*namespace_prefixes(root_dir, namespace), probe_prefix(root_dir)]
    actions = " AND ".join(f"!(ActionMatches{{'{action}'}})" for action in WRITE_DATA_ACTIONS)
    paths = " OR ".join(f"{BLOB_PATH} StringStartsWith {_literal(prefix)}" for prefix in prefixes)
    return f"(({actions}) OR ({CONTAINER_NAME} StringEquals {_literal(container)} AND ({paths})))"
