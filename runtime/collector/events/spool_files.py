"""The event spool's files at rest: their names, a rotated file waiting for upload
(:class:`ReadyFile`), gzip in place, and recovery after a crash.

:mod:`runtime.collector.events.spool` writes the active files and rotates them
into what this module reads; a file's place under the spool directory mirrors its
stored key (``{session}/{node|_unknown}/node_events/{opened_ns}.jsonl`` or
``.../job_events/{job}/...``), parsed by :mod:`runtime.storage.session_keys`.

Every file here is opened by :func:`open_regular`: without following a link and only
if it is a regular file. The spool belongs on a volume only the collector mounts
(the Pulumi program's sidecar does so), but a spool left under ``$RAY_TMP_ROOT`` is
writable by the Ray job, which could otherwise swap a spool file for a link to a
secret (shipped as events), a FIFO (an upload worker blocked for good) or a dangling
link (a crash at start, every restart).
"""

from __future__ import annotations

import errno
import gzip
import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from runtime.collector.events.parse import SpoolTarget
from runtime.storage.session_keys import split_event_path

logger = logging.getLogger(__name__)

ACTIVE_SUFFIX = ".jsonl.open"
READY_SUFFIX = ".jsonl"
GZ_SUFFIX = ".jsonl.gz"
UNKNOWN_NODE = "_unknown"


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


class NotRegularFileError(OSError):
    """A spool name that is a link, a FIFO, a directory or a device: never read, never sent."""


def open_regular(path: Path, flags: int = os.O_RDONLY, mode: int = 0o644) -> int:
    """A descriptor of ``path`` if it is a regular file, not reached through a link in
    its last component; raises :class:`NotRegularFileError` otherwise. O_NONBLOCK: opening a
    FIFO returns at once instead of waiting for a writer."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotRegularFileError(errno.ELOOP, "a symbolic link", str(path)) from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegularFileError(errno.EINVAL, "not a regular file", str(path))
    except BaseException:
        os.close(fd)
        raise
    return fd


def ready_name(active: Path) -> Path:
    """The name an active file gets when it is rotated (``X.jsonl.open`` -> ``X.jsonl``)."""
    return active.with_name(active.name[: -len(ACTIVE_SUFFIX)] + READY_SUFFIX)


def compress(ready: ReadyFile) -> ReadyFile:
    """gzip a rotated file in place (``X.jsonl`` -> ``X.jsonl.gz``) via a temp file
    and rename, so a crash leaves either the plain file or the finished .gz. Reads
    the size the file has when opened, no further."""
    gz_path = ready.path.with_name(ready.path.name[: -len(READY_SUFFIX)] + GZ_SUFFIX)
    tmp = gz_path.with_name(gz_path.name + ".tmp")
    tmp.unlink(missing_ok=True)  # O_EXCL below: never write through whatever had this name
    with open(open_regular(ready.path), "rb") as src:
        left = os.fstat(src.fileno()).st_size
        tmp_fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        with open(tmp_fd, "wb") as raw:
            with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
                while left > 0 and (chunk := src.read(min(left, 1024 * 1024))):
                    gz.write(chunk)
                    left -= len(chunk)
            raw.flush()
            os.fsync(raw.fileno())
    os.replace(tmp, gz_path)
    ready.path.unlink()
    gz_size = gz_path.lstat().st_size
    return ReadyFile(gz_path, ready.session, ready.node, ready.job, ready.opened_ns, gz_size, ready.lines)


def recover(path: Path, cluster_dir: Path) -> ReadyFile | None:
    """The file ``path`` (under ``cluster_dir``) as a file to upload after a restart:
    an active one is finalised (its torn tail cut), a plain file with a .gz twin is
    superseded by it; None for anything else (empty, unexpected: logged). A name that
    is not a regular file (a link, a FIFO: see the module's docstring) is removed."""
    name = path.name
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return None  # superseded by its .gz twin, recovered just before it
    if not stat.S_ISREG(mode):
        if name.endswith((ACTIVE_SUFFIX, READY_SUFFIX, GZ_SUFFIX)):
            logger.warning("removing %s from the event spool: not a regular file", path)
            path.unlink()
        return None
    if name.endswith(ACTIVE_SUFFIX):
        cut_torn_tail(path)
        finished = ready_name(path)
        os.replace(path, finished)
        path, name = finished, finished.name
    if name.endswith(GZ_SUFFIX):
        stem = name[: -len(GZ_SUFFIX)]
        path.with_name(stem + READY_SUFFIX).unlink(missing_ok=True)  # superseded by its .gz
    elif name.endswith(READY_SUFFIX):
        stem = name[: -len(READY_SUFFIX)]
        if path.with_name(stem + GZ_SUFFIX).exists():
            return None  # the .gz twin is the one to send
    else:
        return None
    target = _target_from_path(path, cluster_dir)
    if target is None or not stem.isdigit():
        logger.warning("ignoring unexpected file in the event spool: %s", path)
        return None
    size = path.lstat().st_size
    if size == 0:
        path.unlink()
        return None
    return ReadyFile(path, target.session, target.node, target.job, int(stem), size, None)


def _target_from_path(path: Path, cluster_dir: Path) -> SpoolTarget | None:
    session, *rest = path.relative_to(cluster_dir).parts
    found = split_event_path(rest)
    if found is None:
        return None
    node, job, _name = found
    return SpoolTarget(session, None if node == UNKNOWN_NODE else node, job)


def cut_torn_tail(path: Path) -> None:
    """Truncate after the last newline: a partial line was never acknowledged."""
    with open(open_regular(path, os.O_RDWR), "rb+") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size == 0:
            return
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


def prune_empty_dirs(directory: Path, stop: Path) -> None:
    while directory != stop and directory.is_relative_to(stop):
        try:
            directory.rmdir()
        except OSError:
            return
        directory = directory.parent
