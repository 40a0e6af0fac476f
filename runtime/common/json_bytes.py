"""JSON bytes that are kept: orjson's output, copied to its own size."""

from __future__ import annotations

from typing import Any

import orjson


def dumps_kept(value: Any) -> bytes:
    """``orjson.dumps(value)`` for bytes held long (rows until they are written, a cache).
    orjson's bytes stay in the buffer they were written to, at least 4 KiB even for a few
    bytes; a build that holds one per task or per log event would hold that many buffers."""
    # Through str and back (orjson writes UTF-8): a quarter of the cost of
    # bytes(memoryview(...)) here, 0.07 against 0.31 us.
    return orjson.dumps(value).decode().encode()
