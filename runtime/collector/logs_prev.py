"""File-system side of log shipping: walking log trees, moving the logs of
finished sessions into ``prev-logs``, and pruning what was emptied.

Layout::

    {tmp_root}/session_<...>/logs/...              a session's logs while it runs
    {tmp_root}/prev-logs/{session}/{node}/logs/... logs of finished sessions, waiting to ship

Older KubeRay Ray-container command prefixes ``mv`` ``session_latest/logs`` into the
same ``prev-logs`` layout before ``ray start``; nothing here tells the two apart.

Every walk, move and delete goes through ``log_files.py``: nothing below Ray's temp
root is reached through a symbolic link (#14 item 1).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from runtime.collector.log_files import FileVersion, LogFile, iter_log_files, open_dir
from runtime.collector.session_files import (
    PREV_LOGS,
    list_session_dirs,
    node_id_from_session_dir,
    raylet_socket_alive,
)
from runtime.storage.errors import InvalidKeyError
from runtime.storage.layout import validate_session_name

logger = logging.getLogger(__name__)

LOGS = "logs"
#: Shared with the Ray container, which may run as another user.
SHARED_DIR_MODE = 0o777
# A node directory must be plain hex: base64-looking names such as "logs" would
# otherwise decode into a bogus node id.
_HEX_NODE = re.compile(r"^[0-9a-fA-F]{1,128}$")


@dataclass(frozen=True)
class PrevLogsDir:
    """``prev-logs/{session}/{node}/logs``: one finished session of one node."""

    session: str
    node: str  # lower-case hex
    logs: Path


@dataclass(frozen=True)
class UploadJob:
    """One file to upload (and maybe delete afterwards)."""

    file: LogFile
    key: str
    upload: bool = True  # False: this exact content is already stored, only the delete is left
    delete_after: bool = False  # prev-logs: delete the local file once it is stored
    live: bool = False  # a current-session file, re-uploaded as it grows


@dataclass
class PrevPlan:
    """What one pass over finished sessions found to do."""

    jobs: list[UploadJob] = field(default_factory=list)
    dirs: list[PrevLogsDir] = field(default_factory=list)  # prune after the uploads
    sessions: list[str] = field(default_factory=list)  # sessions being shipped
    complete: bool = True  # False: something was postponed (no node id yet)


#: (session, node, file) -> storage key, or None when the layout rejects the name.
KeyFor = Callable[[str, str, LogFile], str | None]
#: (tag, message): a warning worth saying once per tag.
WarnOnce = Callable[[str, str], None]


def plan_prev_logs(
    tmp_root: Path,
    current: Path | None,
    *,
    fallback_node: Callable[[], str | None],
    key_for: KeyFor,
    shipped: Mapping[str, FileVersion],
    warn: WarnOnce,
) -> PrevPlan:
    """Move finished sessions' logs into prev-logs, then list every file there.

    A session's node is the one its own directory names (port files, raylet.out),
    else ``fallback_node()`` (KubeRay's Go collector always uses the current node). A
    session whose logs cannot be moved is shipped where it is and kept.
    ``shipped`` maps keys to the file versions already stored, so a file
    shipped live before the move is only deleted, not uploaded again.
    """
    plan = PrevPlan()
    prev_root = tmp_root / PREV_LOGS
    try:
        ensure_shared_dir(prev_root)
    except OSError as exc:
        warn("mkdir", f"cannot create {prev_root}: {exc}")
    for session_dir in leftover_sessions(tmp_root, current):
        node = node_id_from_session_dir(session_dir) or fallback_node()
        if node is None:
            plan.complete = False  # nothing to file it under yet: next pass
            continue
        try:
            move_session_logs(session_dir, node, prev_root)
        except OSError as exc:
            warn(f"move:{session_dir}", f"cannot move {session_dir}/logs to prev-logs, shipping it in place: {exc}")
            plan.sessions.append(session_dir.name)
            for item in iter_log_files(session_dir / LOGS, tmp_root):
                key = key_for(session_dir.name, node, item)
                if key is not None and shipped.get(key) != item.version:
                    plan.jobs.append(UploadJob(item, key))
    found, rejected = scan_prev_logs(prev_root)
    for node_dir in rejected:
        warn(f"node:{node_dir}", f"ignoring {node_dir}: the directory name is not a hex node id")
    for prev in found:
        try:
            validate_session_name(prev.session)
        except InvalidKeyError:
            warn(f"session:{prev.session}", f"ignoring {prev_root}/{prev.session}: not a session name")
            continue
        plan.dirs.append(prev)
        if prev.session not in plan.sessions:
            plan.sessions.append(prev.session)
        for item in iter_log_files(prev.logs, tmp_root):
            key = key_for(prev.session, prev.node, item)
            if key is not None:
                done = shipped.get(key) == item.version
                plan.jobs.append(UploadJob(item, key, upload=not done, delete_after=True))
    return plan


def relpath_of(path: Path, logs_dir: Path) -> str | None:
    """``path`` relative to ``logs_dir`` with '/' separators, or None if outside."""
    try:
        return path.relative_to(logs_dir).as_posix()
    except ValueError:
        return None


def ensure_shared_dir(path: Path) -> None:
    """mkdir -p with mode 0777 on every directory created (umask bypassed)."""
    missing: list[Path] = []
    probe = path
    while not probe.is_dir():
        missing.append(probe)
        probe = probe.parent
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):
            directory.mkdir(mode=SHARED_DIR_MODE)
            # Only chmod what we created; an existing dir may belong to the Ray user.
            with contextlib.suppress(OSError):
                directory.chmod(SHARED_DIR_MODE)


def leftover_sessions(tmp_root: Path, current: Path | None) -> list[Path]:
    """Real ``session_*`` dirs with a ``logs/`` dir that belong to finished sessions.

    Only when the current session is known, and only sessions whose name sorts
    before it (names carry their start time): a newer dir may be a session being
    born before ``session_latest`` is re-pointed. A session whose raylet still
    answers on its socket is alive and left alone.
    """
    if current is None:
        return []
    found = []
    for session_dir in list_session_dirs(tmp_root):
        if session_dir.name >= current.name:
            continue
        logs = session_dir / LOGS
        if logs.is_symlink() or not logs.is_dir():
            continue
        if raylet_socket_alive(session_dir, timeout=0.2):
            logger.warning("not moving logs of %s: its raylet is still running", session_dir.name)
            continue
        found.append(session_dir)
    return found


def move_session_logs(session_dir: Path, node: str, prev_root: Path) -> Path:
    """Rename ``session_dir/logs`` to ``prev_root/{session}/{node}/logs`` (merging
    file by file when that already exists). Raises OSError on failure."""
    source = session_dir / LOGS
    target = prev_root / session_dir.name / node / LOGS
    ensure_shared_dir(target.parent)
    try:
        os.rename(source, target)  # an empty target dir is replaced atomically
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
        _merge_tree(source, target)
    return target


def _merge_tree(source: Path, target: Path) -> None:
    """Move every file of ``source`` into ``target`` (same file system), then
    remove the emptied source dirs. A file present in both is replaced by the
    source's copy: both are the same log of the same session and node. Renamed
    through directory descriptors, so a directory swapped for a link fails the
    move instead of pulling a file in from elsewhere."""
    anchor = source.parent.parent  # Ray's temp root: session_*/logs and prev-logs/... share it
    for item in list(iter_log_files(source, anchor)):
        destination = target / item.relpath
        ensure_shared_dir(destination.parent)
        src_fd = open_dir(anchor, item.path.parent)
        try:
            dst_fd = open_dir(anchor, destination.parent)
            try:
                os.replace(item.path.name, destination.name, src_dir_fd=src_fd, dst_dir_fd=dst_fd)
            finally:
                os.close(dst_fd)
        finally:
            os.close(src_fd)
    prune_empty_tree(source)
    with contextlib.suppress(OSError):
        source.rmdir()


def scan_prev_logs(prev_root: Path) -> tuple[list[PrevLogsDir], list[Path]]:
    """Every ``prev-logs/{session}/{node}/logs`` dir, and the node-level dirs whose
    names cannot be node ids (reported, never touched)."""
    found: list[PrevLogsDir] = []
    rejected: list[Path] = []
    for session_dir in _subdirs(prev_root):
        for node_dir in _subdirs(session_dir):
            logs = node_dir / LOGS
            if logs.is_symlink() or not logs.is_dir():
                continue
            if not _HEX_NODE.fullmatch(node_dir.name):
                rejected.append(node_dir)
                continue
            found.append(PrevLogsDir(session_dir.name, node_dir.name.lower(), logs))
    return found, rejected


def _subdirs(directory: Path) -> list[Path]:
    try:
        with os.scandir(directory) as entries:
            return sorted(Path(e.path) for e in entries if e.is_dir(follow_symlinks=False))
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return []


def prune_empty_tree(root: Path) -> None:
    """Remove empty directories below ``root`` (not ``root`` itself), bottom-up."""
    for dirpath, _dirnames, _filenames in os.walk(root, topdown=False):
        if Path(dirpath) != root:
            with contextlib.suppress(OSError):  # not empty, or not ours
                os.rmdir(dirpath)


def prune_prev_logs_dir(prev: PrevLogsDir, prev_root: Path) -> bool:
    """After shipping: remove the emptied ``logs`` tree, then the node and session
    dirs if empty. True when the ``logs`` dir is gone."""
    prune_empty_tree(prev.logs)
    for directory in (prev.logs, prev.logs.parent, prev.logs.parent.parent):
        if directory == prev_root:
            break
        try:
            directory.rmdir()
        except OSError:
            break
    return not prev.logs.exists()


__all__ = [
    "PREV_LOGS",
    "LogFile",
    "PrevLogsDir",
    "PrevPlan",
    "UploadJob",
    "plan_prev_logs",
    "ensure_shared_dir",
    "iter_log_files",
    "leftover_sessions",
    "move_session_logs",
    "prune_empty_tree",
    "prune_prev_logs_dir",
    "relpath_of",
    "scan_prev_logs",
]
