"""The collector sidecar loads no history-server dependency (its image does not even
install them: the `collector` extra of pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys

SERVER_ONLY = ("flask", "gunicorn", "kubernetes", "rich")


def test_collector_entry_point_and_app_load_no_server_dependency() -> None:
    # A fresh interpreter: this one has loaded the server for other tests.
    code = (
        "import sys, runtime.collector.main, runtime.collector.app\n"
        f"print(sorted(name for name in {SERVER_ONLY!r} if name in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    assert out.strip() == "[]"
