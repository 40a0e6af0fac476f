"""Temp files a killed process leaves in the cache directory.

Builds and downloads write ``{index stem}.{pid}.{thread}.building|download`` and
rename it into place; shared-index uploads compress into ``.publish-*`` files. A
process killed midway (OOM, SIGKILL, a node drained) leaves them behind, possibly
gigabytes each. Several gunicorn workers share the directory, so only files of
processes that no longer exist are removed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path

logger = logging.getLogger(__name__)

TEMP_SUFFIXES = (".building", ".download")
PUBLISH_PREFIX = ".publish-"
#: An upload's temp file (no pid in its name) this old was left by a dead process.
STALE_PUBLISH_SECONDS = 6 * 3600.0


def sweep_temp_files(directory: Path, now: float | None = None) -> int:
    """Remove the temp files of processes that are gone; returns how many."""
    now = time.time() if now is None else now
    removed = 0
    with contextlib.suppress(FileNotFoundError):
        for temp in directory.iterdir():
            if _stale(temp, now):
                with contextlib.suppress(FileNotFoundError):
                    temp.unlink()
                    removed += 1
                    logger.info("removed %s, left in the cache by a process that ended", temp.name)
    return removed


def _stale(temp: Path, now: float) -> bool:
    name = temp.name
    if name.endswith(TEMP_SUFFIXES):
        parts = name.split(".")
        # {stem}.{pid}.{thread}.{building|download}
        return len(parts) >= 4 and parts[-3].isdigit() and not _process_exists(int(parts[-3]))
    if name.startswith(PUBLISH_PREFIX):
        try:
            return now - temp.stat().st_mtime > STALE_PUBLISH_SECONDS
        except FileNotFoundError:
            return False
    return False


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        return True
    return True
