"""Build one session's SQLite index by replaying its stored objects once.

* Reads are parallel and bounded (a window of in-flight objects; gunzip runs in
  the reader threads, where zlib releases the GIL) and consumed in listing order,
  so a build is deterministic.
* Task events, nearly all of a session, are routed by task-id range
  (:mod:`runtime.server.replay.route`) to task shards: in-process for a small
  session, else one worker subprocess per core, each replaying and rendering its
  range into its own SQLite file; shard 0 writes the index file itself and the
  others are appended to it in key order, before any index exists. Everything else
  (actors, jobs, nodes, log events, objects) is replayed here. For a big session
  the builder pipes each worker only the first bucket (a sixteenth of the ids) of
  its range and spills the others to disk; the worker replays them one at a time
  (:mod:`runtime.server.index.spill`): its memory is that of a bucket's tasks, not
  of its whole range.
* The file is bulk-loaded (no journal, no syncs), secondary indexes are created
  after the rows are in, meta is written last and the file is switched to WAL so
  readers in other processes can use it. Callers build into a temporary path and
  rename it.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import sqlite3
import threading
import time
import zlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import orjson

from runtime.server.index.cpus import usable_cpus
from runtime.server.index.fingerprint import fingerprints
from runtime.server.index.index_file import INSERT_OBJECT, BuildStats, object_rows, write_meta
from runtime.server.index.pool import WorkerError, WorkerPool
from runtime.server.index.progress import ProgressCallback, no_progress
from runtime.server.index.shard_db import (
    BULK_PRAGMAS,
    INDEX_BUILD_PRAGMA,
    append_shards,
    create_bulk_db,
    split_ddl,
    write_shards,
)
from runtime.server.index.sources import (
    Sources,
    StreamCounts,
    classify,
    likely_size,
    read_all,
    read_one,
    stream_lines,
)
from runtime.server.index.spill import remove_spill_files
from runtime.server.index.tables import insert_actors, insert_jobs, insert_nodes
from runtime.server.load_errors import SessionLoadError
from runtime.server.replay.decode import InflateLimitError
from runtime.server.replay.jobs import merge_jobs, parse_snapshot
from runtime.server.replay.log_events import LogEvents
from runtime.server.replay.route import BUCKETS, Router
from runtime.server.replay.session import SessionReplay, base_ns_for
from runtime.server.replay.shard import ShardResult, TaskShard
from runtime.storage.base import ObjectInfo, ObjectStore
from runtime.storage.errors import StorageError
from runtime.storage.layout import ClusterRef, KeyLayout, session_created_at

logger = logging.getLogger(__name__)

#: Below this many event bytes a build stays in-process (workers take ~0.1 s to start).
PARALLEL_MIN_BYTES = 24 * 1024 * 1024
#: Above this many event bytes per worker, workers spill (~1.5 KB of replay state
#: per task attempt, ~3 KB of events: a worker below it holds at most ~250 MiB).
SPILL_ABOVE_BYTES = 512 * 1024 * 1024
MAX_PROCESSES = 8
#: SQLite sorter threads per worker process while the task indexes are built (the workers are done by then).
SORT_THREADS_PER_PROCESS = 2
_INSERT_LOG_EVENT = "INSERT OR REPLACE INTO log_events (job_id, ts, event_id, event_json) VALUES (?, ?, ?, ?)"


def build_index(
    store: ObjectStore,
    layout: KeyLayout,
    cluster: ClusterRef,
    session: str,
    out_path: Path,
    *,
    listing: Sequence[ObjectInfo] | None = None,
    read_workers: int = 8,
    processes: int | None = None,
    progress: ProgressCallback | None = None,
) -> BuildStats:
    """Replay the session's stored objects into a complete index file at ``out_path``.

    ``processes``: task-shard worker processes (None: one per usable core, the
    container's CPU limit included, for sessions of at least ``PARALLEL_MIN_BYTES``
    of events, else in-process; 0: in-process).
    ``progress(phase, done, total)`` is told how far the build is: event bytes read
    (as stored) of those listed, log-event objects read, then the writing.
    Raises SessionLoadError when event objects were listed but none could be read
    (a storage outage must not be cached as an empty session)."""
    started = time.perf_counter()
    prefix = layout.session_prefix(cluster, session)
    if listing is None:
        listing = list(store.walk(prefix))
    sources = classify(listing, prefix)
    stats = BuildStats(files=len(sources.events))
    # JSON event objects compress ~10-16x: judge gzipped ones by their likely size.
    estimate = sum(likely_size(info) for info in sources.events)
    stats.processes = _processes(processes, estimate)
    spill = stats.processes > 0 and estimate > SPILL_ABOVE_BYTES * stats.processes
    build = _Build(store=store, sources=sources, stats=stats, out_path=out_path, session=session, progress=progress)
    try:
        with _GC_PAUSE:
            build.run(read_workers, started, spill)
        build.write_tables(listing, prefix)
    finally:
        for path in build.shard_paths[1:]:
            _unlink_all(path)
    events_fp, objects_fp = fingerprints(listing, prefix)
    stats.seconds = round(time.perf_counter() - started, 3)
    write_meta(out_path, cluster, session, (events_fp, objects_fp), stats)
    logger.info(
        "indexed session %s: %d events from %d files, %d task attempts in %.2fs (%d worker processes)",
        session,
        stats.events,
        stats.files,
        stats.tasks,
        stats.seconds,
        stats.processes,
    )
    return stats


class _GcPause:
    """No cyclic GC while millions of long-lived containers are created (each full
    collection would walk them all); re-enabled when the last concurrent build ends."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders = 0

    def __enter__(self) -> None:
        with self._lock:
            if self._holders == 0:
                gc.disable()
            self._holders += 1

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._holders -= 1
            if self._holders == 0:
                gc.enable()


_GC_PAUSE = _GcPause()


class _Build:
    """One build's moving parts: the replay of non-task events here, the task shards
    (in-process or workers), the log events."""

    def __init__(
        self,
        *,
        store: ObjectStore,
        sources: Sources,
        stats: BuildStats,
        out_path: Path,
        session: str,
        progress: ProgressCallback | None,
    ):
        self.store, self.sources, self.stats, self.out_path, self.session = store, sources, stats, out_path, session
        self.progress: ProgressCallback = progress or no_progress
        self.replay = SessionReplay()
        self.logs = LogEvents()
        self.others: list[object] = []
        self.base_ns = base_ns_for(session_created_at(session))
        self.shard_paths = [out_path] + [Path(f"{out_path}.shard{n}") for n in range(1, stats.processes)]
        self.tasks_last_ms = 0  # the latest task transition of any shard

    def run(self, read_workers: int, started: float, spill: bool) -> None:
        """Read, route and replay everything; the task shards are written at the end."""
        pool: WorkerPool | None = None
        inline: TaskShard | None = None
        try:
            if self.stats.processes == 0:
                inline = TaskShard(self.base_ns)
                router = Router(1, inline.feed_routed, self.others.append)
            else:
                pool = WorkerPool(self.shard_paths, self.base_ns, spill=spill)
                router = Router(BUCKETS, pool.send, self.others.append, batch_lines=1024)
            self._read(router, read_workers)
            router.flush()
            self.progress("writing", None, None)
            logger.debug("routed all events after %.2fs", time.perf_counter() - started)
            results = self._collect(pool) if pool is not None else [self._write_inline(inline)]
            logger.debug("task shards written after %.2fs", time.perf_counter() - started)
            self._count(results)
        except WorkerError as exc:
            raise SessionLoadError(f"indexing session {self.session} failed: {exc}") from exc
        finally:
            if pool is not None:
                pool.close()

    def _read(self, router: Router, read_workers: int) -> None:
        sources, stats, progress = self.sources, self.stats, self.progress
        total, done = sum(info.size for info in sources.events), 0
        progress("reading events", done, total)
        with ThreadPoolExecutor(max_workers=max(1, read_workers), thread_name_prefix="index-read") as pool:
            for read in read_all(pool, self.store, sources.events, read_workers):
                done += read.info.size  # read or found unreadable: either way behind us
                if read.streamed:
                    self._stream(read.info, router)
                    progress("reading events", done, total)
                    continue
                progress("reading events", done, total)
                if read.data is None:
                    stats.unreadable_files += 1
                    continue
                stats.event_bytes += read.info.size
                if not read.gzip_ok:
                    stats.gzip_errors += 1
                    if not read.data.strip():
                        stats.bad_lines += 1
                router.feed(read.data)
                if self.others:
                    self.replay.feed(self.others)
                    self.others.clear()
            if sources.events and stats.unreadable_files == len(sources.events):
                raise SessionLoadError(
                    f"read 0 of {len(sources.events)} event files of session {self.session}; "
                    "object storage is likely unavailable, retry shortly"
                )
            for n, read in enumerate(read_all(pool, self.store, sources.logs, read_workers)):
                progress("reading log events", n, len(sources.logs))
                if read.streamed:
                    self._stream_log(read.info)
                elif read.data is not None:
                    self.logs.feed(read.data)
            if sources.snapshot is not None:
                sources.snapshot_data = read_one(self.store, sources.snapshot).data
        stats.bad_lines += router.bad_lines

    def _stream(self, info: ObjectInfo, router: Router) -> None:
        """A big object, routed chunk by chunk (memory stays flat)."""
        counts = StreamCounts()
        try:
            for blob in stream_lines(self.store, info, counts):
                router.feed(blob)
                if self.others:
                    self.replay.feed(self.others)
                    self.others.clear()
        except (StorageError, OSError) as exc:
            logger.warning("cannot read %s: %s", info.key, exc)
            self.stats.unreadable_files += 1
            return
        except InflateLimitError as exc:  # a bomb: what was routed before stays, as for a corrupt stream
            logger.warning("%s: decompression bomb, the rest skipped: its gzip stream %s", info.key, exc)
            self.stats.gzip_errors += 1
        except zlib.error as exc:
            logger.warning("%s: gzip stream is corrupt or truncated: %s", info.key, exc)
            self.stats.gzip_errors += 1
        finally:
            self.stats.bad_lines += counts.long_lines
        self.stats.event_bytes += info.size

    def _stream_log(self, info: ObjectInfo) -> None:
        counts = StreamCounts()
        try:
            for blob in stream_lines(self.store, info, counts):
                self.logs.feed(blob, new_file=False)
        except (StorageError, OSError, zlib.error) as exc:  # InflateLimitError too
            logger.warning("cannot read %s: %s", info.key, exc)
        self.logs.bad_lines += counts.long_lines
        self.logs.files += 1

    def _write_inline(self, shard: TaskShard | None) -> ShardResult:
        if shard is None:
            raise RuntimeError("no in-process task shard")
        conn = create_bulk_db(self.out_path)
        try:
            return write_shards(conn, [shard], indexes=True, failures=self.replay.failure_context())
        finally:
            conn.close()

    def _collect(self, pool: WorkerPool) -> list[ShardResult]:
        summaries = pool.finish(self.replay.failure_context())
        for trace in pool.traces():
            if trace:
                logger.debug("%s", trace.strip())
        results = []
        for path, summary in zip(pool.shard_paths, summaries, strict=True):
            summary.pop("strays", None)
            results.append(ShardResult(**summary))
            rest = Path(f"{path}.rest")
            if rest.exists():  # non-task events that happened to carry a task id
                self.replay.feed(orjson.loads(line) for line in rest.read_bytes().splitlines() if line)
                rest.unlink()
        return results

    def _count(self, results: list[ShardResult]) -> None:
        stats, counters = self.stats, self.replay.counters
        shards = ShardResult()
        for result in results:
            shards.add(result)
        self.tasks_last_ms = shards.last_ms
        stats.events += shards.events
        stats.duplicate_events += shards.duplicate_events
        stats.bad_lines += shards.bad_lines
        stats.bad_events += shards.bad_events
        stats.tasks += shards.tasks
        stats.profile_events += shards.profile_events
        counters.by_type.update(shards.by_type)
        stats.events += counters.events
        stats.duplicate_events += counters.duplicate_events
        stats.bad_events += counters.bad_events
        stats.by_type = dict(sorted(counters.by_type.items()))
        stats.log_files, stats.log_bad_lines = self.logs.files, self.logs.bad_lines

    def write_tables(self, listing: Sequence[ObjectInfo], prefix: str) -> None:
        """Append the other task shards, then every other table, indexes and statistics."""
        replay, stats = self.replay, self.stats
        conn = sqlite3.connect(self.out_path, isolation_level=None)
        try:
            for pragma in BULK_PRAGMAS[1:]:
                conn.execute(pragma)
            if len(self.shard_paths) > 1:
                append_shards(conn, self.shard_paths[1:], _unlink_all)
            conn.execute("BEGIN")
            log_rows = self.logs.rows()
            end_ms = self._session_end_ms(log_rows)
            nodes = replay.nodes.rows(self.session, end_ms)
            insert_nodes(conn, nodes)
            node_ips = replay.nodes.ips()
            actors = replay.actors.rows(node_ips, end_ms)
            insert_actors(conn, actors)
            jobs = merge_jobs(replay.jobs.event_objects(node_ips), parse_snapshot(self.sources.snapshot_data))
            insert_jobs(conn, jobs)
            conn.executemany(_INSERT_LOG_EVENT, log_rows)
            conn.executemany(INSERT_OBJECT, object_rows(listing, prefix))
            conn.execute("COMMIT")
            # All of them once every row is in (sorting keys beats updating B-trees
            # row by row); an in-process build made the task indexes already.
            conn.execute(INDEX_BUILD_PRAGMA)
            # The workers' cores are free now: SQLite sorts the runs of a big index in
            # parallel. Two threads per core: the five task indexes of 1M tasks took
            # 3.2-3.7 s (avg 3.5) against 3.8-4.4 s (avg 4.1) with one per core, and
            # 3.9 s with none (measured interleaved, 2 cores).
            conn.execute(f"PRAGMA threads = {SORT_THREADS_PER_PROCESS * self.stats.processes}")
            for statement in split_ddl()[1]:
                conn.execute(statement)
            conn.execute("PRAGMA analysis_limit = 1000")
            conn.execute("ANALYZE")
            stats.actors, stats.jobs, stats.nodes, stats.log_events = len(actors), len(jobs), len(nodes), len(log_rows)
        finally:
            conn.close()

    def _session_end_ms(self, log_rows: list[tuple[str, float, str, bytes]]) -> int | None:
        """The last moment the session's stored events record (ms; None: no time at
        all): the ended forms of nodes and actors end there."""
        log_ms = int(max((row[1] for row in log_rows), default=0) * 1000)
        found = max(self.replay.last.ms or 0, self.tasks_last_ms, log_ms)
        return found or None


def _processes(requested: int | None, event_bytes: int) -> int:
    if requested is not None:
        return 0 if requested <= 1 else min(requested, MAX_PROCESSES)
    cores = usable_cpus()
    if event_bytes < PARALLEL_MIN_BYTES or cores < 2:
        return 0
    return min(cores, MAX_PROCESSES)


def _unlink_all(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal", ".rest", ".stderr"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}{suffix}")
    remove_spill_files(path)
