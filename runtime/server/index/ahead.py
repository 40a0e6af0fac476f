"""Index finished sessions before anyone asks (``--index-ahead``).

* **Finished**: a newer session of the same cluster is stored (a cluster runs one
  session at a time), or live discovery answered and the cluster is not running;
  the rules of ``ray-history gc`` (:mod:`runtime.storage.retention`). Where live
  discovery cannot answer (the Kubernetes API fails or may not be asked), a session the
  head collector marked ended (``session_ended.json``, :mod:`runtime.server.queries.ended`)
  or none of whose objects changed for ``QUIET_SECONDS`` is taken as finished too: a wrong guess
  costs one build, since an index whose objects changed is rebuilt on the next request
  (gc, which deletes, never uses this rule). A session that may still be running is
  left to on-demand indexing, as before.
* **Which first**: newest first, created within ``--index-ahead-max-age``, not
  indexed yet, not failed (or dropped) in the last ``FAILED_RETRY_SECONDS``.
* **Bounded**: at most ``--index-ahead-workers`` builds at once on this cache
  directory, whatever the number of gunicorn workers: a build holds one of that
  many ``flock`` slots until the build is over, however long it takes. Builds run
  at a lower CPU priority (``jobs.AHEAD_NICE``), so that requests and the builds
  users wait for come first.
* **Within the cache**: nothing is indexed ahead while the indexes take
  ``CACHE_SHARE`` of ``--cache-max-size``, and a build ahead never evicts what people
  use: an index built ahead that does not fit is deleted instead (and not built ahead
  again for ``FAILED_RETRY_SECONDS``).
* **A user request jumps the queue**: it starts its own build at once (or joins the
  one under way for its session); the queue never delays it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from runtime.server.index.locks import SLOTS_DIR, slot
from runtime.storage.layout import ClusterRef

if TYPE_CHECKING:
    from runtime.server.index.cache import IndexCache
    from runtime.server.live.discovery import LiveDirectory

logger = logging.getLogger(__name__)

#: How often the stored sessions are scanned for finished ones not yet indexed.
SCAN_SECONDS = 30.0
#: A session whose build failed (or whose index did not fit the cache) is tried again after this long.
FAILED_RETRY_SECONDS = 3600.0
SLOT_PREFIX = "index-ahead-slot-"
#: Builds ahead stop while the indexes take this share of ``--cache-max-size``.
CACHE_SHARE = 0.8
#: With liveness unknown, a session whose objects have not changed for this long is
#: taken as finished. The collector ships events within seconds and logs within a
#: minute of their writing, so half an hour of silence is an ended session or an idle one.
QUIET_SECONDS = 1800.0
#: How often the end marker of a session that may still run is looked for again.
MARKER_RECHECK_SECONDS = 120.0
#: How often a thread waiting for its build looks whether :meth:`IndexAhead.stop` was called.
STOP_CHECK_SECONDS = 0.2


class StoredSession(Protocol):
    """One stored session (:class:`runtime.server.sessions.StoredSession`)."""

    @property
    def cluster(self) -> ClusterRef: ...
    @property
    def session(self) -> str: ...
    @property
    def created_at(self) -> datetime: ...


class IndexAhead:
    """The queue of finished sessions to index, and the threads that index them."""

    def __init__(
        self,
        cache: IndexCache,
        sessions: Callable[[], Sequence[StoredSession]],
        live: LiveDirectory,
        *,
        workers: int,
        max_age: float,
        quiet: float = QUIET_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.cache, self.sessions, self.live = cache, sessions, live
        self.workers = max(1, workers)
        self.max_age = max_age
        self.quiet = quiet
        #: session -> (newest object's time, when to look again): one listing per session
        #: per quiet period, not one per scan.
        self._quiet_checks: dict[tuple[str, str, str], tuple[float, float]] = {}
        self._marker_checks: dict[tuple[str, str, str], tuple[bool, float]] = {}  # -> (marked, when looked)
        self._clock = clock
        self._guard = threading.Lock()
        self._claimed: set[tuple[str, str, str]] = set()
        self._failed: dict[tuple[str, str, str], float] = {}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # ------------------------------------------------------------ the queue
    def candidates(self) -> list[StoredSession]:
        """Finished sessions to index, newest first."""
        sessions = self.sessions()  # newest first
        listing = self.live.list_clusters()
        live = {(c.namespace, c.name) for c in listing.clusters} if listing.available else None
        newest: dict[tuple[str, str], float] = {}
        for stored in sessions:
            key = (stored.cluster.namespace, stored.cluster.name)
            newest[key] = max(newest.get(key, 0.0), stored.created_at.timestamp())
        now = self._clock()
        found = []
        considered: set[tuple[str, str, str]] = set()
        for stored in sessions:  # newest first
            started = stored.created_at.timestamp()
            cluster = (stored.cluster.namespace, stored.cluster.name)
            if now - started > self.max_age:
                continue
            considered.add(_key(stored))
            finished = newest[cluster] > started or (live is not None and cluster not in live)
            if not finished and live is None:
                finished = self._marked_ended(stored, now) or self._quiet_since(stored, now)
            if (
                not finished
                or self._failed_lately(stored, now)
                or self.cache.is_indexed(stored.cluster, stored.session)
            ):
                continue
            found.append(stored)
        self._forget_all_but(considered)
        return found

    def index_next(self) -> StoredSession | None:
        """Index the newest candidate nobody else here is indexing, if a slot is free;
        returns it (None: nothing to do, or no free slot)."""
        with slot(Path(self.cache.dir) / SLOTS_DIR, SLOT_PREFIX, self.workers) as free:
            if not free or self._cache_nearly_full():
                return None
            stored = self._claim()
            if stored is None:
                return None
            try:
                self._index(stored)
            finally:
                with self._guard:
                    self._claimed.discard(_key(stored))
            return stored

    def _index(self, stored: StoredSession) -> None:
        """Build one index ahead and wait until the build is over (the caller holds the
        slot meanwhile), or until :meth:`stop`."""
        name = f"{stored.cluster.namespace}/{stored.cluster.name} {stored.session}"
        try:
            job = self.cache.build_ahead(stored.cluster, stored.session)
        except Exception as exc:  # a session gone from storage, a storage outage
            self._failed_ahead(stored, name, exc)
            return
        if job is not None:
            if not self._wait(job.done):
                logger.info("stopped waiting for the build ahead of %s; it goes on", name)
                return  # still building is no failure
            if job.error is not None:
                self._failed_ahead(stored, name, job.error)
                return
        if self.cache.is_indexed(stored.cluster, stored.session):
            logger.info("indexed ahead: %s", name)
        else:  # it did not fit the cache (IndexCache.build_ahead): not again at once
            logger.info("the index of %s built ahead was not kept: the cache is full", name)
            self._retry_later(stored)

    def _wait(self, done: threading.Event) -> bool:
        """Whether ``done`` was set; False when :meth:`stop` was called first."""
        while not done.wait(STOP_CHECK_SECONDS):
            if self._stop.is_set():
                return False
        return True

    # ----------------------------------------------------------- the threads
    def start(self) -> None:
        for n in range(self.workers):
            thread = threading.Thread(target=self._loop, name=f"index-ahead-{n}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the threads, waiting at most ``timeout`` seconds in all: a thread
        waiting for a build lets go within ``STOP_CHECK_SECONDS`` (the build goes on in
        its own thread), one scanning the sessions when the scan ends."""
        self._stop.set()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                busy = self.index_next() is not None
            except Exception:  # a storage outage while scanning: try again later
                logger.exception("scanning sessions to index ahead failed")
                busy = False
            if not busy:
                self._stop.wait(SCAN_SECONDS)

    # -------------------------------------------------------------- helpers
    def _marked_ended(self, stored: StoredSession, now: float) -> bool:
        """Whether the head collector stored the session's end marker (one lookup per
        session per ``MARKER_RECHECK_SECONDS``)."""
        key = _key(stored)
        with self._guard:
            known = self._marker_checks.get(key)
        if known is not None and now - known[1] < MARKER_RECHECK_SECONDS:
            return known[0]
        marked = self.cache.store.exists(self.cache.layout.session_ended_key(stored.cluster, stored.session))
        with self._guard:
            self._marker_checks[key] = (marked, now)
        return marked

    def _quiet_since(self, stored: StoredSession, now: float) -> bool:
        """Whether none of the session's objects changed for ``quiet`` seconds."""
        key = _key(stored)
        with self._guard:
            known = self._quiet_checks.get(key)
        if known is not None and now < known[1]:
            return now - known[0] >= self.quiet
        prefix = self.cache.layout.session_prefix(stored.cluster, stored.session)
        times = [info.updated.timestamp() for info in self.cache.store.walk(prefix) if info.updated is not None]
        if not times:  # the storage reports no modification times: cannot tell
            return False
        newest = max(times)
        quiet = now - newest >= self.quiet
        # Once quiet, look again only if the index is not built by then (new objects
        # would make it stale anyway); while busy, when the silence could have lasted.
        recheck = now + self.quiet if quiet else newest + self.quiet
        with self._guard:
            self._quiet_checks[key] = (newest, recheck)
        return quiet

    def _forget_all_but(self, considered: set[tuple[str, str, str]]) -> None:
        """Drop what was noted about sessions no longer listed (deleted by ``gc``) or past
        ``max_age``: a server running for months would otherwise keep them all."""
        with self._guard:
            for notes in (self._quiet_checks, self._marker_checks, self._failed):
                for key in [key for key in notes if key not in considered]:
                    del notes[key]

    def _claim(self) -> StoredSession | None:
        for stored in self.candidates():
            with self._guard:
                if _key(stored) not in self._claimed:
                    self._claimed.add(_key(stored))
                    return stored
        return None

    def _cache_nearly_full(self) -> bool:
        """Indexing ahead must not evict the indexes people use: it stops at
        ``CACHE_SHARE`` of ``--cache-max-size``."""
        bound = self.cache.config.cache_max_bytes
        return bound > 0 and self.cache.used_bytes() >= bound * CACHE_SHARE

    def _failed_ahead(self, stored: StoredSession, name: str, error: BaseException) -> None:
        logger.warning("indexing %s ahead failed: %s", name, error)  # a request for it answers the error
        self._retry_later(stored)

    def _retry_later(self, stored: StoredSession) -> None:
        with self._guard:
            self._failed[_key(stored)] = self._clock()

    def _failed_lately(self, stored: StoredSession, now: float) -> bool:
        with self._guard:
            failed_at = self._failed.get(_key(stored))
        return failed_at is not None and now - failed_at < FAILED_RETRY_SECONDS


def _key(stored: StoredSession) -> tuple[str, str, str]:
    return stored.cluster.namespace, stored.cluster.name, stored.session
