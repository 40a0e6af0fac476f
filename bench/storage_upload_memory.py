"""Peak memory of a streamed upload to each storage backend's emulator.

    .venv/bin/python bench/storage_upload_memory.py [--size-gib 2] [--backends local,gcs,s3,azureblob]

For each backend: start its emulator on a loopback port, create a bucket, and in a
fresh subprocess upload one file of --size-gib GiB with ``ObjectStore.put_file``;
print the uploader's peak RSS before (after SDK warm-up) and after the upload.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.integration.emulators.registry import EMULATORS  # noqa: E402

MIB = 1024 * 1024


def make_file(path: Path, size: int) -> None:
    block = os.urandom(8 * MIB)
    with open(path, "wb") as fh:
        for _ in range(size // len(block)):
            fh.write(block)
        fh.write(block[: size % len(block)])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-gib", type=float, default=2.0)
    parser.add_argument("--backends", default=",".join(EMULATORS))
    args = parser.parse_args()
    size = int(args.size_gib * 1024 * MIB)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = set(backends) - set(EMULATORS)
    if unknown:
        parser.error(f"--backends: unknown {sorted(unknown)}; choose from {sorted(EMULATORS)}")

    with tempfile.TemporaryDirectory(prefix="bench-upload-") as tmp:
        work = Path(tmp)
        payload = work / "payload.bin"
        print(f"writing a {size / MIB:.0f} MiB payload ...", flush=True)
        make_file(payload, size)
        print(
            f"{'backend':<10} {'size MiB':>9} {'seconds':>8} {'MiB/s':>7} {'base RSS':>9} {'peak RSS':>9} {'growth':>8}"
        )
        for backend in backends:
            emulator = EMULATORS[backend](work / backend)
            emulator.workdir.mkdir()
            emulator.start()
            try:
                bucket = f"bench-{uuid.uuid4().hex[:12]}"
                emulator.create_bucket(bucket)
                env = {**os.environ, **emulator.env(bucket), "PYTHONPATH": str(REPO)}
                result = subprocess.run(
                    [sys.executable, "-m", "tests.integration.storage.upload_probe", str(payload), "bench/payload.bin"],
                    env=env,
                    cwd=REPO,
                    capture_output=True,
                    text=True,
                    check=False,
                )
                if result.returncode != 0:
                    print(f"{backend:<10} FAILED: {result.stderr.strip()[-500:]}")
                    continue
                fig = json.loads(result.stdout)
                growth = fig["peak_rss"] - fig["baseline_rss"]
                rate = fig["size"] / MIB / fig["seconds"]
                print(
                    f"{backend:<10} {fig['size'] / MIB:>9.0f} {fig['seconds']:>8.1f} {rate:>7.0f}"
                    f" {fig['baseline_rss'] / MIB:>8.0f}M {fig['peak_rss'] / MIB:>8.0f}M {growth / MIB:>7.0f}M",
                    flush=True,
                )
            finally:
                emulator.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
