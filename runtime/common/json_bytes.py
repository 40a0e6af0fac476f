"""JSON bytes that are kept: orjson's output, copied to its own size."""

from __future__ import annotations

from typing import Any

import orjson


def dumps_kept(value: Any) -> bytes:
    """``orjson.dumps(value)`` for bytes held long (rows until they are written, a cache).
    orjson's bytes stay in the buffer they were written to, at least 4 KiB even for a few
    bytes; a build that holds one per task or per log event would hold that many buffers."""
    return bytes(memoryview(orjson.dumps(value)))
