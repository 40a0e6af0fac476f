"""Azure ABAC role-assignment conditions of :mod:`ray_history_pulumi.azure_storage` (pure, unit tested).

A condition (``conditionVersion`` "2.0") on a Storage Blob Data Contributor assignment lets
the actions it names through only where its expression is true; every other action of the
role is untouched. Grammar, operators and evaluation
(https://learn.microsoft.com/azure/role-based-access-control/conditions-format): ``(
(!(ActionMatches{'A'}) AND ...) OR (EXPRESSION) )``: an action not named passes, a named one
needs the expression. The role's DataActions (blobs ``delete``, ``read``, ``write``,
``move/action``, ``add/action``:
https://learn.microsoft.com/azure/role-based-access-control/built-in-roles/storage#storage-blob-data-contributor)
are all conditioned. The data-changing ones and reading a blob (``read`` but not its
``Blob.List`` suboperation) support the blob path and container name resource attributes,
and the path is given without the container name or a leading ``/``
(https://learn.microsoft.com/azure/storage/blobs/storage-auth-abac-attributes#blob-path);
listing (``SubOperationMatches{'Blob.List'}``) has no blob path, only the request's blob
prefix (same page, "List blobs"), so it is conditioned on that prefix: a listing that does
not name a prefix inside the namespace is refused. The read and list pair follows
Microsoft's example "Read or list blobs in named containers with a path", the write, add and
delete triple and the container + path pair "Write blobs in named containers with a path"
(https://learn.microsoft.com/azure/storage/blobs/storage-auth-abac-examples);
``move/action`` is conditioned too because a rename would otherwise move a blob past a path
condition (https://learn.microsoft.com/azure/storage/blobs/storage-auth-abac-security#blob-path).
Conditions are evaluated for Entra ID and user delegation SAS requests, never for Shared Key
(disabled on the account) or account / service SAS (same page, "Use of other authorization
mechanisms"), and never for management Actions such as ``containers/delete``
(https://learn.microsoft.com/azure/storage/blobs/storage-auth-abac#supported-attributes-and-operations).
"""

from __future__ import annotations

import re

from ray_history_pulumi.storage_common import collector_prefixes

CONDITION_VERSION = "2.0"
_BLOBS = "Microsoft.Storage/storageAccounts/blobServices/containers/blobs"
#: Storage Blob Data Contributor's DataActions that change data: all of them but ``blobs/read``.
WRITE_DATA_ACTIONS = (f"{_BLOBS}/write", f"{_BLOBS}/add/action", f"{_BLOBS}/delete", f"{_BLOBS}/move/action")
READ_DATA_ACTION = f"{_BLOBS}/read"
#: The suboperation of ``blobs/read`` that lists a container (no blob path, a request prefix).
LIST_SUBOPERATION = "Blob.List"
BLOB_PATH = f"@Resource[{_BLOBS}:path]"
LIST_PREFIX = f"@Request[{_BLOBS}:prefix]"
CONTAINER_NAME = "@Resource[Microsoft.Storage/storageAccounts/blobServices/containers:name]"
#: What a value may hold: key prefixes and container names need no quoting or escaping.
_PLAIN = re.compile(r"^[A-Za-z0-9._/-]+$")


def _literal(value: str) -> str:
    if not _PLAIN.match(value):
        raise ValueError(f"{value!r}: a condition value must be letters, digits, '.', '_', '/' and '-'")
    return f"'{value}'"


def namespace_condition(root_dir: str, namespace: str, container: str) -> str:
    """The condition limiting a collector identity to blobs of ``container`` under its
    namespace's prefixes (:func:`~ray_history_pulumi.storage_common.namespace_prefixes`) and
    under the ``python -m runtime.storage check`` probes (``ROOT/_selfcheck/``, which nothing
    serves): it reads, lists (naming such a prefix), writes, creates, deletes and renames only
    those, never another namespace's sessions, logs or markers, never ``ROOT/history-index/``.
    ``StringStartsWith`` is case-sensitive (conditions-format, operators)."""
    prefixes = collector_prefixes(root_dir, namespace)
    in_container = f"{CONTAINER_NAME} StringEquals {_literal(container)}"
    paths = " OR ".join(f"{BLOB_PATH} StringStartsWith {_literal(prefix)}" for prefix in prefixes)
    listed = " OR ".join(f"{LIST_PREFIX} StringStartsWith {_literal(prefix)}" for prefix in prefixes)
    writes = " AND ".join(f"!(ActionMatches{{'{action}'}})" for action in WRITE_DATA_ACTIONS)
    read = f"ActionMatches{{'{READ_DATA_ACTION}'}}"
    listing = f"SubOperationMatches{{'{LIST_SUBOPERATION}'}}"
    return (
        f"(({writes}) OR ({in_container} AND ({paths})))"
        f" AND ((!({read} AND NOT {listing})) OR ({in_container} AND ({paths})))"
        f" AND ((!({read} AND {listing})) OR ({in_container} AND ({listed})))"
    )
