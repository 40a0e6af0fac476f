"""The stored objects a build reads, and bounded parallel reading of them.

Reads run in a thread pool (I/O and zlib release the GIL) and are consumed in
listing order with at most ``2 * workers`` objects in flight, so memory stays
bounded and a build is deterministic. Objects above ``STREAM_ABOVE`` bytes (the
collector writes ~10k-event objects of a few MB, but other writers may not) are
not prefetched: :func:`stream_lines` reads them in chunks, whole lines at a time.

Writers are less trusted than the server, so what a ``.gz`` object inflates to is
bounded (:func:`~runtime.server.replay.decode.inflate_allowance`: 100x its stored
size, at least 1 MiB, at most 1 GiB): past it the object is a decompression bomb,
skipped with a warning and counted as a gzip error (streamed, what was routed before
stays, as for a corrupt stream). One is held whole only up to ``WHOLE_INFLATED_MAX``
inflated bytes, else streamed; a streamed line over ``STREAM_MAX_LINE`` is dropped
and counted as a bad line.
"""

from __future__ import annotations

import logging
import zlib
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from runtime.server.index.fingerprint import is_jobs_snapshot, is_log_events
from runtime.server.replay.decode import INFLATE_STEP, InflateLimitError, gunzip, inflate_allowance
from runtime.storage.base import ObjectInfo, ObjectStore
from runtime.storage.errors import StorageError
from runtime.storage.session_keys import JobEventFile, is_readable_event_file, parse_session_key, relative_key

logger = logging.getLogger(__name__)

STREAM_ABOVE = 64 * 1024 * 1024
STREAM_CHUNK = 16 * 1024 * 1024
#: A ``.gz`` object read whole is held as at most this many inflated bytes (the
#: collector's objects, 100 MiB + one 32 MiB request at most, fit twice); a bigger
#: one, within its allowance, is streamed instead (read again, a chunk at a time).
WHOLE_INFLATED_MAX = 256 * 1024 * 1024
#: The longest line a stream keeps: the longest a plain object read whole can hold
#: (so streamed and whole reads agree); the collector's lines are at most one
#: request (32 MiB). A line still unfinished past it (checked between pieces, so
#: one piece more may pass) is dropped, up to its newline, as a bad line.
STREAM_MAX_LINE = STREAM_ABOVE
#: JSON event objects compress ~10-16x: what a gzipped one likely inflates to, per
#: stored byte (sizes the build: in-process or a child, task-shard workers, spilling).
GZIP_RATIO = 10


def likely_size(info: ObjectInfo) -> int:
    """The bytes an event object likely holds once read (a ``.gz`` one inflated)."""
    return info.size * GZIP_RATIO if info.key.endswith(".gz") else info.size


@dataclass
class Sources:
    events: list[ObjectInfo] = field(default_factory=list)
    logs: list[ObjectInfo] = field(default_factory=list)  # <node>/logs/events/event_*.log
    snapshot: ObjectInfo | None = None  # fetched_endpoints/restful__api__jobs
    snapshot_data: bytes | None = None


@dataclass(frozen=True)
class Read:
    info: ObjectInfo
    data: bytes | None  # None: unreadable (or, with ``streamed``, not read yet)
    gzip_ok: bool = True
    streamed: bool = False  # big object: read it with stream_lines()


@dataclass
class StreamCounts:
    """What :func:`stream_lines` dropped."""

    long_lines: int = 0  # lines over STREAM_MAX_LINE


def classify(listing: Sequence[ObjectInfo], prefix: str) -> Sources:
    sources = Sources()
    job_events: set[str] = set()
    for info in listing:
        item = parse_session_key(relative_key(info.key, prefix))
        if is_readable_event_file(item):
            sources.events.append(info)
            if isinstance(item, JobEventFile):
                job_events.add(info.key)
        elif is_log_events(item):
            sources.logs.append(info)
        elif is_jobs_snapshot(item):
            sources.snapshot = info
    # Job-event objects before node-event objects, each in key order (as KubeRay's Go history server).
    sources.events.sort(key=lambda info: (0 if info.key in job_events else 1, info.key))
    return sources


def read_one(store: ObjectStore, info: ObjectInfo, streaming: bool = False) -> Read:
    """The whole object (a ``.gz`` one inflated); with ``streaming``, objects above
    STREAM_ABOVE stored, or WHOLE_INFLATED_MAX inflated, are left to
    :func:`stream_lines` (``Read.streamed``). A ``.gz`` object inflating past its
    allowance is a bomb: ``b""`` with ``gzip_ok`` False."""
    if streaming and info.size > STREAM_ABOVE:
        return Read(info, None, streamed=True)
    try:
        data = store.get_bytes(info.key)
    except (StorageError, OSError) as exc:
        logger.warning("cannot read %s: %s", info.key, exc)
        return Read(info, None)
    if info.key.endswith(".gz"):
        allowance = inflate_allowance(info.size)
        try:
            data, ok = gunzip(data, min(allowance, WHOLE_INFLATED_MAX))
        except InflateLimitError as exc:
            if streaming and allowance > WHOLE_INFLATED_MAX:
                return Read(info, None, streamed=True)  # too big to hold: streamed, its allowance still applies
            logger.warning("%s: skipped as a decompression bomb, its gzip stream %s", info.key, exc)
            return Read(info, b"", gzip_ok=False)  # counted as a gzip error and a bad line
        if not ok:
            logger.warning("%s: gzip stream is corrupt or truncated; using what decoded", info.key)
        return Read(info, data, ok)
    return Read(info, data)


def read_all(
    pool: ThreadPoolExecutor, store: ObjectStore, infos: Sequence[ObjectInfo], workers: int, streaming: bool = True
) -> Iterator[Read]:
    window = max(2, 2 * workers)
    pending: deque[Future[Read]] = deque()
    todo = iter(infos)
    for info in todo:
        pending.append(pool.submit(read_one, store, info, streaming))
        if len(pending) >= window:
            break
    while pending:
        read = pending.popleft().result()
        following = next(todo, None)
        if following is not None:
            pending.append(pool.submit(read_one, store, following, streaming))
        yield read


def stream_lines(store: ObjectStore, info: ObjectInfo, counts: StreamCounts | None = None) -> Iterator[bytes]:
    """A big object as blobs of whole lines (gunzipped by the ``.gz`` suffix, within
    its inflate allowance). A legacy JSON array cannot be split: it is yielded whole,
    or dropped past WHOLE_INFLATED_MAX, what :func:`read_one` holds of an object
    (counted in ``counts`` like a line over STREAM_MAX_LINE).
    Raises StorageError or zlib.error (InflateLimitError past the allowance) like the
    underlying reads."""
    pieces: Iterable[bytes] = store.iter_chunks(info.key, STREAM_CHUNK)
    if info.key.endswith(".gz"):
        pieces = _inflated(pieces, inflate_allowance(info.size))
    pieces = iter(pieces)
    carry = b""
    started = False
    skipping = False  # inside a line over STREAM_MAX_LINE: dropped up to its newline
    for piece in pieces:
        data = piece
        if not started and data.strip():
            started = True
            if data.lstrip()[:1] == b"[":
                yield from _whole_array(data, pieces, info.key, counts)
                return
        if skipping:
            end = data.find(b"\n")
            if end < 0:
                continue
            data = data[end + 1 :]
            skipping = False
        data = carry + data
        cut = data.rfind(b"\n") + 1
        carry = data[cut:]
        if cut:
            yield data[:cut]
        if len(carry) > STREAM_MAX_LINE:
            logger.warning("%s: dropping a line longer than %d bytes", info.key, STREAM_MAX_LINE)
            carry, skipping = b"", True
            if counts is not None:
                counts.long_lines += 1
    if carry:
        yield carry


def _whole_array(first: bytes, rest: Iterator[bytes], key: str, counts: StreamCounts | None) -> Iterator[bytes]:
    """A legacy JSON array, joined; nothing past WHOLE_INFLATED_MAX (one unsplittable value)."""
    array = [first]
    size = len(first)
    for piece in rest:
        size += len(piece)
        if size > WHOLE_INFLATED_MAX:
            logger.warning("%s: dropping a JSON array longer than %d bytes", key, WHOLE_INFLATED_MAX)
            if counts is not None:
                counts.long_lines += 1
            return
        array.append(piece)
    yield b"".join(array)


def _inflated(chunks: Iterable[bytes], limit: int) -> Iterator[bytes]:
    """Incremental gunzip across chunk and gzip-member boundaries, at most
    INFLATE_STEP bytes at a time; InflateLimitError past ``limit`` bytes in all."""
    inflater = zlib.decompressobj(wbits=31)
    total = 0
    for chunk in chunks:
        pending = chunk
        while True:
            if inflater.eof:  # concatenated members (some writers pad them with NULs)
                pending = (inflater.unused_data + pending).lstrip(b"\0")
                if not pending:
                    break
                inflater = zlib.decompressobj(wbits=31)
            piece = inflater.decompress(pending, INFLATE_STEP)
            total += len(piece)
            if total > limit:
                raise InflateLimitError(f"inflates past {limit} bytes")
            if piece:
                yield piece
            if inflater.eof:  # the rest is in unused_data (unconsumed_tail repeats it)
                pending = b""
                continue
            pending = inflater.unconsumed_tail
            # A full step may leave output inside zlib even with no input left.
            if not pending and len(piece) < INFLATE_STEP:
                break
