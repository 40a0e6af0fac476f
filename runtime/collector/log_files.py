"""Reaching Ray's log files without ever following a link (#14 item 1).

The logs tree is written by arbitrary user code in the Ray container, while the
collector runs with the storage credentials: a symlink planted in ``logs/`` must
never make it read, ship or delete anything outside. Checking a path and then
opening it by name leaves a window in which any component can be swapped for a
link, so everything here works on directory descriptors instead:

* every component below a trusted *anchor* (Ray's temp root, chosen by the
  operator, which may itself be a link) is opened with ``O_NOFOLLOW`` relative to
  its parent's descriptor: a link anywhere below the anchor fails with ``ELOOP``;
* a file is read from the descriptor that was opened, after ``fstat`` confirms it
  is the regular file (device and inode) that was listed, and its resolved path
  (``/proc/self/fd``) lies under the logs root;
* directories are listed through descriptors too, so a walk never descends into a
  linked directory, even one swapped in mid-walk.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from runtime.storage.layout import MAX_LOG_DEPTH

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO swapped in for a log must not block the open (it fails the
# S_ISREG check right after).
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_PROC_FD = Path("/proc/self/fd")


#: What tells a file's content apart without reading it: inode, size, mtime and
#: ctime. The ctime catches a same-size rewrite whose mtime was put back (a tool
#: keeping it, or a coarse clock tick); the inode, a rotated log's replacement.
FileVersion = tuple[int, int, int, int]


class UnsafePathError(OSError):
    """A path that is not a plain file or directory below its anchor: a link on
    the way, a file swapped since it was listed, or a resolved path elsewhere."""


@dataclass(frozen=True)
class LogFile:
    """One regular file under a ``logs`` directory, as it was listed."""

    path: Path
    relpath: str  # '/'-separated, relative to the logs directory
    size: int
    mtime_ns: int
    anchor: Path  # opened from here, no link followed below it
    dev: int
    ino: int
    ctime_ns: int

    @classmethod
    def from_stat(cls, path: Path, relpath: str, st: os.stat_result, anchor: Path) -> LogFile:
        return cls(path, relpath, st.st_size, st.st_mtime_ns, anchor, st.st_dev, st.st_ino, st.st_ctime_ns)

    @property
    def version(self) -> FileVersion:
        return version_of(self.ino, self.size, self.mtime_ns, self.ctime_ns)

    @property
    def root(self) -> Path:
        """The logs directory the file belongs to."""
        return Path(*self.path.parts[: len(self.path.parts) - len(self.relpath.split("/"))])


def version_of(ino: int, size: int, mtime_ns: int, ctime_ns: int) -> FileVersion:
    return (ino, size, mtime_ns, ctime_ns)


def _parts(anchor: Path, path: Path) -> tuple[str, ...]:
    try:
        parts = path.relative_to(anchor).parts
    except ValueError as exc:
        raise UnsafePathError(errno.EXDEV, "not below the anchor", str(path)) from exc
    if any(part in ("", ".", "..") for part in parts):
        raise UnsafePathError(errno.EINVAL, "path has . or .. components", str(path))
    return parts


def _unsafe(exc: OSError, path: Path) -> OSError:
    """ELOOP / ENOTDIR from an O_NOFOLLOW open mean a link (or a swapped file) on
    the way; anything else (ENOENT, EACCES) is passed on as it is."""
    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
        return UnsafePathError(exc.errno, "a symbolic link or non-directory on the way", str(path))
    return exc


def open_dir(anchor: Path, path: Path) -> int:
    """A descriptor of directory ``path``, every component below ``anchor`` opened
    without following links. The caller closes it."""
    parts = _parts(anchor, path)
    return _descend(os.open(anchor, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC), parts, path)


def _descend(fd: int, parts: tuple[str, ...], path: Path) -> int:
    """From directory ``fd`` (consumed) down ``parts``, no link followed."""
    try:
        for part in parts:
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                raise _unsafe(exc, path) from exc
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def lstat_below(anchor: Path, path: Path) -> os.stat_result:
    """``lstat`` of ``path``, with no link followed on the way from ``anchor``."""
    fd = open_dir(anchor, path.parent)
    try:
        return os.stat(path.name, dir_fd=fd, follow_symlinks=False)
    finally:
        os.close(fd)


def _resolved(fd: int) -> str | None:
    try:
        return os.readlink(_PROC_FD / str(fd))
    except OSError:
        return None  # no /proc (not Linux): the descriptor walk is the guarantee


def open_log_file(item: LogFile) -> BinaryIO:
    """Open ``item`` for reading: no link followed below its anchor, the same
    device and inode as listed, a regular file resolving under its logs root.
    Raises FileNotFoundError when it is gone, UnsafePathError when it is not what
    was listed."""
    root = item.root
    below = _parts(root, item.path.parent)
    root_fd = open_dir(item.anchor, root)
    try:
        root_real = _resolved(root_fd)
        parent_fd = _descend(os.dup(root_fd), below, item.path)
    finally:
        os.close(root_fd)
    try:
        fd = os.open(item.path.name, _FILE_FLAGS, dir_fd=parent_fd)
    except OSError as exc:
        raise _unsafe(exc, item.path) from exc
    finally:
        os.close(parent_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (item.dev, item.ino):
            raise UnsafePathError(errno.ESTALE, "not the file that was listed (replaced since)", str(item.path))
        real = _resolved(fd)
        if root_real is not None and real is not None and not real.startswith(root_real.rstrip("/") + "/"):
            raise UnsafePathError(errno.EXDEV, f"resolves to {real}, outside {root_real}", str(item.path))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def unlink_if_unchanged(item: LogFile) -> bool:
    """Delete ``item`` (a shipped prev-logs file) if it is still the file that was
    listed, in the same version (inode, size, mtime, ctime); False when it changed. Through the
    parent's descriptor, so a directory swapped for a link cannot redirect it."""
    fd = open_dir(item.anchor, item.path.parent)
    try:
        st = os.stat(item.path.name, dir_fd=fd, follow_symlinks=False)
        now = version_of(st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        if st.st_dev != item.dev or now != item.version:
            return False
        os.unlink(item.path.name, dir_fd=fd)
        return True
    finally:
        os.close(fd)


def walk(logs_dir: Path, anchor: Path | None = None) -> Iterator[tuple[Path, str, os.stat_result]]:
    """(path, relpath, lstat) of every entry under ``logs_dir``, directories before
    their contents, never descending into a link nor deeper than the key layout
    allows. Each directory is reopened from ``anchor`` through descriptors and
    must still be the directory that was listed, so at most a few descriptors are
    open at once, whatever the tree's width."""
    anchor = anchor or logs_dir
    stack: list[tuple[Path, str, int, tuple[int, int] | None]] = [(logs_dir, "", 1, None)]
    while stack:
        directory, prefix, depth, identity = stack.pop()
        try:
            fd = open_dir(anchor, directory)
        except (FileNotFoundError, NotADirectoryError, PermissionError, UnsafePathError):
            continue  # gone, not ours, or swapped for a link since it was listed
        try:
            st = os.fstat(fd)
            if identity is not None and (st.st_dev, st.st_ino) != identity:
                continue
            found = _list(fd)  # stat'ed while the descriptor is open (fstatat on it)
        except OSError:
            continue
        finally:
            os.close(fd)
        for name, entry_st in found:
            rel = f"{prefix}{name}"
            path = directory / name
            yield path, rel, entry_st
            if stat.S_ISDIR(entry_st.st_mode) and depth < MAX_LOG_DEPTH:
                stack.append((path, rel + "/", depth + 1, (entry_st.st_dev, entry_st.st_ino)))


def _list(fd: int) -> list[tuple[str, os.stat_result]]:
    """(name, lstat) of the entries of directory ``fd``."""
    found = []
    with os.scandir(fd) as entries:
        for entry in entries:
            try:
                found.append((entry.name, entry.stat(follow_symlinks=False)))
            except FileNotFoundError:
                continue  # removed while listing
    return found


def iter_log_files(logs_dir: Path, anchor: Path | None = None) -> Iterator[LogFile]:
    """Regular files under ``logs_dir``, recursively. Symlinks (never followed),
    sockets and other special files are skipped; so is anything too deep for the
    key layout."""
    anchor = anchor or logs_dir
    for path, rel, st in walk(logs_dir, anchor):
        if stat.S_ISREG(st.st_mode):
            yield LogFile.from_stat(path, rel, st, anchor)


def log_dirs(logs_dir: Path, anchor: Path | None = None) -> list[Path]:
    """``logs_dir`` and every real directory below it (what a watcher may watch)."""
    dirs = [logs_dir]
    with contextlib.suppress(OSError):
        dirs += [path for path, _rel, st in walk(logs_dir, anchor) if stat.S_ISDIR(st.st_mode)]
    return dirs


def is_real_dir(path: Path) -> bool:
    """A directory, not a link to one (a watcher's hint; walks re-check from the anchor)."""
    try:
        return stat.S_ISDIR(path.lstat().st_mode)
    except OSError:
        return False
