"""Finding the Ray processes a quickstart left behind, and only those."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

from runtime.quickstart.processes import kill_leftovers, processes_mentioning

REPO = Path(__file__).resolve().parents[3]


def test_a_stray_process_naming_the_marker_is_found_and_stopped() -> None:
    marker = f"/tmp/rayqs-test-{uuid.uuid4().hex}"
    stray = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", marker])
    try:
        assert [proc.pid for proc in processes_mentioning(marker)] == [stray.pid]
        assert kill_leftovers(marker, grace=5) == 1
        assert stray.wait(timeout=5) is not None
    finally:
        stray.kill()
        stray.wait()


def test_ancestors_that_name_the_marker_are_spared() -> None:
    # Like `timeout 600 python -m runtime.quickstart --ray-temp-dir=DIR`: the wrapper's
    # arguments name DIR, and stopping it would stop the quickstart with it.
    marker = f"/tmp/rayqs-test-{uuid.uuid4().hex}"
    child = (
        f"from runtime.quickstart.processes import processes_mentioning; print(len(processes_mentioning({marker!r})))"
    )
    wrapper = f"import subprocess, sys; sys.exit(subprocess.call([sys.executable, '-c', {child!r}]))"
    result = subprocess.run(
        [sys.executable, "-c", wrapper, f"--ray-temp-dir={marker}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert result.stdout.strip() == "0", result.stderr
