"""What every storage emulator fixture offers the test suites.

An emulator is a real server process (fake-gcs-server, moto, Azurite) on a free
loopback port. It can be killed and restarted on the same port (and, where the
emulator persists, the same data) to test outages.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import IO

from runtime.storage.base import ObjectStore
from runtime.storage.retry import RetryPolicy

logger = logging.getLogger(__name__)
REPO_ROOT = Path(__file__).resolve().parents[3]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, timeout: float = 30.0, proc: subprocess.Popen[bytes] | None = None) -> None:
    """Block until something accepts connections on 127.0.0.1:port."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"emulator exited with code {proc.returncode} before listening on {port}")
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.settimeout(0.5)
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"nothing listening on 127.0.0.1:{port} after {timeout}s")


class Emulator(ABC):
    """A storage service for tests: start/stop/kill/restart plus a store factory."""

    #: backend name as on the command line (local, gcs, s3, azureblob)
    backend: str
    #: seconds the emulator needs before a SIGKILL keeps what was just written
    persist_seconds: float = 0.0
    #: whether objects survive kill + restart at all
    keeps_data_across_restart: bool = True

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir

    @abstractmethod
    def start(self) -> None:
        """Start the emulator and wait until it answers."""

    @abstractmethod
    def stop(self) -> None:
        """Stop the emulator (graceful, then SIGKILL); idempotent."""

    @abstractmethod
    def kill(self) -> None:
        """SIGKILL the emulator process, keeping its port and data dir for restart."""

    def restart(self) -> None:
        """Start again on the same port (after kill/stop)."""
        self.start()

    @abstractmethod
    def create_bucket(self, bucket: str) -> None:
        """Create a bucket/container directly (test set-up, bypassing the store)."""

    @abstractmethod
    def env(self, bucket: str) -> dict[str, str]:
        """Environment variables that point a collector/server process at this
        emulator and bucket (STORAGE_BACKEND plus the backend's own variables)."""

    def make_store(self, bucket: str, retry: RetryPolicy | None = None) -> ObjectStore:
        """An ObjectStore built the production way: from env(), through the factory."""
        from runtime.storage.config import StorageConfig, open_store

        config = StorageConfig.from_env(self.env(bucket))
        return open_store(config, retry=retry)

    def make_store_unchecked(self, bucket: str, retry: RetryPolicy | None = None) -> ObjectStore:
        """Like :meth:`make_store` but without verifying the bucket (to test that)."""
        from runtime.storage.config import StorageConfig, open_store

        return open_store(StorageConfig.from_env(self.env(bucket)), retry=retry, check=False)


class ProcessEmulator(Emulator):
    """An emulator that is one server process (and its children) on a fixed port.

    Subclasses give the command line and, if the port opens before the API
    answers, a readiness probe. The process runs in its own process group so
    ``kill`` takes any children with it; its output goes to ``{name}.log``.
    """

    #: seconds to wait for the port / for a graceful stop
    start_timeout: float = 60.0
    stop_timeout: float = 10.0

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        self.port = free_port()  # chosen once: a restart comes back on the same port
        self.data_dir = workdir / "data"
        self.log_path = workdir / f"{type(self).__name__}.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @abstractmethod
    def command(self) -> list[str]:
        """The server's command line."""

    def wait_ready(self, deadline: float) -> None:
        """Block until the API answers (after the port accepts connections)."""

    def start(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            return
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cmd = self.command()
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in _reap
        logger.info("starting %s", " ".join(cmd))
        self._proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=REPO_ROOT,
            start_new_session=True,
        )
        deadline = time.monotonic() + self.start_timeout
        try:
            wait_for_port(self.port, timeout=self.start_timeout, proc=self._proc)
            self.wait_ready(deadline)
        except BaseException as exc:
            self.kill()
            raise RuntimeError(f"{type(self).__name__} did not start ({exc}); see {self.log_path}") from exc

    def stop(self) -> None:
        if self._proc is None:
            return
        self._signal(signal.SIGTERM)
        try:
            self._proc.wait(timeout=self.stop_timeout)
        except subprocess.TimeoutExpired:
            logger.warning("%s did not stop within %.0f s; killing it", type(self).__name__, self.stop_timeout)
        self.kill()

    def kill(self) -> None:
        self._signal(signal.SIGKILL)
        if self._proc is not None:
            try:
                self._proc.wait(timeout=10.0)
            except subprocess.TimeoutExpired:
                logger.error("%s pid %d survived SIGKILL", type(self).__name__, self._proc.pid)
            self._proc = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def _signal(self, sig: signal.Signals) -> None:
        if self._proc is not None and self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, sig)  # pgid == pid thanks to start_new_session
