"""Shared session indexes (#18 item 4): upload and download+verify through fake-gcs-server.

    .venv/bin/python bench/server_shared_index.py [--tasks 100000 1000000] [--cache-dir /tmp/rhs-synth]
                                                  [--backend gcs] [--repeat 2]

For each size, the synthetic session of ``bench/synth_session.py`` (cached in
``--cache-dir``, shared with ``server_cold_load.py``) is indexed once (the index is
cached there too, per index version), then published to a fresh bucket of the emulator
the way ``--shared-index write`` does (sha256, upload, sha256 again, manifest) and
fetched the way a cache miss does (manifest, parallel ranged reads hashed in order,
size + sha256 + meta checks). Prints the index size, upload seconds, download+verify
seconds, a plain sha256 pass over the file for comparison, and a 10-million-iteration
Python loop (this machine's speed at the time).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.server_cold_load import CLUSTER, ensure_session  # noqa: E402
from bench.server_load import loop_seconds  # noqa: E402
from bench.synth_session import SESSION  # noqa: E402
from runtime.server.index.fingerprint import fingerprints  # noqa: E402
from runtime.server.index.shared import SharedIndexes, index_version  # noqa: E402
from runtime.server.metrics import ServerMetrics  # noqa: E402
from runtime.storage.config import StorageConfig, open_store  # noqa: E402
from runtime.storage.layout import KeyLayout  # noqa: E402
from tests.integration.emulators.registry import EMULATORS  # noqa: E402

LAYOUT = KeyLayout("")
MIB = 1024 * 1024


def ensure_index(cache: Path, store_dir: Path, tasks: int) -> tuple[Path, str, float | None]:
    """The session's index (built once per index version), its events fingerprint, build seconds."""
    from runtime.server.index.build import build_index

    store = open_store(StorageConfig(backend="local", local_dir=str(store_dir)))
    prefix = LAYOUT.session_prefix(CLUSTER, SESSION)
    listing = list(store.walk(prefix))
    events_fp, _ = fingerprints(listing, prefix)
    index = cache / f"index-{tasks}-{index_version()}-{events_fp[:12]}.sqlite"
    if index.exists():
        return index, events_fp, None
    print(f"indexing the {tasks}-task session ...", flush=True)
    tmp = index.with_suffix(".building")
    started = time.perf_counter()
    build_index(store, LAYOUT, CLUSTER, SESSION, tmp, listing=listing)
    os.replace(tmp, index)
    return index, events_fp, time.perf_counter() - started


def sha_seconds(path: Path) -> float:
    started = time.perf_counter()
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(8 * MIB):
            h.update(chunk)
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, nargs="+", default=[100_000])
    parser.add_argument("--cache-dir", default=str(Path(tempfile.gettempdir()) / "rhs-synth"))
    parser.add_argument("--backend", default="gcs", choices=sorted(set(EMULATORS) - {"local"}))
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args(argv)
    cache = Path(args.cache_dir)
    cache.mkdir(parents=True, exist_ok=True)
    print(f"cores: {len(os.sched_getaffinity(0))}, load average: {os.getloadavg()[0]:.2f}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-shared-index-", dir=cache) as tmp:
        work = Path(tmp)
        emulator = EMULATORS[args.backend](work / args.backend)
        emulator.workdir.mkdir()
        emulator.start()
        try:
            for tasks in args.tasks:
                store_dir = ensure_session(cache, tasks, False)
                index, events_fp, built = ensure_index(cache, store_dir, tasks)
                size = index.stat().st_size
                bucket = f"b-{uuid.uuid4().hex[:12]}"
                emulator.create_bucket(bucket)
                # The session's own objects bound what a download may decompress to.
                with open_store(StorageConfig(backend="local", local_dir=str(store_dir))) as events_store:
                    listing = list(events_store.walk(LAYOUT.session_prefix(CLUSTER, SESSION)))
                with emulator.make_store(bucket) as store:
                    shared = SharedIndexes(store, LAYOUT, "write", ServerMetrics())
                    built_text = f", built in {built:.1f} s" if built is not None else ""
                    print(f"{tasks:>9} tasks: index {size / MIB:.0f} MiB{built_text}", flush=True)
                    for run in range(args.repeat):
                        started = time.perf_counter()
                        with open(index, "rb") as fh:
                            if not shared.publish(CLUSTER, SESSION, events_fp, fh):
                                raise SystemExit("upload failed")
                        upload = time.perf_counter() - started
                        dest = work / "fetched.sqlite"
                        started = time.perf_counter()
                        ok = shared.fetch(CLUSTER, SESSION, events_fp, dest, lambda *_: None, listing=listing)
                        fetch = time.perf_counter() - started
                        if not ok:
                            raise SystemExit("download rejected")
                        dest.unlink()
                        packed = store.stat(shared.keys(CLUSTER, SESSION, events_fp)[0]).size
                        print(
                            f"  run {run + 1}: stored {packed / MIB:.0f} MiB (zstd), "
                            f"upload {upload:6.2f} s (compress + 2 sha256 passes + upload), "
                            f"download+verify {fetch:6.2f} s ({size / MIB / fetch:.0f} MiB/s of index), "
                            f"sha256 alone {sha_seconds(index):.2f} s, "
                            f"10M-iteration Python loop {loop_seconds():.2f} s, load {os.getloadavg()[0]:.2f}",
                            flush=True,
                        )
        finally:
            emulator.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
