"""Where the history server's shared session indexes live (``history-index/``).

In the history bucket itself, except on Azure with ``--shared-index-container``: a
container of the same account, so an identity may write indexes without any write
access to the history container. Here, not in the server, because ``ray-history gc``
(which deletes a session's indexes with it) must not import the server.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from runtime.storage.errors import StorageConfigError

if TYPE_CHECKING:
    from runtime.storage.base import ObjectStore
    from runtime.storage.config import StorageConfig


def open_index_store(storage: StorageConfig, container: str | None, store: ObjectStore) -> ObjectStore:
    """``store`` itself, or on azureblob the container ``container`` of the same account."""
    if not container:
        return store
    if storage.backend != "azureblob":
        raise StorageConfigError(
            f"--shared-index-container={container}: only for --storage-backend=azureblob "
            f"(on {storage.backend} the indexes live under history-index/ in the same bucket)"
        )
    from runtime.storage.azureblob import AzureBlobSettings, AzureBlobStore

    settings = replace(AzureBlobSettings.from_source(storage.source), container=container)
    return AzureBlobStore(settings, retry=store.retry)
