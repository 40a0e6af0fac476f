"""Task-shard worker subprocesses fed over their stdin by writer threads.

The router hands over batches per bucket (:data:`~runtime.server.replay.route.BUCKETS`);
worker ``n`` of ``N`` takes buckets ``[16n/N, 16(n+1)/N)``, an ascending id range.
Each worker gets a bounded queue: the router never waits on one slow worker while
the others idle, and memory stays bounded (``queue_frames`` batches per worker).
Pipe writes release the GIL, so feeding costs the routing thread little.

With ``spill`` (a big session) a worker's writer thread pipes only the first bucket
of its range, which the worker replays as it arrives, and compresses the others into
the worker's spill files (:mod:`runtime.server.index.spill`; zstd releases the GIL
too); the worker replays them one at a time once its input ends. Those bytes cross
no pipe and are compressed once, where the worker used to read them from the pipe
and compress them itself.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any

import orjson
import zstandard

import runtime
from runtime.server.index.cpus import killed_hint
from runtime.server.index.spill import BucketSpill, remove_spill_files
from runtime.server.index.worker import CONTEXT, END_OF_INPUT, SPILLED, frame
from runtime.server.replay.route import BUCKETS
from runtime.server.replay.task_failures import FailureContext

logger = logging.getLogger(__name__)

_REPO_ROOT = str(Path(runtime.__file__).resolve().parents[1])


def python_env() -> dict[str, str]:
    """The environment of our child interpreters: ours, with this package importable
    (the server may run from a checkout rather than an installed wheel)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_REPO_ROOT, env.get("PYTHONPATH", "")) if p)
    return env


#: Linux's default pipe holds 64 KiB: a 1 MiB frame took ~16 writes, each a
#: wake-up of the worker and a hand-over of the GIL in the builder. 1 MiB is the
#: default ceiling for an unprivileged process (``/proc/sys/fs/pipe-max-size``).
PIPE_BYTES = 1 << 20


def _widen_pipe(pipe: IO[bytes] | None) -> None:
    """Best effort: a bigger pipe buffer (Linux only; refused above the system's ceiling)."""
    set_size = getattr(fcntl, "F_SETPIPE_SZ", None)
    if pipe is None or set_size is None:
        return
    with contextlib.suppress(OSError):
        fcntl.fcntl(pipe.fileno(), set_size, PIPE_BYTES)


class WorkerError(RuntimeError):
    """A shard worker failed; the build cannot complete."""


class WorkerPool:
    def __init__(self, shard_paths: list[Path], base_ns: int = 0, queue_frames: int = 8, spill: bool = False) -> None:
        """``spill``: workers replay the first bucket of their range as it arrives and
        the others one at a time from spill files written here (:mod:`runtime.server.index.spill`)."""
        self.shard_paths = shard_paths
        env = python_env()
        self._procs: list[subprocess.Popen[bytes]] = []
        self._stderr: list[IO[bytes]] = []
        self._queues: list[queue.Queue[tuple[int, bytes, int] | None]] = []
        self._worker_of = [bucket * len(shard_paths) // BUCKETS for bucket in range(BUCKETS)]
        self._threads: list[threading.Thread] = []
        self._errors: list[BaseException] = []
        self._spills: list[BucketSpill | None] = []
        for n, path in enumerate(shard_paths):
            err = open(f"{path}.stderr", "w+b")  # noqa: SIM115 - closed in close()
            proc = subprocess.Popen(  # noqa: S603 - our own module, our interpreter
                [sys.executable, "-m", "runtime.server.index.worker", str(path), f"--base-ns={base_ns}"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                env=env,
            )
            _widen_pipe(proc.stdin)
            frames: queue.Queue[tuple[int, bytes, int] | None] = queue.Queue(maxsize=queue_frames)
            spilled = BucketSpill(path) if spill else None
            piped = self._worker_of.index(n)  # the range's first bucket
            thread = threading.Thread(
                target=self._feed, args=(proc, frames, spilled, piped), name=f"shard-feed-{n}", daemon=True
            )
            thread.start()
            self._procs.append(proc)
            self._spills.append(spilled)
            self._stderr.append(err)
            self._queues.append(frames)
            self._threads.append(thread)

    def _feed(
        self,
        proc: subprocess.Popen[bytes],
        frames: queue.Queue[tuple[int, bytes, int] | None],
        spilled: BucketSpill | None,
        piped: int,
    ) -> None:
        """Pipe the frames to the worker, or spill those of other buckets than
        ``piped`` (with ``spilled``); then the list of spilled buckets and the end."""
        stdin = proc.stdin
        if stdin is None:
            raise WorkerError("worker started without a stdin pipe")
        try:
            while True:
                item = frames.get()
                if item is None:
                    if spilled is not None:
                        buckets = bytes(spilled.finish())
                        if buckets:
                            stdin.write(frame(SPILLED, buckets, 0))
                            stdin.write(buckets)
                    stdin.write(END_OF_INPUT)
                    break
                bucket, blob, lines = item
                if spilled is not None and bucket not in (piped, CONTEXT):
                    spilled.write(bucket, blob, lines)
                    continue
                stdin.write(frame(bucket, blob, lines))
                stdin.write(blob)
            stdin.close()
        except (OSError, zstandard.ZstdError) as exc:  # a worker gone (broken pipe), a full disk
            self._errors.append(exc)
            with contextlib.suppress(OSError):
                stdin.close()  # the worker reads a cut input and stops; its result is not used
            while frames.get() is not None:  # keep the producer unblocked
                pass

    def send(self, bucket: int, blob: bytes, lines: int) -> None:
        """A :class:`~runtime.server.replay.route.Router` sink (``Router(BUCKETS, ...)``)."""
        if self._errors:
            raise WorkerError(f"a shard worker stopped reading: {self._errors[0]}")
        self._queues[self._worker_of[bucket]].put((bucket, blob, lines))

    def finish(self, failures: FailureContext | None = None, timeout: float | None = None) -> list[dict[str, Any]]:
        """Send ``failures`` (what the renderers need of the rest of the session), end
        the inputs, wait for every worker, return their summaries."""
        context = failures.to_json() if failures is not None else None
        for frames in self._queues:
            if context is not None:
                frames.put((CONTEXT, context, 0))
            frames.put(None)
        for thread in self._threads:
            thread.join(timeout)
        if self._errors:  # a worker that got part of its input must not be trusted
            raise WorkerError(f"feeding a shard worker failed: {self._errors[0]}")
        results = []
        for n, proc in enumerate(self._procs):
            if proc.stdout is None:
                raise WorkerError("worker started without a stdout pipe")
            out = proc.stdout.read()  # the summary line; EOF when the worker exits
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired as exc:
                raise WorkerError(f"shard worker {n} did not finish in time") from exc
            if proc.returncode != 0:
                self._stderr[n].seek(0)
                tail = self._stderr[n].read()[-2000:].decode("utf-8", "replace")
                hint = killed_hint(proc.returncode)
                raise WorkerError(f"shard worker {n} exited with {proc.returncode}{hint}: {tail}")
            results.append(orjson.loads(out.splitlines()[-1]))
        return results

    def traces(self) -> list[str]:
        """What the workers wrote on stderr (diagnostics)."""
        out = []
        for err in self._stderr:
            err.seek(0)
            out.append(err.read().decode("utf-8", "replace"))
        return out

    def close(self) -> None:
        """Kill whatever still runs and drop the side files (not the shard DBs)."""
        for frames in self._queues:  # release feeder threads still waiting for input
            with contextlib.suppress(queue.Full):
                frames.put(None, timeout=1.0)
        for proc in self._procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for err in self._stderr:
            err.close()
        for thread in self._threads:  # their workers are gone: a write fails at once
            thread.join(5.0)
        for spilled in self._spills:
            if spilled is not None and not any(thread.is_alive() for thread in self._threads):
                spilled.remove()
        for path in self.shard_paths:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{path}.stderr")
            remove_spill_files(path)  # a worker killed before it cleaned up, or spilled to by us
