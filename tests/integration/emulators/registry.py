"""Which emulator serves which backend, and a pool that starts each one once."""

from __future__ import annotations

import logging
from pathlib import Path

from tests.integration.emulators.azurite import AzuriteEmulator
from tests.integration.emulators.base import Emulator
from tests.integration.emulators.gcs import FakeGCSEmulator
from tests.integration.emulators.local import LocalEmulator
from tests.integration.emulators.s3 import MotoS3Emulator

logger = logging.getLogger(__name__)

EMULATORS: dict[str, type[Emulator]] = {
    "local": LocalEmulator,
    "gcs": FakeGCSEmulator,
    "s3": MotoS3Emulator,
    "azureblob": AzuriteEmulator,
}
#: Backends served by a separate process that an outage test can kill.
PROCESS_BACKENDS = ("gcs", "s3", "azureblob")


class EmulatorPool:
    """Starts each emulator on first use and stops them all at the end."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self._running: dict[str, Emulator] = {}

    def get(self, backend: str) -> Emulator:
        if backend not in self._running:
            emulator = EMULATORS[backend](self.workdir / backend)
            emulator.workdir.mkdir(parents=True, exist_ok=True)
            emulator.start()
            self._running[backend] = emulator
        return self._running[backend]

    def stop_all(self) -> None:
        for backend, emulator in self._running.items():
            try:
                emulator.stop()
            except Exception:
                logger.exception("stopping %s emulator failed", backend)
        self._running.clear()
