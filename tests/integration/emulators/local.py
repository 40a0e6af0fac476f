"""The ``local`` backend as an "emulator": a bucket is a directory."""

from __future__ import annotations

from runtime.storage.base import ObjectStore
from runtime.storage.retry import RetryPolicy
from tests.integration.emulators.base import Emulator


class LocalEmulator(Emulator):
    backend = "local"

    def start(self) -> None:
        (self.workdir / "buckets").mkdir(parents=True, exist_ok=True)

    def stop(self) -> None:
        """Nothing runs."""

    def kill(self) -> None:
        raise RuntimeError("a local directory has no process to kill")

    def create_bucket(self, bucket: str) -> None:
        (self.workdir / "buckets" / bucket).mkdir(parents=True, exist_ok=True)

    def env(self, bucket: str) -> dict[str, str]:
        return {"STORAGE_BACKEND": "local", "LOCAL_STORAGE_DIR": str(self.workdir / "buckets" / bucket)}

    def make_store(self, bucket: str, retry: RetryPolicy | None = None) -> ObjectStore:
        return super().make_store(bucket, retry)
