"""A large upload keeps flat memory on every backend: the uploading process's peak
RSS grows by far less than the object's size (bench/ measures 2 GiB)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.emulators.base import Emulator

pytestmark = pytest.mark.integration

SIZE = 256 * 1024 * 1024
MAX_GROWTH = 32 * 1024 * 1024  # measured 4-8 MiB; buffering the object would be 256
REPO = Path(__file__).resolve().parents[3]


def make_file(path: Path, size: int) -> None:
    block = os.urandom(4 * 1024 * 1024)
    with open(path, "wb") as fh:
        for _ in range(size // len(block)):
            fh.write(block)
        fh.write(block[: size % len(block)])


@pytest.fixture(scope="module")
def big_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("big") / "payload.bin"
    make_file(path, SIZE)
    return path


def test_large_upload_has_flat_memory(emulator: Emulator, bucket: str, big_file: Path) -> None:
    env = {**os.environ, **emulator.env(bucket), "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-m", "tests.integration.storage.upload_probe", str(big_file), "big/payload.bin"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads(result.stdout)
    assert figures["size"] == SIZE
    growth = figures["peak_rss"] - figures["baseline_rss"]
    assert growth < MAX_GROWTH, (
        f"{emulator.backend}: peak RSS grew by {growth / 2**20:.0f} MiB for a {SIZE >> 20} MiB upload"
    )
