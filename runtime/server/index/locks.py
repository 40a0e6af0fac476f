"""The two locks around an index build, both sized by the indexes that exist.

* :class:`KeyedLocks`: one ``threading.Lock`` per index path, kept only while a
  thread holds or waits for it (a table of every session ever asked for would
  grow with every made-up cookie).
* :func:`file_lock`: an ``flock`` on ``<index>.lock`` shared by gunicorn workers.
  The lock file can be deleted together with its index (:func:`remove_lock_file`)
  because every holder checks, once it has the lock, that the file it locked is
  still the one at the path; otherwise it locks again.

And a bound on builds across gunicorn workers: :func:`slot` / :func:`queued_slot`
take one of N ``flock`` s on ``<prefix><n>.lock`` files in :data:`SLOTS_DIR` of the
cache directory (the kernel drops a dead process's lock, so a crash never leaks a slot).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

LOCK_SUFFIX = ".lock"
#: The directory of the cache directory holding the slot lock files (apart from the
#: indexes' own lock files, which come and go with them).
SLOTS_DIR = ".slots"


class KeyedLocks:
    """Per-key mutual exclusion whose table holds only keys in use."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, tuple[threading.Lock, int]] = {}

    def __len__(self) -> int:
        with self._guard:
            return len(self._locks)

    @contextlib.contextmanager
    def hold(self, key: str) -> Iterator[None]:
        with self._guard:
            lock, users = self._locks.get(key, (None, 0))
            if lock is None:
                lock = threading.Lock()
            self._locks[key] = (lock, users + 1)
        try:
            with lock:
                yield
        finally:
            with self._guard:
                _, users = self._locks[key]
                if users == 1:
                    del self._locks[key]
                else:
                    self._locks[key] = (lock, users - 1)


def lock_path(index: Path) -> Path:
    return index.with_name(index.name + LOCK_SUFFIX)


def _same_file(fd: int, path: Path) -> bool:
    try:
        on_disk = path.stat()
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (held.st_dev, held.st_ino) == (on_disk.st_dev, on_disk.st_ino)


@contextlib.contextmanager
def file_lock(index: Path, on_contended: Callable[[], None] | None = None) -> Iterator[None]:
    """Exclusive ``flock`` on the index's lock file; the lock file is removed on
    the way out when the index does not exist (a failed or refused build), so
    lock files never outnumber indexes. ``on_contended`` is called before waiting
    for a lock someone else holds."""
    path = lock_path(index)
    while True:
        index.parent.mkdir(parents=True, exist_ok=True)  # the directory may have been wiped
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if on_contended is not None:
                    on_contended()
                fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
        if _same_file(fd, path):
            break
        os.close(fd)  # deleted (with its index) while we waited: lock the new one
    try:
        yield
    finally:
        if not index.exists():
            with contextlib.suppress(FileNotFoundError):
                path.unlink()  # still held: nobody can be inside on this file
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def remove_lock_file(index: Path) -> bool:
    """Delete the index's lock file unless someone holds it (a build or a check
    is under way, and will remove it itself if the index is gone by then)."""
    path = lock_path(index)
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return True
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        if _same_file(fd, path):
            path.unlink()
        return True
    finally:
        os.close(fd)


def _take_slot(directory: Path, prefix: str, count: int) -> int | None:
    """The descriptor of a free slot, now held; None when all ``count`` are taken."""
    directory.mkdir(parents=True, exist_ok=True)
    for n in range(count):
        fd = os.open(directory / f"{prefix}{n}{LOCK_SUFFIX}", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return fd
    return None


def _release_slot(fd: int) -> None:
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


@contextlib.contextmanager
def slot(directory: Path, prefix: str, count: int) -> Iterator[bool]:
    """One of ``count`` slots, held to the end of the block if one is free (True),
    else False at once."""
    fd = _take_slot(directory, prefix, count)
    if fd is None:
        yield False
        return
    try:
        yield True
    finally:
        _release_slot(fd)


@contextlib.contextmanager
def queued_slot(
    directory: Path,
    prefix: str,
    count: int,
    on_queued: Callable[[], None],
    count_waiting: Callable[[int], None],
    *,
    poll: float = 0.25,
) -> Iterator[None]:
    """One of ``count`` slots, waiting for one to free up (``flock`` cannot wait for
    any of several files: this polls every ``poll`` seconds). When all are taken at
    first, ``on_queued()`` is called and ``count_waiting(1)``, then
    ``count_waiting(-1)`` once it has a slot (or gives up)."""
    fd = _take_slot(directory, prefix, count)
    if fd is None:
        on_queued()
        count_waiting(1)
        try:
            while fd is None:
                time.sleep(poll)
                fd = _take_slot(directory, prefix, count)
        finally:
            count_waiting(-1)
    try:
        yield
    finally:
        _release_slot(fd)
