"""Reading a byte window of a log object: last N lines, or all of it streamed.

Everything goes through a ``read(offset, length) -> bytes`` callable (a ranged GET),
so a 2 GiB worker log never sits in memory: a tail reads backwards in growing
chunks until it has N lines, a whole-file answer is streamed chunk by chunk.

Line semantics follow the live dashboard: the answer is the raw bytes from the
start of the N-th last line to the end of the window, so the file's trailing
newline is kept (KubeRay's Go history server strips it and fails on lines over 64 KiB).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator

logger = logging.getLogger(__name__)

Reader = Callable[[int, int], bytes]

FIRST_CHUNK = 64 * 1024
MAX_CHUNK = 8 * 1024 * 1024
STREAM_CHUNK = 1024 * 1024
#: A tail never buffers more than this; beyond it the answer starts at the first
#: line boundary inside the last MAX_TAIL_BYTES (logged). 10 000 lines of 1.6 KiB fit.
#: A request holds it about three times over (chunks, joined, ANSI-filtered), and a
#: Ray job chooses how long its lines are: 64 MiB let eight tails of one 1 GiB line
#: hold 1.5 GiB of one worker.
MAX_TAIL_BYTES = 16 * 1024 * 1024

#: SGR sequences (colours), the ones Ray's loggers emit; what ``filter_ansi_code`` removes.
ANSI_SGR = re.compile(rb"\x1b\[[0-9;]*m")
#: The start of an SGR sequence that a later chunk may complete.
_SGR_PREFIX = re.compile(rb"\x1b(?:\[[0-9;]*)?")
#: Longest unfinished sequence held back between chunks. Real SGR sequences are
#: a few dozen bytes; anything longer is not a colour code and is passed through
#: unfiltered, as Ray's dashboard does (it filters each chunk on its own and never
#: holds anything back). Bounding it keeps the filter linear: ``ESC [`` followed by
#: 96 MiB of digits used to be re-scanned on every chunk (quadratic, 9.7 s).
MAX_PENDING_SGR = 256


def tail_window(
    read: Reader,
    start: int,
    end: int,
    lines: int,
    *,
    first_chunk: int = FIRST_CHUNK,
    max_chunk: int = MAX_CHUNK,
    max_bytes: int = MAX_TAIL_BYTES,
) -> bytes:
    """The last ``lines`` lines of bytes ``[start, end)``, reading from the end.

    A trailing ``\\n`` ends the last line (it does not start an empty one).
    """
    if lines <= 0:
        raise ValueError("lines must be positive")
    if end <= start:
        return b""
    chunks: list[bytes] = []  # newest first
    pos = end
    found = 0
    size = first_chunk
    cut: int | None = None  # offset of the first byte of the answer, once known
    while pos > start:
        length = min(size, pos - start)
        if end - (pos - length) > max_bytes:
            length = max(0, pos - max(start, end - max_bytes))
            if length == 0:
                break
        offset = pos - length
        chunk = read(offset, length)
        if len(chunk) != length:
            raise OSError(f"short read at {offset}: wanted {length} bytes, got {len(chunk)}")
        # The window's final byte never counts as a line break: it ends the last line.
        scan_end = len(chunk) - 1 if pos == end else len(chunk)
        newlines = chunk.count(b"\n", 0, scan_end)
        if found + newlines >= lines:
            index = scan_end
            for _ in range(lines - found):
                index = chunk.rindex(b"\n", 0, index)
            cut = offset + index + 1
            chunks.append(chunk[index + 1 :])
            break
        found += newlines
        chunks.append(chunk)
        pos = offset
        size = min(size * 2, max_chunk)
    data = b"".join(reversed(chunks))
    chunks.clear()  # the pieces go before the answer is filtered or sent
    if cut is None and pos > start:
        # Hit max_bytes: drop a partial first line so the answer starts cleanly.
        logger.warning("log tail capped at %d bytes (%d of %d lines found)", max_bytes, found, lines)
        if read(pos - 1, 1) != b"\n":
            newline = data.find(b"\n")
            data = data[newline + 1 :] if 0 <= newline < len(data) - 1 else data
    return data


def iter_window(read: Reader, start: int, end: int, chunk_size: int = STREAM_CHUNK) -> Iterator[bytes]:
    """Bytes ``[start, end)`` in chunks; a short read ends the stream early."""
    pos = start
    while pos < end:
        chunk = read(pos, min(chunk_size, end - pos))
        if not chunk:
            logger.warning("log object ended at %d, %d bytes before the expected end", pos, end - pos)
            return
        pos += len(chunk)
        yield chunk


def filter_ansi(data: bytes) -> bytes:
    """Remove colour sequences (``ESC [ digits;... m``)."""
    return ANSI_SGR.sub(b"", data)


class AnsiFilter:
    """Incremental :func:`filter_ansi` for a chunked stream: a sequence split
    across two chunks is held back until the next chunk completes it, at most
    :data:`MAX_PENDING_SGR` bytes of it (so every byte is scanned a bounded
    number of times)."""

    def __init__(self, max_pending: int = MAX_PENDING_SGR) -> None:
        self.max_pending = max_pending
        self._pending = b""

    def feed(self, chunk: bytes) -> bytes:
        data = self._pending + chunk  # the pending part is bounded: O(len(chunk))
        # An unfinished sequence contains no ESC after its first byte, so only the
        # last ESC can start one, and only if it lies within the hold-back window.
        start = data.rfind(b"\x1b", max(0, len(data) - self.max_pending))
        if start >= 0 and _SGR_PREFIX.fullmatch(data, start):
            self._pending = data[start:]
            data = data[:start]
        else:
            self._pending = b""
        return filter_ansi(data)

    def flush(self) -> bytes:
        rest, self._pending = self._pending, b""
        return rest


def filtered(chunks: Iterator[bytes], enabled: bool) -> Iterator[bytes]:
    """``chunks`` with ANSI colour sequences removed when ``enabled``."""
    if not enabled:
        yield from chunks
        return
    ansi = AnsiFilter()
    for chunk in chunks:
        out = ansi.feed(chunk)
        if out:
            yield out
    rest = ansi.flush()
    if rest:
        yield rest
