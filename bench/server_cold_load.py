"""Cold load of the history server: build a session index from a local store.

    .venv/bin/python bench/server_cold_load.py [--tasks 100000 1000000] [--gzip] [--processes N]
                                               [--cache-dir /tmp/rhs-synth] [--repeat 1]

For each size, generates a synthetic session (``bench/synth_session.py``; cached in
``--cache-dir`` and reused) and builds its index in a fresh child process, as the
server does for big sessions. Prints the build time end to end (listing, reads,
replay, SQLite), events/s, the peak RSS of the builder (VmHWM), of its largest
task-shard worker and of all its processes together (sampled every 50 ms), CPU
seconds used, the index file size and its share of the event bytes, and the time of
a 10-million-iteration Python loop (how fast this machine runs pure Python).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.synth_session import SESSION, write_synthetic_session  # noqa: E402
from runtime.storage.config import StorageConfig, open_store  # noqa: E402
from runtime.storage.layout import ClusterRef, KeyLayout  # noqa: E402

#: Bump when the generator's output changes: cached sessions are regenerated.
SYNTH_VERSION = "4"
CLUSTER = ClusterRef("default", "synth")


def vm_hwm_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(store_dir: str, out: str, processes: int | None) -> None:
    """Runs in the child: one build, one JSON line of figures."""
    from runtime.server.index.build import build_index

    store = open_store(StorageConfig(backend="local", local_dir=store_dir))
    started = time.perf_counter()
    stats = build_index(store, KeyLayout(""), CLUSTER, SESSION, Path(out), processes=processes)
    seconds = time.perf_counter() - started
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    print(
        json.dumps(
            {
                "seconds": seconds,
                "stats": {k: v for k, v in stats.__dict__.items() if k != "by_type"},
                "builder_hwm_mib": vm_hwm_mib(),
                "worker_max_rss_mib": kids.ru_maxrss / 1024,
                "cpu_seconds": own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime,
            }
        )
    )


def replay_form() -> str:
    """Whether the builds below run the native build (setup.py, RHS_MYPYC=1; ``make native``
    compiles one in .test-artifacts/native, whose bench/ measures it) or the source."""
    from runtime.server.replay import route, task_events, tasks

    compiled = any(str(tasks.__file__).endswith(suffix) for suffix in EXTENSION_SUFFIXES)
    in_c = task_events.native_lifecycle is not None and route.native_core is not None
    return ("native (mypyc" + (" + C" if in_c else "") + ")") if compiled else "Python"


def ensure_session(cache: Path, tasks: int, gzip_events: bool) -> Path:
    store_dir = cache / f"synth-{tasks}{'-gz' if gzip_events else ''}-v{SYNTH_VERSION}"
    if (store_dir / ".complete").exists():
        return store_dir
    shutil.rmtree(store_dir, ignore_errors=True)
    print(f"generating a {tasks}-task session in {store_dir} ...", flush=True)
    store = open_store(StorageConfig(backend="local", local_dir=str(store_dir), create_bucket=True))
    summary = write_synthetic_session(store, KeyLayout(""), CLUSTER, SESSION, tasks, gzip_events=gzip_events)
    print(f"  {summary.events} events, {summary.bytes / 1e6:.0f} MB in {summary.files} objects, {summary.seconds}s")
    (store_dir / ".complete").write_text("ok\n")
    return store_dir


_LOOP = compile("total = 0\nfor i in range(10_000_000):\n    total += i\n", "<loop>", "exec")


def loop_seconds() -> float:
    """A plain 10-million-iteration loop at module scope (``total += i``, as in
    docs/performance.md): build times scale with it."""
    started = time.perf_counter()
    exec(_LOOP, {})  # noqa: S102 - a constant loop
    return time.perf_counter() - started


_PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024


def _tree_rss_kib(root: int) -> int:
    """The summed resident set of ``root`` and its descendants (0 for a process gone).
    Reads the one-line ``/proc/PID/stat`` of each process (its parent and RSS): sampled
    every 50 ms beside a build on two cores, parsing every ``status`` took ~5 ms a time."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as stat:
                text = stat.read()
        except OSError:
            continue
        fields = text[text.rindex(b")") + 2 :].split()  # after the command, which may hold spaces
        pid = int(name)
        children.setdefault(int(fields[1]), []).append(pid)  # field 4: the parent
        rss[pid] = int(fields[21]) * _PAGE_KIB  # field 24: resident pages
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        stack.extend(children.get(pid, ()))
    return total


class TreePeak:
    """Samples the summed RSS of a process tree until stopped; keeps the peak."""

    def __init__(self, root: int, every: float = 0.05) -> None:
        self.peak_kib = 0
        self._root, self._every = root, every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            self.peak_kib = max(self.peak_kib, _tree_rss_kib(self._root))

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.peak_kib / 1024


def measure(store_dir: Path, processes: int | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="rhs-index-") as tmp:
        out = Path(tmp) / "index.sqlite"
        command = [sys.executable, __file__, "--child", str(store_dir), str(out)]
        if processes is not None:
            command += ["--processes", str(processes)]
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        started = time.perf_counter()
        with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) as proc:
            peak = TreePeak(proc.pid)
            stdout, stderr = proc.communicate()
            all_mib = peak.stop()
        wall = time.perf_counter() - started
        if proc.returncode != 0:
            raise RuntimeError(f"build failed ({proc.returncode}): {stderr[-2000:]}")
        figures: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
        figures["wall_with_startup"] = wall
        figures["all_processes_peak_mib"] = all_mib
        figures["index_bytes"] = out.stat().st_size
        return figures


def describe(figures: dict[str, Any]) -> str:
    stats, seconds = figures["stats"], float(figures["seconds"])
    return (
        f"build {seconds:6.2f}s ({stats['events'] / seconds:,.0f} events/s, {stats['event_bytes'] / 1e6 / seconds:.0f}"
        f" MB/s), {stats['processes']} workers, cpu {figures['cpu_seconds']:.1f}s,"
        f" builder VmHWM {figures['builder_hwm_mib']:.0f} MiB, largest worker {figures['worker_max_rss_mib']:.0f} MiB,"
        f" all processes {figures['all_processes_peak_mib']:.0f} MiB,"
        f" index {figures['index_bytes']:,} bytes = {100 * figures['index_bytes'] / stats['event_bytes']:.1f}% of"
        f" {stats['event_bytes']:,} event bytes [{stats['tasks']} attempts, {stats['events']} events,"
        f" {stats['files']} objects, bad {stats['bad_lines']}/{stats['bad_events']}, load {os.getloadavg()[0]:.2f}]"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--gzip", action="store_true", help="gzip the event objects")
    parser.add_argument("--processes", type=int, default=None, help="task-shard workers (default: one per core)")
    parser.add_argument("--cache-dir", default=str(Path(tempfile.gettempdir()) / "rhs-synth"))
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--child", nargs=2, metavar=("STORE_DIR", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child[0], args.child[1], args.processes)
        return 0
    cache = Path(args.cache_dir)
    cache.mkdir(parents=True, exist_ok=True)
    print(
        f"cores: {len(os.sched_getaffinity(0))}, load average: {os.getloadavg()[0]:.2f},"
        f" 10M-iteration Python loop: {loop_seconds():.2f}s, replay: {replay_form()}"
    )
    for tasks in args.tasks:
        store_dir = ensure_session(cache, tasks, args.gzip)
        for run in range(args.repeat):
            figures = measure(store_dir, args.processes)
            print(f"{tasks:>9} tasks run {run + 1}: {describe(figures)}; loop {loop_seconds():.2f}s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
