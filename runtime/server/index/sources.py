"""The stored objects a build reads, and bounded parallel reading of them.

Reads run in a thread pool (I/O and zlib release the GIL) and are consumed in
listing order with at most ``2 * workers`` objects in flight, so memory stays
bounded and a build is deterministic. Objects above ``STREAM_ABOVE`` bytes (the
collector writes ~10k-event objects of a few MB, but other writers may not) are
not prefetched: :func:`stream_lines` reads them in chunks, whole lines at a time.
"""

from __future__ import annotations

import logging
import zlib
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from runtime.server.index.fingerprint import is_jobs_snapshot, is_log_events
from runtime.server.replay.decode import gunzip
from runtime.storage.base import ObjectInfo, ObjectStore
from runtime.storage.errors import StorageError
from runtime.storage.session_keys import JobEventFile, is_readable_event_file, parse_session_key, relative_key

logger = logging.getLogger(__name__)

STREAM_ABOVE = 64 * 1024 * 1024
STREAM_CHUNK = 16 * 1024 * 1024


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
    """The whole object; with ``streaming``, objects above STREAM_ABOVE are left to
    :func:`stream_lines` (``Read.streamed``)."""
    if streaming and info.size > STREAM_ABOVE:
        return Read(info, None, streamed=True)
    try:
        data = store.get_bytes(info.key)
    except (StorageError, OSError) as exc:
        logger.warning("cannot read %s: %s", info.key, exc)
        return Read(info, None)
    if info.key.endswith(".gz"):
        data, ok = gunzip(data)
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


def stream_lines(store: ObjectStore, info: ObjectInfo) -> Iterator[bytes]:
    """A big object as blobs of whole lines (gunzipped by the ``.gz`` suffix). A
    legacy JSON array cannot be split: it is yielded whole. Raises StorageError or
    zlib.error like the underlying reads."""
    inflate = _Gunzip().feed if info.key.endswith(".gz") else None
    carry = b""
    array: list[bytes] | None = None
    started = False
    for chunk in store.iter_chunks(info.key, STREAM_CHUNK):
        data = inflate(chunk) if inflate is not None else chunk
        if not started and data.strip():
            started = True
            if data.lstrip()[:1] == b"[":
                array = []  # a legacy array: collected whole
        if array is not None:
            array.append(data)
            continue
        data = carry + data
        cut = data.rfind(b"\n") + 1
        carry = data[cut:]
        if cut:
            yield data[:cut]
    if array is not None:
        yield b"".join(array)
    elif carry:
        yield carry


class _Gunzip:
    """Incremental gunzip across chunk and gzip-member boundaries."""

    def __init__(self) -> None:
        self._inflater = zlib.decompressobj(wbits=31)

    def feed(self, chunk: bytes) -> bytes:
        out = [self._inflater.decompress(chunk)]
        while self._inflater.eof and self._inflater.unused_data:  # concatenated members
            rest = self._inflater.unused_data.lstrip(b"\0")
            self._inflater = zlib.decompressobj(wbits=31)
            if rest:
                out.append(self._inflater.decompress(rest))
        return b"".join(out)
