"""A requests transport adapter whose connections abort on close (GCS and Azure)."""

from __future__ import annotations

from typing import Any

from requests.adapters import DEFAULT_POOLBLOCK, HTTPAdapter

from runtime.storage.sockets import SOCKET_OPTIONS


class AbortOnCloseAdapter(HTTPAdapter):
    """:class:`~requests.adapters.HTTPAdapter` with :data:`~runtime.storage.sockets.SOCKET_OPTIONS`
    on every connection, direct or through a proxy (see ``runtime/storage/sockets.py`` for why)."""

    def init_poolmanager(
        self, connections: int, maxsize: int, block: bool = DEFAULT_POOLBLOCK, **pool_kwargs: Any
    ) -> None:
        pool_kwargs.setdefault("socket_options", SOCKET_OPTIONS)
        super().init_poolmanager(connections, maxsize, block, **pool_kwargs)

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        proxy_kwargs.setdefault("socket_options", SOCKET_OPTIONS)
        return super().proxy_manager_for(proxy, **proxy_kwargs)
