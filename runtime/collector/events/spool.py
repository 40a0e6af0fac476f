"""The disk-first event spool: a batch is acknowledged only once it is on local disk.

Layout under ``{root}/{cluster_key}/``::

    {session}/{node|_unknown}/node_events/{opened_ns}.jsonl.open     active, appended to
    {session}/{node|_unknown}/job_events/{job}/{opened_ns}.jsonl     rotated, waiting for upload
    {session}/{node|_unknown}/job_events/{job}/{opened_ns}.jsonl.gz  compressed, waiting

Each batch is appended with one ``write`` per file and ``fdatasync``-ed before the
caller answers 200; a file's directory (and any it made) is fsynced when the file is
made, so that its name survives a power loss as well as its data. Files rotate by
size (checked on every write), by age and at shutdown. At most ``max_open_files`` of
them hold a descriptor: a sender naming thousands of sessions used to exhaust the
process's descriptors and fail every later batch (#14), so the least recently written
file is closed (synced first if this batch wrote to it) and reopened in append mode
on its next write. After a crash, ``resume`` finalises active files (open or closed
by the cap alike), cutting a torn last line: a line without its newline belongs to a
batch that was never acknowledged.

This module holds the active files; the rotated ones (their names, gzip, recovery)
are :mod:`runtime.collector.events.spool_files`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from runtime.collector.events import spool_files
from runtime.collector.events.parse import SpoolTarget
from runtime.collector.events.spool_files import ACTIVE_SUFFIX, UNKNOWN_NODE, ReadyFile, ready_name
from runtime.storage.session_keys import event_dir_parts

logger = logging.getLogger(__name__)

DEFAULT_MAX_OPEN_FILES = 256
CLOSED = -1


@dataclass
class _Active:
    path: Path
    fd: int  # CLOSED while over the open-file cap
    target: SpoolTarget
    opened_ns: int
    opened_at: float
    size: int = 0
    lines: int = 0
    unsynced: bool = False  # written since the last fdatasync


class Spool:
    """Active spool files for one cluster, plus disk accounting across all files."""

    def __init__(
        self,
        root: Path,
        cluster_key: str,
        *,
        max_file_size: int,
        rotation_interval: float,
        fsync: bool,
        on_ready: Callable[[ReadyFile], None],
        clock_ns: Callable[[], int] = time.time_ns,
        max_open_files: int = DEFAULT_MAX_OPEN_FILES,
    ) -> None:
        self.root = root
        self.dir = root / cluster_key
        self.max_file_size = max_file_size
        self.rotation_interval = rotation_interval
        self.fsync = fsync
        self._on_ready = on_ready
        self._clock_ns = clock_ns
        self._active: dict[SpoolTarget, _Active] = {}
        self.max_open_files = max(1, max_open_files)
        self._open_fds: OrderedDict[SpoolTarget, _Active] = OrderedDict()  # least recently written first
        self._lock = threading.Lock()
        self._used = 0
        self._files = 0
        self._syncers = ThreadPoolExecutor(max_workers=4, thread_name_prefix="spool-sync")

    # ------------------------------------------------------------ accounting
    @property
    def used_bytes(self) -> int:
        return self._used

    @property
    def file_count(self) -> int:
        return self._files

    @property
    def open_files(self) -> int:
        """Spool files holding a descriptor now (at most ``max_open_files``)."""
        return len(self._open_fds)

    def _account(self, delta_bytes: int, delta_files: int = 0) -> None:
        self._used += delta_bytes
        self._files += delta_files

    # ---------------------------------------------------------------- writes
    def write(self, groups: Mapping[SpoolTarget, list[bytes]], fallback_node: str | None = None) -> int:
        """Append JSON lines, grouped by target, and make them durable.

        Lines without a node go under ``fallback_node`` (the collector's own, if
        known) or ``_unknown`` until one is known. Raises OSError on a disk
        failure; the affected file is rotated away so the next batch starts clean.
        """
        grouped: dict[SpoolTarget, list[bytes]] = {}
        for original, lines in groups.items():
            target = original
            if original.node is None and fallback_node is not None:
                target = SpoolTarget(original.session, fallback_node, original.job)
            grouped.setdefault(target, []).extend(lines)
        if not grouped:
            return 0
        written = 0
        with self._lock:
            touched: list[_Active] = []
            for target, lines in grouped.items():
                active = self._active.get(target) or self._open(target)
                data = b"\n".join([*lines, b""])  # the final newline without a second copy of it all
                try:
                    fd = self._fd(active)
                    _write_all(fd, data)
                except OSError:
                    self._rotate_locked(active)  # wedged: salvage what reached disk
                    raise
                active.unsynced = self.fsync
                active.size += len(data)
                active.lines += len(lines)
                self._account(len(data))
                written += len(lines)
                touched.append(active)
            if self.fsync:
                # Files closed by the cap meanwhile were synced as they closed.
                pending = [a for a in touched if a.unsynced and a.fd != CLOSED]
                self._sync([a.fd for a in pending])
                for active in pending:
                    active.unsynced = False
            for active in touched:
                if active.size >= self.max_file_size:
                    self._rotate_locked(active)
        return written

    def _sync(self, fds: list[int]) -> None:
        """fdatasync every touched file; in parallel, since a batch touches one file
        per job and each sync waits on the disk (the GIL is released meanwhile)."""
        if len(fds) == 1:
            os.fdatasync(fds[0])
            return
        for future in [self._syncers.submit(os.fdatasync, fd) for fd in fds]:
            future.result()

    def _open(self, target: SpoolTarget) -> _Active:
        # The spool mirrors the stored layout, so its paths are built and read by
        # the same rules as the keys (runtime.storage.session_keys).
        directory = self.dir.joinpath(target.session, target.node or UNKNOWN_NODE, *event_dir_parts(target.job))
        existing = directory
        while not existing.is_dir() and existing != existing.parent:
            existing = existing.parent
        directory.mkdir(parents=True, exist_ok=True)
        opened_ns = self._clock_ns()
        path = directory / f"{opened_ns}{ACTIVE_SUFFIX}"
        while path.exists():  # two files in the same nanosecond: keep names unique
            opened_ns += 1
            path = directory / f"{opened_ns}{ACTIVE_SUFFIX}"
        active = _Active(path=path, fd=CLOSED, target=target, opened_ns=opened_ns, opened_at=time.monotonic())
        active.fd = self._open_fd(path, target)
        self._active[target] = active
        self._open_fds[target] = active
        self._account(0, 1)
        if self.fsync:
            _sync_dirs(directory, existing)
        return active

    def _fd(self, active: _Active) -> int:
        """The file's descriptor, reopened (append mode) if the cap closed it."""
        if active.fd == CLOSED:
            active.fd = self._open_fd(active.path, active.target)
            self._open_fds[active.target] = active
        else:
            self._open_fds.move_to_end(active.target)
        return active.fd

    def _open_fd(self, path: Path, target: SpoolTarget) -> int:
        """Open ``path`` for appending after making room under the cap."""
        while len(self._open_fds) >= self.max_open_files:
            _victim_target, victim = self._open_fds.popitem(last=False)
            self._close_fd(victim)
        # A regular file only: a FIFO swapped in for it would block this open, under the lock.
        return spool_files.open_regular(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)

    def _close_fd(self, active: _Active) -> None:
        """Close an active file's descriptor; what this batch wrote is synced first,
        since the 200 promises it is on disk."""
        if active.fd == CLOSED:
            return
        self._open_fds.pop(active.target, None)
        fd, active.fd = active.fd, CLOSED
        try:
            if active.unsynced:
                os.fdatasync(fd)
                active.unsynced = False
        finally:
            os.close(fd)

    # -------------------------------------------------------------- rotation
    def rotate_due(self) -> int:
        """Rotate files older than the rotation interval; returns how many."""
        now = time.monotonic()
        with self._lock:
            due = [a for a in self._active.values() if now - a.opened_at >= self.rotation_interval]
            for active in due:
                self._rotate_locked(active)
        return len(due)

    def rotate_all(self) -> int:
        with self._lock:
            actives = list(self._active.values())
            for active in actives:
                self._rotate_locked(active)
        return len(actives)

    def rotate_unknown_node(self) -> int:
        """Rotate files filed under ``_unknown`` (the node just became known)."""
        with self._lock:
            actives = [a for a in self._active.values() if a.target.node is None]
            for active in actives:
                self._rotate_locked(active)
        return len(actives)

    def _rotate_locked(self, active: _Active) -> None:
        self._active.pop(active.target, None)
        self._open_fds.pop(active.target, None)
        if active.fd != CLOSED:
            try:
                os.close(active.fd)
            except OSError:
                logger.warning("closing spool file %s failed", active.path, exc_info=True)
            active.fd = CLOSED
        if active.size == 0:
            active.path.unlink(missing_ok=True)
            self._account(0, -1)
            return
        ready_path = ready_name(active.path)
        try:
            os.replace(active.path, ready_path)
        except OSError as exc:
            # One file must not stop the rotation of the others (the shutdown's included).
            # Gone: its events are lost with it. Still there: the next start resumes it.
            logger.error("cannot rotate spool file %s: %s", active.path, exc)
            if not os.path.lexists(active.path):
                self._account(-active.size, -1)
            return
        target = active.target
        self._on_ready(
            ReadyFile(ready_path, target.session, target.node, target.job, active.opened_ns, active.size, active.lines)
        )

    # ------------------------------------------------------- upload handoff
    def release(self, ready: ReadyFile) -> None:
        """Forget an uploaded (or refused) file: delete it and prune empty directories.
        The size accounted for it is the one it was handed over with: what is under its
        name now may be something else (a link the Ray job put there)."""
        ready.path.unlink(missing_ok=True)
        with self._lock:
            self._account(-ready.size, -1)
        spool_files.prune_empty_dirs(ready.path.parent, self.dir)

    def compress(self, ready: ReadyFile) -> ReadyFile:
        """gzip a rotated file in place (see :func:`~runtime.collector.events.spool_files.compress`)."""
        if ready.compressed:
            return ready
        compressed = spool_files.compress(ready)
        with self._lock:
            self._account(compressed.size - ready.size)
        return compressed

    # --------------------------------------------------------------- resume
    def resume(self) -> list[ReadyFile]:
        """Recover after a restart: finalise active files (cutting torn tails),
        drop half-written gzip temp files, and return everything still to upload.
        Also sets the disk accounting from what is really on disk."""
        ready: list[ReadyFile] = []
        used, files = 0, 0
        for dirpath, _dirnames, filenames in os.walk(self.root):
            for name in filenames:
                path = Path(dirpath) / name
                if name.endswith(".tmp"):
                    path.unlink(missing_ok=True)
                    continue
                try:
                    found = spool_files.recover(path, self.dir) if Path(dirpath).is_relative_to(self.dir) else None
                    if found is not None:
                        ready.append(found)
                        used += found.size
                        files += 1
                    elif path.exists():
                        used += path.lstat().st_size  # another cluster's spool: counted, not ours to send
                except OSError as exc:  # one bad name must not stop the collector from starting
                    logger.warning("skipping %s in the event spool: %s", path, exc)
        with self._lock:
            self._used, self._files = used, files
        if ready:
            logger.info("resuming %d spooled event files (%d bytes) from a previous run", len(ready), used)
        return sorted(ready, key=lambda r: r.opened_ns)

    def close(self) -> None:
        """Rotate everything (used at shutdown, after the receiver stopped)."""
        self.rotate_all()
        self._syncers.shutdown(wait=True)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _sync_dirs(directory: Path, existing: Path) -> None:
    """fsync ``directory`` and each parent up to ``existing``, the deepest one that was
    there before: fdatasync makes a new file's data durable but not its name, so
    after a power loss an acknowledged batch could be in a file no directory names."""
    while True:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        if directory in (existing, directory.parent):
            return
        directory = directory.parent
