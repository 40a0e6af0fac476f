"""Child processes the quickstart starts: each in its own session (process group),
so the terminal's Ctrl-C reaches only the quickstart, which then stops them in
order, and stopping one stops everything it spawned."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import psutil  # type: ignore[import-untyped]  # no stubs; ships with ray[default]

logger = logging.getLogger(__name__)


class ManagedProcess:
    """A command started in a new session with its output in a log file."""

    def __init__(self, name: str, cmd: Sequence[str], env: Mapping[str, str], log_path: Path) -> None:
        self.name = name
        self.cmd = list(cmd)
        self.env = dict(env)
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(  # noqa: S603 - our own executables, no shell
                self.cmd,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        logger.debug("started %s (pid %d): %s", self.name, self.proc.pid, " ".join(self.cmd))

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise RuntimeError(f"{self.name} is not running")
        return self.proc.pid

    def exit_code(self) -> int | None:
        """``None`` while running (or never started)."""
        return None if self.proc is None else self.proc.poll()

    def terminate(self, timeout: float) -> int | None:
        """SIGTERM the main process only (a collector's graceful shutdown), wait, then
        kill the whole group. Returns the exit code, ``None`` if it had to be killed."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code: int | None = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            logger.warning("%s did not stop within %.0f s; killing it", self.name, timeout)
            code = None
        self._kill_group()
        return code

    def stop_group(self, timeout: float) -> None:
        """SIGTERM the whole process group, wait, then SIGKILL whatever is left in it."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=timeout)
        self._kill_group()

    def _kill_group(self) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        self.proc = None

    def log_tail(self, lines: int = 30) -> str:
        return tail(self.log_path, lines)


def tail(path: Path, lines: int = 30) -> str:
    """The last ``lines`` lines of a text file ('' if it does not exist)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 64 * 1024))
            data = handle.read()
    except OSError:
        return ""
    return "\n".join(data.decode(errors="replace").splitlines()[-lines:])


def processes_mentioning(marker: str) -> list[psutil.Process]:
    """Processes whose command line contains ``marker`` (a unique temp dir), other
    than this one and its ancestors: Ray daemons that left the process group
    (workers, the agent). An ancestor (``timeout``, a wrapper script) may carry the
    marker in its own arguments, and stopping it would stop us."""
    found: list[psutil.Process] = []
    me = psutil.Process()
    spared = {me.pid, *(parent.pid for parent in me.parents())}
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = proc.info.get("cmdline") or []
        if proc.info["pid"] not in spared and any(marker in part for part in cmdline):
            found.append(proc)
    return found


def kill_leftovers(marker: str, grace: float = 5.0) -> int:
    """SIGTERM, then SIGKILL, every process mentioning ``marker``; returns how many there were."""
    leftovers = processes_mentioning(marker)
    for proc in leftovers:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _, alive = psutil.wait_procs(leftovers, timeout=grace)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(alive, timeout=grace)
    return len(leftovers)


def wait_until(check: Callable[[], bool], timeout: float, interval: float = 0.5) -> bool:
    """Poll ``check`` until it is true (returns True) or ``timeout`` passes (False)."""
    deadline = time.monotonic() + timeout
    while True:
        if check():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
