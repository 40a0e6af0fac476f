"""The old home of the process set-up helpers, re-exported until ``runtime/cli`` and
``runtime/quickstart`` import :mod:`runtime.common.process` directly (#15 item 8).
Storage opening moved to :func:`runtime.storage.config.open_configured_store`."""

from __future__ import annotations

from runtime.common.process import JsonFormatter, configure_logging, limit_malloc_arenas

__all__ = ["JsonFormatter", "configure_logging", "limit_malloc_arenas"]
