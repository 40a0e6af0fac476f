"""Task-shard worker: ``python -m runtime.server.index.worker SHARD_DB [--base-ns N]``.

Reads frames from stdin (4-byte little-endian length, one byte naming the frame's
bucket (:data:`~runtime.server.replay.route.BUCKETS`), the 4-byte number of lines,
then that many bytes of JSON lines; bucket :data:`CONTEXT` instead carries the session's
:class:`~runtime.server.replay.task_failures.FailureContext`, sent last, and bucket
:data:`SPILLED` the numbers of the buckets the builder kept on disk for this worker;
a zero length ends the input), replays them as
:class:`~runtime.server.replay.shard.TaskShard` s, writes the rows into a fresh
SQLite file ``SHARD_DB`` and prints one JSON line with its counters on stdout.
Every piped frame is replayed as it arrives. For a big session the builder pipes
only the first bucket of the worker's range and writes the others to spill files
(:mod:`runtime.server.index.spill`); the worker replays those one at a time after
the input ends, so memory holds one bucket's tasks.
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
from collections.abc import Iterable, Iterator
from dataclasses import asdict
from itertools import chain
from pathlib import Path
from typing import BinaryIO

import orjson

from runtime.server.index.shard_db import create_bulk_db, write_shards
from runtime.server.index.spill import BucketSpill, remove_spill_files
from runtime.server.replay.shard import TaskShard
from runtime.server.replay.task_failures import FailureContext

FRAME_HEADER = 9
#: The bucket number of the frame that carries the failure context.
CONTEXT = 255
#: The bucket number of the frame that lists the buckets spilled for this worker (one byte each).
SPILLED = 254


def frame(bucket: int, blob: bytes, lines: int) -> bytes:
    """The frame header for ``blob`` of ``bucket``, ``lines`` JSON lines (the parent
    writes it, then the blob)."""
    return len(blob).to_bytes(4, "little") + bytes((bucket,)) + lines.to_bytes(4, "little")


END_OF_INPUT = b"\0\0\0\0"


def serve(shard_path: Path, stdin: BinaryIO, base_ns: int = 0) -> tuple[dict[str, object], list[TaskShard]]:
    """Replay the frames and write the shard; returns the summary and the shards
    still held (kept alive by the caller so that their teardown can be skipped)."""
    live = TaskShard(base_ns)
    trace = os.environ.get("HISTORY_INDEX_TRACE") == "1"
    started = time.process_time()
    try:
        failures, spilled = _read_frames(stdin, live)
        if trace:
            sys.stderr.write(f"worker {shard_path.name}: read in {time.process_time() - started:.2f}s cpu\n")
        conn = create_bulk_db(shard_path)
        try:
            shards: Iterable[TaskShard]
            if not spilled:
                kept = shards = [live]  # kept alive: no teardown
            else:  # the piped bucket is the range's first: the shards stay in key order
                kept, shards = [], chain([live], _replayed(BucketSpill(shard_path), spilled, base_ns, trace))
            del live  # a spilled build frees each bucket once written
            result = write_shards(conn, shards, failures=failures)
            if trace:
                sys.stderr.write(f"worker {shard_path.name}: written after {time.process_time() - started:.2f}s cpu\n")
        finally:
            conn.close()
    finally:
        remove_spill_files(shard_path)
    strays = result.strays
    result.strays = []
    if strays:
        Path(f"{shard_path}.rest").write_bytes(b"\n".join(orjson.dumps(s) for s in strays) + b"\n")
    summary = asdict(result)
    summary["strays"] = len(strays)
    return summary, kept


def _read_frames(stdin: BinaryIO, live: TaskShard) -> tuple[FailureContext | None, list[int]]:
    """Feed the input's frames to ``live``; the failure context, if sent, and the
    spilled buckets, ascending."""
    read = stdin.read
    failures = None
    spilled: list[int] = []
    while True:
        header = read(FRAME_HEADER)  # the end marker is shorter: stdin closes after it
        size = int.from_bytes(header[:4], "little")
        if size == 0 or len(header) < FRAME_HEADER:
            return failures, sorted(spilled)
        bucket = header[4]
        lines = int.from_bytes(header[5:], "little")
        if bucket == CONTEXT:
            failures = FailureContext.from_json(read(size))
        elif bucket == SPILLED:
            spilled.extend(read(size))
        else:
            live.feed_blob(read(size), lines)


def _replayed(spilled: BucketSpill, buckets: list[int], base_ns: int, trace: bool) -> Iterator[TaskShard]:
    """One shard per spilled bucket, replayed when asked for; none is referenced
    here once the next is asked for, so its memory is reused."""
    for bucket in buckets:
        shard = TaskShard(base_ns)
        for blob, lines in spilled.read(bucket):
            shard.feed_blob(blob, lines)
        if trace:
            sys.stderr.write(f"worker {spilled.base.name}: replayed spilled bucket {bucket}\n")
        yield shard
        del shard


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m runtime.server.index.worker")
    parser.add_argument("shard_db", type=Path)
    parser.add_argument("--base-ns", type=int, default=0, help="transition encoding base (see TaskTable)")
    args = parser.parse_args(argv)
    gc.disable()  # millions of long-lived small containers: collections only cost time
    summary, _shards = serve(args.shard_db, sys.stdin.buffer, args.base_ns)
    sys.stdout.buffer.write(orjson.dumps(summary) + b"\n")
    sys.stdout.buffer.flush()
    # Freeing millions of objects one by one is pure cost for a process that ends.
    os._exit(0)


if __name__ == "__main__":
    main()
