"""Uploading rotated spool files to storage, under the keys KubeRay's Go collector uses.

A few worker threads take ready files in order. A failed upload is not dropped:
it waits (exponential backoff, capped) and tries again, whatever the error, since
a missing permission or bucket is often fixed while the pod runs (IAM bindings
take minutes to propagate). The local file is deleted only after the upload
succeeded; anything still waiting at exit is resumed by the next process.
"""

from __future__ import annotations

import gzip
import heapq
import itertools
import logging
import os
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from runtime.collector.events.parse import RejectedEvent
from runtime.collector.events.quarantine import Quarantine
from runtime.collector.events.spool import Spool
from runtime.collector.events.spool_files import NotRegularFileError, ReadyFile, open_regular
from runtime.collector.metrics import CollectorMetrics
from runtime.storage.base import ObjectStore
from runtime.storage.errors import InvalidKeyError, StorageError
from runtime.storage.layout import ClusterRef, KeyLayout, event_file_name

logger = logging.getLogger(__name__)

#: Quarantine reason of events in a spool file no storage key can hold.
UNSTORABLE = "unstorable_key"
#: Lines handed to the quarantine at once when a file is set aside (bounds memory).
_CHUNK_LINES = 1000

INITIAL_BACKOFF = 1.0
MAX_BACKOFF = 60.0
NODE_WAIT = 2.0


class EventUploader:
    """Moves ready spool files to ``.../{node}/{node_events|job_events/{job}}/``."""

    def __init__(
        self,
        *,
        store: ObjectStore,
        layout: KeyLayout,
        cluster: ClusterRef,
        spool: Spool,
        node_id: Callable[[], str | None],
        metrics: CollectorMetrics,
        quarantine: Quarantine,
        compression: bool = False,
        workers: int = 2,
    ) -> None:
        """``quarantine``: where the events of a file no storage key can hold go."""
        self.store = store
        self.quarantine = quarantine
        self.layout = layout
        self.cluster = cluster
        self.spool = spool
        self.node_id = node_id
        self.metrics = metrics
        self.compression = compression
        self.workers = workers
        self._heap: list[tuple[float, int, ReadyFile, int]] = []  # (due, seq, file, failures)
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._in_flight = 0
        self._stopping = False
        self._final = False
        self._threads: list[threading.Thread] = []
        self._last_error: str | None = None

    # -------------------------------------------------------------- queueing
    def submit(self, ready: ReadyFile) -> None:
        """Queue a file now (called by the spool on rotation; never blocks)."""
        self._push(ready, failures=0, delay=0.0)

    def _push(self, ready: ReadyFile, failures: int, delay: float) -> None:
        with self._cond:
            heapq.heappush(self._heap, (time.monotonic() + delay, next(self._seq), ready, failures))
            self._cond.notify()

    @property
    def pending(self) -> int:
        with self._cond:
            return len(self._heap) + self._in_flight

    # ------------------------------------------------------------ lifecycle
    def start(self) -> None:
        for index in range(self.workers):
            thread = threading.Thread(target=self._work, name=f"event-upload-{index}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def drain(self, deadline: float) -> bool:
        """Final phase: every waiting file gets an immediate attempt (backoff is
        skipped), until the queue is empty or the deadline (monotonic) passes.
        Returns True if nothing is left."""
        with self._cond:
            self._final = True
            self._heap = [(0.0, seq, ready, failures) for _due, seq, ready, failures in self._heap]
            heapq.heapify(self._heap)
            self._cond.notify_all()
            while (self._heap or self._in_flight) and time.monotonic() < deadline:
                self._cond.wait(timeout=min(0.2, max(0.0, deadline - time.monotonic())))
            left = len(self._heap) + self._in_flight
            self._stopping = True
            self._cond.notify_all()
        if left:
            logger.error("%d event files not uploaded before the shutdown deadline; they stay on local disk", left)
        return left == 0

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the workers, waiting at most ``timeout`` seconds in all: one blocked in
        a storage call is left behind (its file stays on disk for the next process)."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        until = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(timeout=max(0.0, until - time.monotonic()))

    # --------------------------------------------------------------- workers
    def _next(self) -> tuple[ReadyFile, int] | None:
        with self._cond:
            while not self._stopping:
                if self._heap:
                    due = self._heap[0][0]
                    now = time.monotonic()
                    if due <= now:
                        _due, _seq, ready, failures = heapq.heappop(self._heap)
                        self._in_flight += 1
                        return ready, failures
                    self._cond.wait(timeout=due - now)
                else:
                    self._cond.wait()
            return None

    def _done(self) -> None:
        with self._cond:
            self._in_flight -= 1
            self._cond.notify_all()

    def _work(self) -> None:
        while (item := self._next()) is not None:
            ready, failures = item
            try:
                self._upload(ready, failures)
            except Exception:  # a worker must never die; the file stays queued
                logger.exception("unexpected error uploading %s", ready.path)
                self._retry(ready, failures + 1)
            finally:
                self._done()

    def _upload(self, ready: ReadyFile, failures: int) -> None:
        node = ready.node or self.node_id()
        if node is None:
            self._retry(ready, failures, reason="node id not known yet")
            return
        try:
            key = self._key(ready, node)  # before compressing: an unstorable file is not worth it
        except InvalidKeyError as exc:
            self.metrics.upload_failures.labels(what="events", kind="InvalidKey").inc()
            self._set_aside(ready, exc)
            return
        started = time.monotonic()
        try:
            if self.compression and not ready.compressed:
                ready = self.spool.compress(ready)
                key = self._key(ready, node)
            with open(open_regular(ready.path), "rb") as fh:
                self.store.put_open_file(key, fh)  # the file checked is the file sent, up to its size now
        except NotRegularFileError as exc:
            self.metrics.upload_failures.labels(what="events", kind="NotRegularFileError").inc()
            logger.error("dropping %s from the event spool, never uploaded: %s", ready.path, exc.strerror)
            self.spool.release(ready)
            return
        except (StorageError, OSError) as exc:
            self.metrics.upload_failures.labels(what="events", kind=type(exc).__name__).inc()
            if not os.path.lexists(ready.path):  # deleted under the spool: nothing to retry
                logger.error("spool file %s vanished before its upload; its events are lost", ready.path)
                self.spool.release(ready)
                return
            self._retry(ready, failures + 1, reason=str(exc))
            return
        self.metrics.upload_seconds.labels(what="events").observe(time.monotonic() - started)
        self.metrics.event_files_uploaded.inc()
        if ready.lines is not None:
            self.metrics.events_uploaded.inc(ready.lines)
        self.spool.release(ready)
        if self._last_error is not None:
            logger.info("event uploads recovered")
            self._last_error = None
        logger.debug("uploaded %s -> %s", ready.path.name, key)

    def _set_aside(self, ready: ReadyFile, problem: InvalidKeyError) -> None:
        """A file no key can hold (e.g. spooled by an older version with looser
        rules) would wait forever and hold its share of the spool budget, across
        restarts too, until every batch got 503: its events go to the quarantine
        (bounded, as other invalid events) and the file leaves the spool."""
        moved = dropped = 0
        try:
            for chunk in _line_chunks(ready.path):
                rejected = [RejectedEvent(reason=UNSTORABLE, raw=line) for line in chunk]
                kept = self.quarantine.add(rejected)
                moved += kept
                dropped += len(rejected) - kept
        except (OSError, EOFError, zlib.error) as exc:  # unreadable: nothing to set aside
            logger.error("reading unstorable event file %s failed: %s", ready.path, exc)
        if moved or dropped:
            self.metrics.events_quarantined.labels(reason=UNSTORABLE).inc(moved + dropped)
        self.spool.release(ready)
        logger.error(
            "event file %s cannot be stored (%s): %d events moved to the quarantine file %s%s; "
            "the file was removed from the spool",
            ready.path,
            problem,
            moved,
            self.quarantine.path,
            f", {dropped} more dropped (quarantine full)" if dropped else "",
        )

    def _key(self, ready: ReadyFile, node: str) -> str:
        name = event_file_name(node, ready.opened_ns, compressed=ready.compressed)
        if ready.job is None:
            return self.layout.node_events_key(self.cluster, ready.session, node, name)
        return self.layout.job_events_key(self.cluster, ready.session, node, ready.job, name)

    def _retry(self, ready: ReadyFile, failures: int, reason: str = "") -> None:
        if self._final:
            delay = 0.5  # shutting down: keep trying until the deadline, without spinning
        elif failures == 0:
            delay = NODE_WAIT  # nothing failed, the node id is just not known yet
        else:
            delay = min(MAX_BACKOFF, INITIAL_BACKOFF * 2 ** (failures - 1))
        if reason and reason != self._last_error:
            logger.warning("event upload postponed %.0fs: %s", delay, reason)
            self._last_error = reason
        self._push(ready, failures, delay)


def _line_chunks(path: Path) -> Iterator[list[bytes]]:
    """A spool file's lines (gzip or plain), a bounded number at a time."""
    with open(open_regular(path), "rb") as raw:
        fh: Iterable[bytes] = gzip.GzipFile(fileobj=raw, mode="rb") if path.name.endswith(".gz") else raw
        chunk: list[bytes] = []
        for line in fh:
            if line.strip():
                chunk.append(line.rstrip(b"\n"))
            if len(chunk) >= _CHUNK_LINES:
                yield chunk
                chunk = []
        if chunk:
            yield chunk
