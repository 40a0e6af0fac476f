"""A whole index build in a child process: ``python -m runtime.server.index.child``.

Big sessions are built outside the serving process so that its RSS stays small
after replaying them. The child is a plain subprocess of our interpreter, the same
mechanism as the task-shard workers it starts (:mod:`runtime.server.index.pool`):
one mechanism for a cold load, and none of multiprocessing's limits (a daemonic
multiprocessing child may not start children; ``spawn`` re-runs the parent's main
module; ``fork`` is unsafe in a threaded server).

Protocol: the parent writes one frame on stdin (8-byte little-endian length, then
the pickled :class:`BuildRequest`; the child trusts its parent as multiprocessing
does) and keeps stdin open; the child writes JSON lines on stdout: any number of
``{"progress": [phase, done, total]}`` (at most every ``PROGRESS_INTERVAL`` seconds
and on each phase change), then the answer ``{"status": "ok"|"error", "message": ...}``.
EOF on stdin before the answer means the parent is gone: the child exits rather
than finish a build nobody will use.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import orjson

from runtime.server.index.cpus import killed_hint
from runtime.server.index.pool import python_env
from runtime.server.index.progress import ProgressCallback, no_progress
from runtime.server.load_errors import SessionLoadError
from runtime.storage.base import ObjectInfo
from runtime.storage.config import StorageConfig
from runtime.storage.layout import ClusterRef

FRAME_HEADER = 8
#: How long the child gets to exit once stdin is closed, before SIGKILL.
REAP_SECONDS = 5.0
PROGRESS_INTERVAL = 0.25


@dataclass(frozen=True)
class BuildRequest:
    storage: StorageConfig
    cluster: ClusterRef
    session: str
    out: str
    listing: list[ObjectInfo]


def build_in_child(
    *,
    storage: StorageConfig,
    cluster: ClusterRef,
    session: str,
    out: Path,
    listing: Sequence[ObjectInfo],
    timeout: float,
    progress: ProgressCallback = no_progress,
) -> None:
    """Build ``out`` in a child process; SessionLoadError when it fails, dies or
    takes longer than ``timeout`` seconds (then it is killed). ``progress`` hears
    what the child reports."""
    request = pickle.dumps(BuildRequest(storage, cluster, session, str(out), list(listing)))
    proc = subprocess.Popen(
        [sys.executable, "-m", "runtime.server.index.child"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=python_env(),
    )
    stdin, stdout = proc.stdin, proc.stdout
    if stdin is None or stdout is None:
        raise SessionLoadError(f"indexing {session} failed: the builder process has no pipes")
    try:
        with contextlib.suppress(BrokenPipeError):  # it died at start: reported below
            stdin.write(len(request).to_bytes(FRAME_HEADER, "little") + request)
            stdin.flush()
        line = _answer(stdout.fileno(), time.monotonic() + timeout, progress)
        if line is None:
            raise SessionLoadError(f"indexing {session} took longer than {timeout:.0f} s; it was stopped")
    finally:
        with contextlib.suppress(BrokenPipeError):
            stdin.close()  # a child still building takes this as the order to stop
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(REAP_SECONDS)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        stdout.close()
    try:
        answer = orjson.loads(line)
        status, message = str(answer["status"]), str(answer["message"])
    except (orjson.JSONDecodeError, KeyError, TypeError):
        status = "error"
        message = f"the index builder process died (exit code {proc.returncode}){killed_hint(proc.returncode)}"
    if status != "ok":
        raise SessionLoadError(f"indexing {session} failed: {message}")


def _answer(fd: int, deadline: float, progress: ProgressCallback) -> bytes | None:
    """The child's answer line (``b""`` if it died first), passing its progress
    lines on; None when ``deadline`` passed first."""
    pending = b""
    while True:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            return None
        chunk = os.read(fd, 65536)
        if not chunk:
            return b""
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            report = _progress_report(line)
            if report is None:
                return line
            progress(*report)


def _progress_report(line: bytes) -> tuple[str, int | None, int | None] | None:
    try:
        phase, done, total = orjson.loads(line)["progress"]
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None
    return str(phase), _count(done), _count(total)


def _count(value: object) -> int | None:
    return value if isinstance(value, int) else None


class _Reporter:
    """The child's side of progress: JSON lines on stdout, throttled."""

    def __init__(self, out: BinaryIO) -> None:
        self._out = out
        self._phase = ""
        self._sent = 0.0

    def __call__(self, phase: str, done: int | None, total: int | None) -> None:
        now = time.monotonic()
        if phase == self._phase and now - self._sent < PROGRESS_INTERVAL:
            return
        self._phase, self._sent = phase, now
        self._out.write(orjson.dumps({"progress": [phase, done, total]}) + b"\n")
        self._out.flush()


def _read_request(stdin: BinaryIO) -> BuildRequest:
    size = int.from_bytes(stdin.read(FRAME_HEADER), "little")
    request = pickle.loads(stdin.read(size))  # noqa: S301 - from our parent, as multiprocessing does
    if not isinstance(request, BuildRequest):
        raise TypeError(f"unexpected request {type(request).__name__}")
    return request


def _exit_with_parent(stdin: BinaryIO) -> None:
    """Block until the parent closes stdin (it does once it has the answer, or by
    dying), then end this process."""
    while stdin.read(65536):
        pass
    os._exit(1)


def main() -> None:
    stdin = sys.stdin.buffer
    try:
        request = _read_request(stdin)
        threading.Thread(target=_exit_with_parent, args=(stdin,), name="parent-watch", daemon=True).start()
        from runtime.server.index.build import build_index
        from runtime.storage.config import open_store

        store = open_store(request.storage, check=False)
        build_index(
            store,
            request.storage.layout,
            request.cluster,
            request.session,
            Path(request.out),
            listing=request.listing,
            progress=_Reporter(sys.stdout.buffer),
        )
        answer = {"status": "ok", "message": ""}
    except BaseException as exc:  # the parent re-raises it as a load error
        answer = {"status": "error", "message": f"{type(exc).__name__}: {exc}"}
    sys.stdout.buffer.write(orjson.dumps(answer) + b"\n")
    sys.stdout.buffer.flush()
    # Freeing a replayed session object by object is pure cost for a process that ends.
    os._exit(0)


if __name__ == "__main__":
    # Run the imported module's main, not this __main__ copy: the request unpickles
    # to runtime.server.index.child.BuildRequest, a different class from __main__'s.
    from runtime.server.index.child import main as imported_main

    imported_main()
