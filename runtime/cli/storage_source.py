"""Answer query commands straight from storage, without a running server.

The history server's own Flask app runs in-process (live discovery off) and is
asked through Flask's test client, so ``ray-history jobs`` over a bucket gives
exactly what ``/api/jobs/`` of a server on that bucket would. Session indexes
are kept in ``--cache-dir`` so the second query of a session is fast, and a session
a history server already indexed is downloaded from the bucket's shared indexes
rather than rebuilt (read only: the CLI never writes there; on Azure
``SHARED_INDEX_CONTAINER`` names their container, as for the server).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

from runtime.cli.api import ApiResponse, HistoryApi, Params
from runtime.cli.errors import CliError, UsageError
from runtime.server.config import ServerConfig
from runtime.server.context import app_services
from runtime.storage.config import StorageConfig
from runtime.storage.errors import StorageConfigError, StorageError

CACHE_DIR_ENV = "RAY_HISTORY_CACHE_DIR"
SHARED_INDEX_CONTAINER_ENV = "SHARED_INDEX_CONTAINER"


def default_cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """``$RAY_HISTORY_CACHE_DIR``, else ``$XDG_CACHE_HOME/ray-history`` (``~/.cache/ray-history``)."""
    env = os.environ if env is None else env
    if env.get(CACHE_DIR_ENV):
        return Path(env[CACHE_DIR_ENV])
    return Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ray-history"


def storage_config(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> StorageConfig:
    """The storage flags + environment, as the collector and server read them."""
    try:
        return StorageConfig.from_args(args, env)
    except StorageConfigError as exc:
        raise UsageError(str(exc)) from None


class InProcessHistoryApi(HistoryApi):
    """The history server's app over ``storage``, asked through a test client."""

    def __init__(self, storage: StorageConfig, cache_dir: Path, env: Mapping[str, str] | None = None) -> None:
        from runtime.server.app import create_app

        try:
            cache_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"--cache-dir={cache_dir}: cannot create it ({exc.strerror})") from None
        env = os.environ if env is None else env
        container = env.get(SHARED_INDEX_CONTAINER_ENV, "").strip() or None
        config = ServerConfig(
            storage=storage,
            cache_dir=cache_dir,
            kubernetes="off",
            shared_index="read",  # a CLI run never writes to the bucket
            shared_index_container=container,
        )
        try:
            self._app = create_app(config)
        except StorageConfigError as exc:
            raise UsageError(f"{SHARED_INDEX_CONTAINER_ENV}: {exc}") from None
        except StorageError as exc:
            raise CliError(f"storage is not usable: {exc}") from None
        services = app_services(self._app)
        self._store = services.store
        self.where = services.store.describe()
        self._client = self._app.test_client()

    def get(self, path: str, params: Params = (), *, stream: bool = False) -> ApiResponse:
        response = self._client.get(path, query_string=list(params), buffered=False)

        def chunks() -> Iterator[bytes]:
            for chunk in response.response:
                yield chunk if isinstance(chunk, bytes) else str(chunk).encode()

        return ApiResponse(
            status=response.status_code,
            content_type=response.headers.get("Content-Type", ""),
            chunks=chunks(),
            close=response.close,
        )

    def close(self) -> None:
        self._store.close()
