"""Run ``ray-history`` as a user does: a separate process, stdout/stderr captured."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping

from tests.integration.emulators.base import REPO_ROOT


def run_cli(*args: str, env: Mapping[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("RAY_HISTORY_SERVER", "STORAGE_BACKEND")}
    return subprocess.run(
        [sys.executable, "-m", "runtime.cli.main", *args],
        cwd=REPO_ROOT,
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
