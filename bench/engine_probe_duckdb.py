"""Would a columnar engine earn its place in the index build? A probe with DuckDB.

    python3 -m venv /tmp/duck && /tmp/duck/bin/pip install duckdb orjson
    /tmp/duck/bin/python bench/engine_probe_duckdb.py [--tasks 100000 1000000] [--threads 2]

Not a dependency of the product: run it from a scratch venv. It reads the synthetic
sessions ``bench/server_cold_load.py`` caches (generate them with that script first)
with DuckDB's native JSON reader (explicit columns: only what a task row needs), then
groups the task events per attempt the way the replay must (transitions, the carried
fields of the event with the newest transition, the definition). It prints the parse
and grouping times and a 10-million-iteration loop. The rendering of 1M rows, their
packing and the SQLite writes (about half of today's build) would come on top: if
parse + group alone approach the target, the engine cannot reach it.
"""

from __future__ import annotations

import argparse
import glob
import os
import tempfile
import time
from pathlib import Path

SYNTH_VERSION = "4"  # bench/server_cold_load.py's

_LIFECYCLE = (
    "STRUCT(taskId VARCHAR, taskAttempt BIGINT, jobId VARCHAR, nodeId VARCHAR, workerId VARCHAR, workerPid BIGINT,"
    ' stateTransitions STRUCT(state VARCHAR, "timestamp" VARCHAR)[],'
    " taskLogInfo STRUCT(stdoutFile VARCHAR, stderrFile VARCHAR, stdoutStart VARCHAR, stdoutEnd VARCHAR,"
    " stderrStart VARCHAR, stderrEnd VARCHAR), rayErrorInfo STRUCT(errorType VARCHAR, errorMessage VARCHAR))"
)
_DEFINITION = (
    "STRUCT(taskId VARCHAR, taskAttempt BIGINT, taskType VARCHAR, language VARCHAR, taskName VARCHAR,"
    " taskFunc JSON, requiredResources JSON, serializedRuntimeEnv VARCHAR, jobId VARCHAR, parentTaskId VARCHAR,"
    " placementGroupId VARCHAR, callSite VARCHAR, labelSelector JSON)"
)
_GROUP = """
CREATE TABLE attempts AS
WITH ev AS (
  SELECT eventId,
         coalesce(l.taskId, d.taskId) AS task_id,
         coalesce(l.taskAttempt, d.taskAttempt, 0) AS attempt,
         l, d,
         list_max(list_transform(l.stateTransitions, lambda t: t."timestamp")) AS latest
  FROM (SELECT DISTINCT ON (eventId) eventId, taskLifecycleEvent AS l, taskDefinitionEvent AS d FROM raw
        WHERE eventType IN ('TASK_LIFECYCLE_EVENT', 'TASK_DEFINITION_EVENT'))
)
SELECT task_id, attempt,
       list_distinct(flatten(list(l.stateTransitions) FILTER (WHERE l.stateTransitions IS NOT NULL))) AS transitions,
       arg_max(l.nodeId, latest) FILTER (WHERE l.nodeId <> '') AS node_id,
       arg_max(l.workerId, latest) FILTER (WHERE l.workerId <> '') AS worker_id,
       arg_max(l.workerPid, latest) FILTER (WHERE l.workerPid <> 0) AS worker_pid,
       arg_max(l.rayErrorInfo, latest) FILTER (WHERE l.rayErrorInfo IS NOT NULL) AS error,
       max(l.taskLogInfo.stdoutFile) AS stdout_file,
       max(l.taskLogInfo.stdoutEnd) AS stdout_end,
       any_value(d.taskName) AS name, any_value(d.taskType) AS type, any_value(d.taskFunc) AS func,
       any_value(d.serializedRuntimeEnv) AS runtime_env, any_value(d.requiredResources) AS resources
FROM ev GROUP BY task_id, attempt
"""


def loop_seconds() -> float:
    """The loop of ``bench/server_cold_load.py``: ``total += i`` at module scope."""
    code = compile("total = 0\nfor i in range(10_000_000):\n    total += i\n", "<loop>", "exec")
    started = time.perf_counter()
    exec(code, {})  # noqa: S102 - a constant loop, module-scope semantics
    return time.perf_counter() - started


def probe(cache: Path, tasks: int, threads: int) -> None:
    import duckdb  # a scratch-venv dependency, never the product's

    files = sorted(glob.glob(str(cache / f"synth-{tasks}-v{SYNTH_VERSION}" / "**" / "*.jsonl"), recursive=True))
    if not files:
        raise SystemExit(f"no synthetic {tasks}-task session in {cache}: run bench/server_cold_load.py first")
    size = sum(os.path.getsize(f) for f in files)
    con = duckdb.connect()
    con.execute(f"SET threads = {threads}")
    columns = {
        "eventId": "VARCHAR",
        "eventType": "VARCHAR",
        "taskLifecycleEvent": _LIFECYCLE,
        "taskDefinitionEvent": _DEFINITION,
    }
    cpu0, started = os.times(), time.perf_counter()
    raw = con.read_json(files, format="newline_delimited", columns=columns)
    con.register("raw_rel", raw)
    con.execute("CREATE TABLE raw AS SELECT * FROM raw_rel")
    parsed = time.perf_counter()
    con.execute(_GROUP)
    grouped = time.perf_counter()
    cpu1 = os.times()
    (events,) = con.execute("SELECT count(*) FROM raw").fetchone() or (0,)
    (attempts,) = con.execute("SELECT count(*) FROM attempts").fetchone() or (0,)
    cpu = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    print(
        f"{tasks:>9} tasks: parse {parsed - started:6.2f}s ({size / (parsed - started) / 1e6:,.0f} MB/s), "
        f"group {grouped - parsed:6.2f}s, together {grouped - started:6.2f}s, cpu {cpu:.1f}s, "
        f"{threads} threads [{events} events, {attempts} attempts]; loop {loop_seconds():.2f}s",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cache-dir", default=str(Path(tempfile.gettempdir()) / "rhs-synth"))
    args = parser.parse_args()
    print(f"cores: {os.cpu_count()}, 10M-iteration Python loop: {loop_seconds():.2f}s", flush=True)
    for tasks in args.tasks:
        probe(Path(args.cache_dir), tasks, args.threads)


if __name__ == "__main__":
    main()
