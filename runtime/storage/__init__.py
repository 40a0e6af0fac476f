"""Storage layer shared by the collector and the history server.

Public surface::

    from runtime.storage import StorageConfig, open_store, KeyLayout, ClusterRef

    store = open_store(StorageConfig.from_env())      # local | gcs | s3 | azureblob
    layout = KeyLayout(config.root_dir)               # the only place keys are built
    store.put_file(layout.log_key(cluster, session, node, "raylet.out"), path)
"""

from runtime.common.ids import InvalidIdError, to_hex_id, to_hex_id_or_none
from runtime.storage.base import Listing, ObjectInfo, ObjectStore
from runtime.storage.config import BACKENDS, StorageConfig, add_storage_arguments, open_store
from runtime.storage.errors import (
    InvalidKeyError,
    ObjectNotFoundError,
    PermanentStorageError,
    StorageConfigError,
    StorageError,
    StorageUnavailableError,
)
from runtime.storage.layout import ClusterRef, KeyLayout, SessionMarker
from runtime.storage.retry import RetryPolicy

__all__ = [
    "BACKENDS",
    "ClusterRef",
    "InvalidIdError",
    "InvalidKeyError",
    "KeyLayout",
    "Listing",
    "ObjectInfo",
    "ObjectNotFoundError",
    "ObjectStore",
    "PermanentStorageError",
    "RetryPolicy",
    "SessionMarker",
    "StorageConfig",
    "StorageConfigError",
    "StorageError",
    "StorageUnavailableError",
    "add_storage_arguments",
    "open_store",
    "to_hex_id",
    "to_hex_id_or_none",
]
