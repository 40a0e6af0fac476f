"""Reading Ray's temp root: which session is current, and which node a session
directory belongs to. Pure file-system inspection, no network.

Layout (Ray 2.60)::

    {tmp_root}/session_latest -> session_2026-11-22_01-45-25_333080_9264
    {tmp_root}/session_*/{component}_port_{nodeIdHex}    one-line port files
    {tmp_root}/session_*/logs/raylet.out                 "Setting node ID node_id=<hex>"
    {tmp_root}/session_*/sockets/raylet                  unix socket while the raylet runs
    {tmp_root}/raylet_node_id                            written by the GKE guide's postStart hook
"""

from __future__ import annotations

import logging
import os
import re
import socket
import stat
from pathlib import Path

logger = logging.getLogger(__name__)

SESSION_LATEST = "session_latest"
PREV_LOGS = "prev-logs"
RAYLET_NODE_ID_FILE = "raylet_node_id"
_PORT_FILE = re.compile(r"^[a-z_]+_port_([0-9a-f]{56})$")
_RAYLET_NODE_LINE = re.compile(rb"Setting node ID node_id=([0-9a-f]{56})")
_HEX_NODE = re.compile(r"^[0-9a-fA-F]{56}$")
# A node id is 56 hex digits; a trailing newline and some spaces fit, more is not one.
_NODE_ID_FILE_LIMIT = 128
# The last complaint about raylet_node_id (re-read every few seconds: say it once).
# Only the last is kept: the job can change the content at will, and a set of
# everything ever seen would grow without bound.
_last_warning: list[tuple[str, str]] = []


def resolve_session_latest(tmp_root: Path) -> Path | None:
    """The directory ``session_latest`` points at (relative or absolute link), or None."""
    link = tmp_root / SESSION_LATEST
    try:
        target = Path(os.readlink(link))
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError:
        # Not a symlink (a copied directory, say): use it as it is if it is a directory.
        return link if link.is_dir() else None
    resolved = target if target.is_absolute() else tmp_root / target
    if not resolved.is_dir():
        return None
    # Keep the path under tmp_root even when the link is absolute to another mount
    # of the same emptyDir (the Ray container may see it at a different path). A
    # session directory that is not in tmp_root is none of Ray's: the link is the
    # Ray job's to change, and whatever it named would be shipped as this node's logs.
    local = tmp_root / resolved.name
    return local if resolved.name.startswith("session_") and local.is_dir() else None


def list_session_dirs(tmp_root: Path) -> list[Path]:
    """Real ``session_*`` directories (not the ``session_latest`` link), oldest first."""
    try:
        entries = list(os.scandir(tmp_root))
    except FileNotFoundError:
        return []
    dirs = [
        Path(e.path)
        for e in entries
        if e.name.startswith("session_") and e.name != SESSION_LATEST and e.is_dir(follow_symlinks=False)
    ]
    return sorted(dirs, key=lambda p: p.name)


def node_id_from_session_dir(session_dir: Path) -> str | None:
    """The node a session directory belongs to: from its ``*_port_<nodeId>`` files,
    else from ``logs/raylet.out``. Lower-case hex, or None if neither tells."""
    newest: tuple[int, str] | None = None
    try:
        for entry in os.scandir(session_dir):
            match = _PORT_FILE.match(entry.name)
            if match:
                # A raylet restarted inside the session leaves a second set of port
                # files: the newest belongs to the node that runs now.
                try:
                    # The link's own time: a planted link must not be followed (nor
                    # a dangling or looping one abort the scan).
                    stamp = entry.stat(follow_symlinks=False).st_mtime_ns
                except OSError:
                    continue
                if newest is None or stamp > newest[0]:
                    newest = (stamp, match.group(1))
    except (FileNotFoundError, NotADirectoryError):
        return None
    if newest is not None:
        return newest[1]
    # The session directory itself may be a planted link: only its parent is trusted.
    head = _read_head(session_dir.parent, session_dir.name, "logs", "raylet.out")
    if head is None:
        return None
    found = _RAYLET_NODE_LINE.search(head)
    return found.group(1).decode() if found else None


def _read_head(base: Path, *parts: str, limit: int = 64 * 1024) -> bytes | None:
    """The first ``limit`` bytes of the regular file ``base/parts...``, or None.

    ``base`` is trusted (Ray's temp root is chosen by the operator and may itself be
    a link); every one of ``parts`` lies in the emptyDir the job writes, so each is
    opened relative to its parent's descriptor without following a link (the job
    may plant one), and the file without blocking (a plain open() of a FIFO waits
    forever for a writer); anything but a regular file gives None."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(base, os.O_RDONLY | os.O_CLOEXEC | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        for part in parts[:-1]:
            child = os.open(part, flags | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        file_fd = os.open(parts[-1], flags | os.O_NONBLOCK, dir_fd=fd)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        if not stat.S_ISREG(os.fstat(file_fd).st_mode):
            return None
        return os.read(file_fd, limit)
    except OSError:
        return None
    finally:
        os.close(file_fd)


def _kind(path: Path) -> str | None:
    """What ``path`` is, without following a link or opening it; None if absent."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    for test, name in (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISREG, "an unreadable regular file"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def _first_time(what: str, value: str) -> bool:
    """Whether this complaint differs from the last one (and remember it)."""
    if _last_warning == [(what, value)]:
        return False
    _last_warning[:] = [(what, value)]
    return True


def node_id_from_file(tmp_root: Path) -> str | None:
    """``{tmp_root}/raylet_node_id`` as written by the GKE guide's postStart hook.

    The job can write that directory too: the file is read like ``raylet.out``
    (no link followed, a FIFO never waited on, at most a few bytes), and what is
    logged about anything but a regular file is its kind, never its content."""
    path = tmp_root / RAYLET_NODE_ID_FILE
    head = _read_head(tmp_root, RAYLET_NODE_ID_FILE, limit=_NODE_ID_FILE_LIMIT)
    if head is None:
        kind = _kind(path)
        if kind is not None and _first_time("kind", kind):
            logger.warning("ignoring %s: not read, it is %s", path, kind)
        return None
    text = head.decode("utf-8", errors="replace").strip()
    if _HEX_NODE.match(text):
        _last_warning.clear()  # a bad file written again later is worth saying again
        return text.lower()
    if text and _first_time("text", text):
        logger.warning("ignoring %s: %r is not a 56-digit hex node id", path, text[:80])
    return None


def raylet_socket_alive(session_dir: Path, timeout: float = 1.0) -> bool:
    """Whether the session's raylet accepts connections (the session is active)."""
    path = session_dir / "sockets" / "raylet"
    if not path.exists():
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(str(path))
        except OSError:
            return False
    return True
