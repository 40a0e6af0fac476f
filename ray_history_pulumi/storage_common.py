"""Small helpers every storage component shares (validation, env map, wiring keys, the
shared-index modes and key prefix, the key prefixes of one namespace, index maintainers)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import pulumi

from ray_history_pulumi.contracts import ServiceAccountRef, StorageWiring
from runtime.storage.layout import KeyLayout

# Kubernetes object names (RFC 1123 labels for namespaces, subdomains for service accounts).
_K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")

#: ``--shared-index`` of the history server, least access first: ``off`` never touches the
#: shared indexes, ``read`` uses ones built elsewhere, ``write`` also uploads its own.
SHARED_INDEX_MODES = ("off", "read", "write")


def index_prefix(root_dir: str) -> str:
    """Key prefix of the shared indexes: ``ROOT/history-index/``, ``history-index/`` at the
    bucket root (KubeRay's Go server ignores it), as the layout builds it."""
    return KeyLayout(root_dir.strip("/")).index_root_prefix()


def namespace_prefixes(root_dir: str, namespace: str) -> list[str]:
    """Key prefixes of one namespace's sessions, as the layout builds them
    (:meth:`runtime.storage.layout.KeyLayout.namespace_prefixes`)."""
    return KeyLayout(root_dir.strip("/")).namespace_prefixes(namespace)


def probe_prefix(root_dir: str) -> str:
    """Key prefix of ``python -m runtime.storage check``'s probe objects (read by nothing else)."""
    return KeyLayout(root_dir.strip("/")).probe_prefix()


def collector_prefixes(root_dir: str, namespace: str) -> list[str]:
    """Every key prefix a collector of ``namespace`` may read, list and write, and nothing
    else: its namespace's sessions and markers, and the storage check's probes (which every
    binary lists at start to prove its bucket exists)."""
    return [*namespace_prefixes(root_dir, namespace), probe_prefix(root_dir)]


def resolve_index_maintainers(
    what: str,
    writers: Sequence[ServiceAccountRef],
    maintainers: Sequence[ServiceAccountRef] | None,
    default: ServiceAccountRef,
) -> list[ServiceAccountRef]:
    """The writers that may delete shared indexes (the retention job's account), in ``writers`` order.

    ``maintainers`` None means ``default`` (the retention job's account beside the server)
    if it is a writer, else none; a maintainer that is not a writer is an error naming ``what``.
    """
    wanted = {writer_key(sa) for sa in (maintainers if maintainers is not None else [default])}
    keys = {writer_key(sa) for sa in writers}
    strangers = sorted(wanted - keys) if maintainers is not None else []
    if strangers:
        raise ValueError(f"{what}: {strangers} are not writers")
    return [sa for sa in writers if writer_key(sa) in wanted]


def validate_shared_index(what: str, mode: str) -> None:
    """``mode`` must be one of :data:`SHARED_INDEX_MODES`; the error names ``what``."""
    if mode not in SHARED_INDEX_MODES:
        raise ValueError(f"{what}={mode!r}: must be one of {', '.join(SHARED_INDEX_MODES)}")


def shared_index_covers(granted: str, wanted: str) -> bool:
    """True when storage granting ``granted`` lets the server run with ``--shared-index=wanted``."""
    return SHARED_INDEX_MODES.index(wanted) <= SHARED_INDEX_MODES.index(granted)


def account_resource_name(prefix: str, account: ServiceAccountRef) -> str:
    """Pulumi name of a resource made per service account: ``PREFIX-NS.NAME``. A namespace holds
    no ``.`` (an RFC 1123 label), so two accounts never share it; ``PREFIX-NS-NAME``, the name
    such resources had before, was the same for ``a-b/c`` and ``a/b-c`` and failed the deploy
    with a duplicate URN (https://www.pulumi.com/docs/iac/concepts/resources/names/#urns)."""
    return f"{prefix}-{account.namespace}.{account.name}"


def former_account_aliases(
    prefix: str, account: ServiceAccountRef, accounts: Sequence[ServiceAccountRef]
) -> list[pulumi.Alias]:
    """The name a stack deployed before :func:`account_resource_name` knows this resource by,
    so that ``pulumi up`` renames it in place instead of replacing it; none where that name
    was ambiguous among ``accounts`` (such a stack could not have been deployed)."""
    former = f"{prefix}-{account.namespace}-{account.name}"
    same = [sa for sa in accounts if f"{prefix}-{sa.namespace}-{sa.name}" == former]
    return [pulumi.Alias(name=former)] if len(same) == 1 else []


def writer_key(account: ServiceAccountRef) -> str:
    """Key of a writer in :attr:`StorageWiring.writers`: ``namespace/name``."""
    return f"{account.namespace}/{account.name}"


def validate_common(
    what: str, writers: Sequence[ServiceAccountRef], server: ServiceAccountRef, retention_days: int | None
) -> None:
    """Checks shared by every storage args class; errors name the offending field."""
    for label, account in [("server", server)] + [(f"writers[{i}]", sa) for i, sa in enumerate(writers)]:
        for part, value in (("namespace", account.namespace), ("name", account.name)):
            if not _K8S_NAME.match(value):
                raise ValueError(f"{what}.{label}.{part}={value!r} is not a valid Kubernetes name")
    keys = [writer_key(sa) for sa in writers]
    if len(set(keys)) != len(keys):
        raise ValueError(f"{what}.writers: duplicate service accounts {sorted(keys)}")
    if retention_days is not None and retention_days < 1:
        raise ValueError(f"{what}.retention_days={retention_days}: must be >= 1 (or None to keep history forever)")


def storage_env(values: Mapping[str, pulumi.Input[str]], root_dir: str) -> pulumi.Output[dict[str, str]]:
    """The storage env map (README "Storage configuration" names) as one Output."""
    env: dict[str, pulumi.Input[str]] = dict(values)
    if root_dir:
        env["STORAGE_ROOT_DIR"] = root_dir.strip("/")
    return pulumi.Output.all(**env).apply(lambda resolved: {k: str(v) for k, v in resolved.items()})


def check_server_shared_index(wiring: StorageWiring, mode: str) -> None:
    """The server's ``--shared-index`` is a mode, and no more than the storage grants it."""
    validate_shared_index("shared_index", mode)
    validate_shared_index("wiring.shared_index", wiring.shared_index)
    if not shared_index_covers(wiring.shared_index, mode):
        raise ValueError(
            f"shared_index={mode!r}: the storage grants the server only {wiring.shared_index!r} on shared indexes; "
            "give the storage component shared_index='write' (least privilege: only then may it write)"
        )
    if mode != "off" and wiring.backend == "azureblob" and wiring.index_container is None:
        raise ValueError(
            f"shared_index={mode!r}: the Azure storage has no shared-index container (its shared_index is 'off')"
        )


def server_shared_index_env(wiring: StorageWiring, mode: str) -> dict[str, pulumi.Input[str]]:
    """``SHARED_INDEX`` and, on Azure, ``SHARED_INDEX_CONTAINER``: the server's ``--shared-index``
    and ``--shared-index-container`` as environment (an image without them ignores them)."""
    env: dict[str, pulumi.Input[str]] = {"SHARED_INDEX": mode}
    if mode != "off" and wiring.index_container is not None:
        env["SHARED_INDEX_CONTAINER"] = wiring.index_container
    return env
