"""Import a cloud SDK without the optional transports it would load but we never use.

The collector is a sidecar with a memory budget (80 MiB RSS). Two SDKs import
heavy optional modules only to support transports this package does not use:
``google.api_core`` imports gRPC (~10 MiB) and ``azure.storage.blob`` imports
aiohttp through ``azure.core``'s ``AioHttpTransport`` (~7 MiB), both inside
``try: ... except ImportError``. Hiding those modules while the SDK is imported
takes the SDK's own "not installed" path; they are visible again afterwards,
so anything else in the process may still import them.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def without_modules(*names: str) -> Iterator[None]:
    """Make ``import name`` fail with ImportError inside the block, for each
    name not imported yet (one already loaded costs nothing more to keep)."""
    hidden = [name for name in names if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]  # documented way to block an import
    try:
        yield
    finally:
        for name in hidden:
            if sys.modules.get(name, ...) is None:
                del sys.modules[name]
