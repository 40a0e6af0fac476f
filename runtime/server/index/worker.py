"""Task-shard worker: ``python -m runtime.server.index.worker SHARD_DB [--indexes] [--base-ns N]``.

Reads frames from stdin (4-byte little-endian length, then that many bytes of JSON
lines; a zero length ends the input), replays them as one
:class:`~runtime.server.replay.shard.TaskShard`, writes the rows into a fresh
SQLite file ``SHARD_DB`` and prints one JSON line with its counters on stdout.
Events that are not task events go to ``SHARD_DB.rest`` (JSON lines) for the
parent. A plain subprocess of our interpreter, like the whole-build child
(:mod:`runtime.server.index.child`) that may be the one starting it.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import BinaryIO

import orjson

from runtime.server.index.shard_db import create_bulk_db, write_shard
from runtime.server.replay.shard import TaskShard

FRAME_HEADER = 4


def serve(
    shard_path: Path, stdin: BinaryIO, indexes: bool = False, base_ns: int = 0
) -> tuple[dict[str, object], TaskShard]:
    """Replay the frames and write the shard; returns the summary and the shard
    (kept alive by the caller so that its teardown can be skipped)."""
    read = stdin.read
    shard = TaskShard(base_ns)
    trace = os.environ.get("HISTORY_INDEX_TRACE") == "1"
    started = time.process_time()
    while True:
        header = read(FRAME_HEADER)
        if len(header) < FRAME_HEADER:
            break
        size = int.from_bytes(header, "little")
        if size == 0:
            break
        shard.feed_blob(read(size))
    if trace:
        sys.stderr.write(f"worker {shard_path.name}: replayed in {time.process_time() - started:.2f}s cpu\n")
    conn = create_bulk_db(shard_path)
    try:
        result = write_shard(conn, shard, indexes=indexes)
        if trace:
            sys.stderr.write(f"worker {shard_path.name}: written after {time.process_time() - started:.2f}s cpu\n")
    finally:
        conn.close()
    strays = result.strays
    result.strays = []
    if strays:
        Path(f"{shard_path}.rest").write_bytes(b"\n".join(orjson.dumps(s) for s in strays) + b"\n")
    summary = asdict(result)
    summary["strays"] = len(strays)
    return summary, shard


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m runtime.server.index.worker")
    parser.add_argument("shard_db", type=Path)
    parser.add_argument("--indexes", action="store_true", help="create the task tables' secondary indexes")
    parser.add_argument("--base-ns", type=int, default=0, help="transition encoding base (see TaskTable)")
    args = parser.parse_args(argv)
    gc.disable()  # millions of long-lived small containers: collections only cost time
    summary, _shard = serve(args.shard_db, sys.stdin.buffer, args.indexes, args.base_ns)
    sys.stdout.buffer.write(orjson.dumps(summary) + b"\n")
    sys.stdout.buffer.flush()
    # Freeing millions of objects one by one is pure cost for a process that ends.
    os._exit(0)


if __name__ == "__main__":
    main()
