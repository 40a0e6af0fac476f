"""The disk-first event spool: a batch is acknowledged only once it is on local disk.

Layout under ``{root}/{cluster_key}/``::

    {session}/{node|_unknown}/node_events/{opened_ns}.jsonl.open     active, appended to
    {session}/{node|_unknown}/job_events/{job}/{opened_ns}.jsonl     rotated, waiting for upload
    {session}/{node|_unknown}/job_events/{job}/{opened_ns}.jsonl.gz  compressed, waiting

Each batch is appended with one ``write`` per file and ``fdatasync``-ed before the
caller answers 200. Files rotate by size (checked on every write), by age and at
shutdown. At most ``max_open_files`` of them hold a descriptor: a sender naming
thousands of sessions used to exhaust the process's descriptors and fail every
later batch (#14), so the least recently written file is closed (synced first if
this batch wrote to it) and reopened in append mode on its next write. After a
crash, ``resume`` finalises active files (open or closed by the cap alike),
cutting a torn last line: a line without its newline belongs to a batch that was
never acknowledged.
"""

from __future__ import annotations

import gzip
import logging
import os
import shutil
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from runtime.collector.events.parse import SpoolTarget
from runtime.storage.session_keys import event_dir_parts, split_event_path

logger = logging.getLogger(__name__)

ACTIVE_SUFFIX = ".jsonl.open"
READY_SUFFIX = ".jsonl"
GZ_SUFFIX = ".jsonl.gz"
UNKNOWN_NODE = "_unknown"
DEFAULT_MAX_OPEN_FILES = 256
CLOSED = -1


@dataclass(frozen=True)
class ReadyFile:
    """A rotated spool file waiting for upload. ``node`` None = not known yet."""

    path: Path
    session: str
    node: str | None
    job: str | None
    opened_ns: int
    size: int
    lines: int | None  # None when resumed after a restart (not counted again)

    @property
    def compressed(self) -> bool:
        return self.path.name.endswith(GZ_SUFFIX)


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
                data = b"\n".join(lines) + b"\n"
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
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

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
        ready_path = active.path.with_name(active.path.name[: -len(ACTIVE_SUFFIX)] + READY_SUFFIX)
        os.replace(active.path, ready_path)
        target = active.target
        self._on_ready(
            ReadyFile(ready_path, target.session, target.node, target.job, active.opened_ns, active.size, active.lines)
        )

    # ------------------------------------------------------- upload handoff
    def release(self, ready: ReadyFile) -> None:
        """Forget an uploaded file: delete it and prune empty directories."""
        try:
            size = ready.path.stat().st_size
        except FileNotFoundError:
            return
        ready.path.unlink(missing_ok=True)
        with self._lock:
            self._account(-size, -1)
        _prune_empty_dirs(ready.path.parent, self.dir)

    def compress(self, ready: ReadyFile) -> ReadyFile:
        """gzip a rotated file in place (``X.jsonl`` -> ``X.jsonl.gz``) via a temp file
        and rename, so a crash leaves either the plain file or the finished .gz."""
        if ready.compressed:
            return ready
        gz_path = ready.path.with_name(ready.path.name[: -len(READY_SUFFIX)] + GZ_SUFFIX)
        tmp = gz_path.with_name(gz_path.name + ".tmp")
        with open(ready.path, "rb") as src, open(tmp, "wb") as raw:
            with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
                shutil.copyfileobj(src, gz, 1024 * 1024)
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(tmp, gz_path)
        ready.path.unlink()
        gz_size = gz_path.stat().st_size
        with self._lock:
            self._account(gz_size - ready.size)
        return ReadyFile(gz_path, ready.session, ready.node, ready.job, ready.opened_ns, gz_size, ready.lines)

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
                if Path(dirpath).is_relative_to(self.dir) and (found := self._recover(path)) is not None:
                    ready.append(found)
                    used += found.size
                    files += 1
                elif path.exists():
                    used += path.stat().st_size  # another cluster's spool: counted, not ours to send
        with self._lock:
            self._used, self._files = used, files
        if ready:
            logger.info("resuming %d spooled event files (%d bytes) from a previous run", len(ready), used)
        return sorted(ready, key=lambda r: r.opened_ns)

    def _recover(self, path: Path) -> ReadyFile | None:
        name = path.name
        if name.endswith(ACTIVE_SUFFIX):
            _cut_torn_tail(path)
            ready_path = path.with_name(name[: -len(ACTIVE_SUFFIX)] + READY_SUFFIX)
            os.replace(path, ready_path)
            path, name = ready_path, ready_path.name
        if name.endswith(GZ_SUFFIX):
            stem = name[: -len(GZ_SUFFIX)]
            path.with_name(stem + READY_SUFFIX).unlink(missing_ok=True)  # superseded by its .gz
        elif name.endswith(READY_SUFFIX):
            stem = name[: -len(READY_SUFFIX)]
            if path.with_name(stem + GZ_SUFFIX).exists():
                return None  # the .gz twin is the one to send
        else:
            return None
        target = self._target_from_path(path)
        if target is None or not stem.isdigit():
            logger.warning("ignoring unexpected file in the event spool: %s", path)
            return None
        size = path.stat().st_size
        if size == 0:
            path.unlink()
            return None
        return ReadyFile(path, target.session, target.node, target.job, int(stem), size, None)

    def _target_from_path(self, path: Path) -> SpoolTarget | None:
        session, *rest = path.relative_to(self.dir).parts
        found = split_event_path(rest)
        if found is None:
            return None
        node, job, _name = found
        return SpoolTarget(session, None if node == UNKNOWN_NODE else node, job)

    def close(self) -> None:
        """Rotate everything (used at shutdown, after the receiver stopped)."""
        self.rotate_all()
        self._syncers.shutdown(wait=True)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _cut_torn_tail(path: Path) -> None:
    """Truncate after the last newline: a partial line was never acknowledged."""
    size = path.stat().st_size
    if size == 0:
        return
    with open(path, "rb+") as fh:
        step = 64 * 1024
        end = size
        while end > 0:
            start = max(0, end - step)
            fh.seek(start)
            chunk = fh.read(end - start)
            newline = chunk.rfind(b"\n")
            if newline >= 0:
                keep = start + newline + 1
                if keep != size:
                    logger.warning("cut %d bytes of an unacknowledged partial line from %s", size - keep, path)
                    fh.truncate(keep)
                return
            end = start
        logger.warning("dropping %s: no complete line", path)
        fh.truncate(0)


def _prune_empty_dirs(directory: Path, stop: Path) -> None:
    while directory != stop and directory.is_relative_to(stop):
        try:
            directory.rmdir()
        except OSError:
            return
        directory = directory.parent
