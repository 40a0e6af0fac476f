"""Azurite (the Azure Storage emulator), blob service only, from the repo's npm install.

Quirk worth knowing in outage tests: Azurite keeps blob and container metadata in a
LokiJS file that it saves every 5 s and on SIGTERM. ``stop()`` therefore keeps
everything, while ``kill()`` (SIGKILL) loses whatever was written (containers
included) in the last ~5 s: sleep ``PERSIST_INTERVAL`` before a kill that data
must survive.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
from pathlib import Path
from typing import IO

from azure.core.exceptions import ResourceExistsError
from azure.storage.blob import BlobServiceClient

from tests.integration.emulators.base import Emulator, free_port, wait_for_port

logger = logging.getLogger(__name__)
# The SDK logs every request at INFO; keep test output readable.
logging.getLogger("azure.core.pipeline.policies.http_logging_policy").setLevel(logging.WARNING)

REPO_ROOT = Path(__file__).resolve().parents[3]
#: Seconds after which Azurite has saved a write to disk (its LokiJS autosave + margin).
PERSIST_INTERVAL = 6.0
ACCOUNT = "devstoreaccount1"
# Azurite's well-known development key (public, documented by Microsoft).
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def azurite_bin() -> Path:
    """The azurite-blob launcher: env AZURITE_BIN, else <repo>/node_modules/.bin."""
    override = os.environ.get("AZURITE_BIN", "").strip()
    return Path(override) if override else REPO_ROOT / "node_modules" / ".bin" / "azurite-blob"


class AzuriteEmulator(Emulator):
    """Azurite's blob service on a free loopback port, data persisted in ``workdir``."""

    backend = "azureblob"
    persist_seconds = PERSIST_INTERVAL

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        self.port = free_port()  # kept across restarts
        self.data_dir = workdir / "data"
        self.log_path = workdir / "azurite.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def connection_string(self) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};"
            f"BlobEndpoint=http://127.0.0.1:{self.port}/{ACCOUNT};"
        )

    def start(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            return
        binary = azurite_bin()
        if not binary.exists():
            raise FileNotFoundError(f"{binary} not found: run `npm ci` in {REPO_ROOT} or set AZURITE_BIN")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cmd = [
            str(binary),
            "--blobHost", "127.0.0.1",
            "--blobPort", str(self.port),
            "--location", str(self.data_dir),
            "--silent",
            "--skipApiVersionCheck",  # newer SDKs send API versions Azurite may not know yet
            "--loose",
            "--disableProductStyleUrl",  # account name from the path, whatever the host
            "--disableTelemetry",
        ]  # fmt: skip
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in _reap
        # Own session/process group, so kill() also takes any child node process.
        self._proc = subprocess.Popen(
            cmd, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
        try:
            wait_for_port(self.port, timeout=60.0, proc=self._proc)
        except Exception:
            self.kill()
            raise RuntimeError(f"Azurite did not start; see {self.log_path}") from None
        logger.info("azurite listening on 127.0.0.1:%d (pid %d)", self.port, self._proc.pid)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)
        self._reap(timeout=10.0)

    def stop(self) -> None:
        if self._proc is None:
            return
        self._signal(signal.SIGTERM)  # Azurite saves its metadata DB on SIGTERM
        try:
            self._proc.wait(timeout=10.0)
        except subprocess.TimeoutExpired:
            logger.warning("azurite did not stop within 10 s; killing it")
        self.kill()

    def _signal(self, sig: signal.Signals) -> None:
        if self._proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._proc.pid, sig)  # pgid == pid thanks to start_new_session

    def _reap(self, timeout: float) -> None:
        if self._proc is not None:
            try:
                self._proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                logger.error("azurite pid %d survived SIGKILL", self._proc.pid)
            self._proc = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def create_bucket(self, bucket: str) -> None:
        with (
            BlobServiceClient.from_connection_string(self.connection_string) as client,
            contextlib.suppress(ResourceExistsError),
        ):
            client.create_container(bucket)

    def env(self, bucket: str) -> dict[str, str]:
        return {
            "STORAGE_BACKEND": "azureblob",
            "AZURE_STORAGE_CONTAINER": bucket,
            "AZURE_STORAGE_CONNECTION_STRING": self.connection_string,
        }
