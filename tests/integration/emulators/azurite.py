"""Azurite (the Azure Storage emulator), blob service only, from the repo's npm install.

Quirk worth knowing in outage tests: Azurite keeps blob and container metadata in a
LokiJS file that it saves every 5 s and on SIGTERM. ``stop()`` therefore keeps
everything, while ``kill()`` (SIGKILL) loses whatever was written (containers
included) in the last ~5 s: sleep ``persist_seconds`` before a kill that data
must survive.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

from azure.core.exceptions import ResourceExistsError
from azure.storage.blob import BlobServiceClient

from tests.integration.emulators.base import REPO_ROOT, ProcessEmulator

# The SDK logs every request at INFO; keep test output readable.
logging.getLogger("azure.core.pipeline.policies.http_logging_policy").setLevel(logging.WARNING)

ACCOUNT = "devstoreaccount1"
# Azurite's well-known development key (public, documented by Microsoft).
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def azurite_bin() -> Path:
    """The azurite-blob launcher: env AZURITE_BIN, else <repo>/node_modules/.bin."""
    override = os.environ.get("AZURITE_BIN", "").strip()
    return Path(override) if override else REPO_ROOT / "node_modules" / ".bin" / "azurite-blob"


class AzuriteEmulator(ProcessEmulator):
    """Azurite's blob service on a free loopback port, data persisted in ``workdir``."""

    backend = "azureblob"
    persist_seconds = 6.0  # LokiJS autosave interval + margin

    @property
    def connection_string(self) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};"
            f"BlobEndpoint=http://127.0.0.1:{self.port}/{ACCOUNT};"
        )

    def command(self) -> list[str]:
        binary = azurite_bin()
        if not binary.exists():
            raise FileNotFoundError(f"{binary} not found: run `npm ci` in {REPO_ROOT} or set AZURITE_BIN")
        return [
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
