"""Byte-stream helpers shared by :class:`~runtime.storage.base.ObjectStore` and the
backends: the chunk size of streamed transfers, a size-limited view of an open
file, and a read that does not stop at a short read."""

from __future__ import annotations

import io
from typing import BinaryIO

#: Chunk size for streamed uploads and downloads: large enough for throughput,
#: small enough that a 2 GiB object moves with flat memory.
DEFAULT_CHUNK_SIZE = 8 * 1024 * 1024


class LimitedReader(io.RawIOBase):
    """A read-only, seekable view of the first ``limit`` bytes of a file, so a log
    that grows during its upload is uploaded exactly as long as it was stat'ed."""

    def __init__(self, fh: BinaryIO, limit: int) -> None:
        super().__init__()
        self._fh = fh
        self._limit = limit
        self._base = fh.tell()

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._fh.tell() - self._base

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_SET:
            target = offset
        elif whence == io.SEEK_CUR:
            target = self.tell() + offset
        elif whence == io.SEEK_END:
            target = self._limit + offset
        else:
            raise ValueError(f"invalid whence {whence}")
        target = max(0, min(target, self._limit))
        self._fh.seek(self._base + target)
        return target

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        remaining = self._limit - self.tell()
        if remaining <= 0:
            return 0
        view = memoryview(buffer)[: min(len(buffer), remaining)]
        return self._fh.readinto(view)  # type: ignore[attr-defined,no-any-return]

    def read(self, size: int = -1) -> bytes:
        remaining = self._limit - self.tell()
        if remaining <= 0:
            return b""
        if size is None or size < 0 or size > remaining:
            size = remaining
        return self._fh.read(size)


def read_full(stream: BinaryIO, size: int) -> bytes:
    """Up to ``size`` bytes, fewer only at end of stream: raw streams and pipes may
    return short reads, which SDKs sizing chunks by one ``read()`` mistake for EOF."""
    parts: list[bytes] = []
    remaining = size
    while remaining > 0:
        chunk = stream.read(remaining)
        if not chunk:
            break
        parts.append(chunk)
        remaining -= len(chunk)
    return b"".join(parts)
