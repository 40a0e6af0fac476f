"""Subprocess body for memory tests and the upload benchmark.

Builds a store from the environment, warms it up with a small upload (so SDK
imports and connection pools are counted in the baseline), then streams a file
and prints JSON with the peak RSS before and after.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from runtime.storage.config import StorageConfig, open_store


def peak_rss_bytes() -> int:
    """This process's peak RSS. Not ``ru_maxrss``: Linux carries that across exec, so a
    child would start with its parent's high-water mark and hide its own growth.
    VmHWM belongs to the address space, which exec replaces."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024  # kB
    raise RuntimeError("no VmHWM in /proc/self/status")


def main() -> None:
    path, key = sys.argv[1], sys.argv[2]
    store = open_store(StorageConfig.from_env())
    store.put_bytes(key + ".warmup", b"x" * 1024)
    store.get_bytes(key + ".warmup")
    baseline = peak_rss_bytes()
    started = time.perf_counter()
    store.put_file(key, path)
    seconds = time.perf_counter() - started
    size = store.stat(key).size
    store.close()
    json.dump(
        {"baseline_rss": baseline, "peak_rss": peak_rss_bytes(), "seconds": seconds, "size": size},
        sys.stdout,
    )


if __name__ == "__main__":
    main()
