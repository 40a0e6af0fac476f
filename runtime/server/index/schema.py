"""The per-session index: one SQLite file per stored session, built on first use
(README "How it stays fast").

Built once by replaying the session's stored events (:mod:`runtime.server.index.build`),
then only read. Requests are answered by indexed queries and by splicing JSON
fragments that were rendered at build time, never by decoding events again.

Conventions every writer and reader relies on:

* ids are lower-case hex (``runtime.common.ids.to_hex_id``); "no id" is ``''``;
* times are Unix milliseconds (INTEGER) or NULL when unknown;
* ``*_json`` columns hold the exact JSON bytes (orjson) of the object the Dashboard
  API returns for that row, so a list response is ``b",".join(rows)``;
* ``nodes.ended_json`` / ``actors.ended_json``: the object as served once the
  session has ended (DEAD at the session's end); NULL when the events already say
  DEAD (:mod:`runtime.server.replay.ended`);
* the task as ``/api/v0/tasks`` returns it without ``detail`` is rendered from
  its columns when read (:func:`~runtime.server.replay.render_tasks.brief_json`;
  schema 6: storing it cost ~7 % of the file and of the build's CPU). The
  detail-only fields are stored compactly in ``tasks.detail``, their long shared
  parts (a definition's JSON, log file names, profile names) once each in
  ``task_texts``, and rendered to JSON when read
  (:mod:`runtime.server.replay.task_detail`, schema 7: rendering and packing that
  JSON for every task was a third of a build's per-task CPU; schema 8: a profile's
  extra data, which names its task, is in the row, not a text); read them through
  :meth:`~runtime.server.index.reader.SessionIndex.details`. The detail form is
  ``brief[:-1] + b"," + extra[1:]`` (see
  :func:`~runtime.server.replay.render_tasks.splice_detail`).
* what only one task's page or the timeline needs stays inside ``detail``
  (``task_log_info``, ``profiling_data``) instead of columns of its own: a log
  lookup renders one row, the timeline at most 10,000 (schema 4; the columns cost
  a third of the file).
* a task without a terminal state whose worker died or whose job finished is
  stored FAILED as the GCS shows it (:mod:`runtime.server.replay.task_failures`;
  schema 5).
"""

from __future__ import annotations

#: Bump whenever the schema or the meaning of a column changes: indexes built by an
#: older version are rebuilt rather than misread.
SCHEMA_VERSION = 8

DDL = """
PRAGMA journal_mode = WAL;

CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;

-- One row per task attempt (Ray's /api/v0/tasks row).
CREATE TABLE IF NOT EXISTS tasks (
    task_id        TEXT    NOT NULL,
    attempt        INTEGER NOT NULL,
    job_id         TEXT    NOT NULL DEFAULT '',
    actor_id       TEXT    NOT NULL DEFAULT '',
    name           TEXT    NOT NULL DEFAULT '',   -- task name (actor task name for actor tasks)
    func_name      TEXT    NOT NULL DEFAULT '',   -- func_or_class_name
    state          TEXT    NOT NULL DEFAULT '',   -- '' = definition only (summaries say NIL)
    type           TEXT    NOT NULL DEFAULT '',   -- NORMAL_TASK, ACTOR_TASK, ACTOR_CREATION_TASK, DRIVER_TASK
    parent_task_id TEXT    NOT NULL DEFAULT '',
    node_id        TEXT    NOT NULL DEFAULT '',
    worker_id      TEXT    NOT NULL DEFAULT '',
    worker_pid     INTEGER NOT NULL DEFAULT 0,
    creation_ms    INTEGER,
    start_ms       INTEGER,
    end_ms         INTEGER,
    error_type     TEXT,                          -- NULL: none
    detail         BLOB    NOT NULL,              -- detail-only fields (runtime.server.replay.task_detail)
    PRIMARY KEY (task_id, attempt)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS tasks_by_job   ON tasks (job_id, task_id, attempt);
CREATE INDEX IF NOT EXISTS tasks_by_state ON tasks (state, task_id, attempt);
CREATE INDEX IF NOT EXISTS tasks_by_actor ON tasks (actor_id, task_id, attempt);
CREATE INDEX IF NOT EXISTS tasks_by_name  ON tasks (name, task_id, attempt);
CREATE INDEX IF NOT EXISTS tasks_by_type  ON tasks (type, task_id, attempt);

-- Attempt counts grouped by every low-cardinality filter column: counts and the
-- func_name summary for any combination of =/!= filters on these columns are a
-- SUM over this small table instead of a scan of tasks.
CREATE TABLE IF NOT EXISTS task_counts (
    job_id    TEXT    NOT NULL,
    state     TEXT    NOT NULL,
    type      TEXT    NOT NULL,
    name      TEXT    NOT NULL,
    func_name TEXT    NOT NULL,
    n         INTEGER NOT NULL
);

-- The shared parts of tasks.detail, each once, under an id derived from its bytes.
CREATE TABLE IF NOT EXISTS task_texts (
    text_id INTEGER PRIMARY KEY,
    data    BLOB NOT NULL
);

-- One row per actor; actor_json is the /logical/actors object (camelCase).
CREATE TABLE IF NOT EXISTS actors (
    actor_id   TEXT PRIMARY KEY,
    job_id     TEXT NOT NULL DEFAULT '',
    node_id    TEXT NOT NULL DEFAULT '',
    worker_id  TEXT NOT NULL DEFAULT '',
    state      TEXT NOT NULL DEFAULT '',
    class_name TEXT NOT NULL DEFAULT '',
    repr_name  TEXT NOT NULL DEFAULT '',
    required_resources_json BLOB,               -- for pending demands in cluster status
    actor_json BLOB NOT NULL,
    ended_json BLOB                             -- actor_json once the session ended; NULL: already DEAD
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS actors_by_node ON actors (node_id);

-- One row per job; job_json is the /api/jobs/ object. Events merged with the
-- collector's stored /api/jobs/ snapshot (real status, submission id, message).
CREATE TABLE IF NOT EXISTS jobs (
    job_key       TEXT PRIMARY KEY,             -- hex job id, or the submission id when Ray gave no job id
    job_id        TEXT,
    submission_id TEXT,
    sort_key      INTEGER NOT NULL DEFAULT 0,   -- start time ms, for stable ordering
    job_json      BLOB NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS jobs_by_submission ON jobs (submission_id);

-- One row per node with at least one lifecycle transition; node_json is the
-- /nodes?view=summary element (without actors), resources_text the
-- nodeLogicalResources string.
CREATE TABLE IF NOT EXISTS nodes (
    node_id        TEXT PRIMARY KEY,
    ip             TEXT NOT NULL DEFAULT '',
    hostname       TEXT NOT NULL DEFAULT '',
    node_name      TEXT NOT NULL DEFAULT '',
    state          TEXT NOT NULL DEFAULT '',
    node_group     TEXT NOT NULL DEFAULT '',
    is_head        INTEGER NOT NULL DEFAULT 0,
    resources_text TEXT NOT NULL DEFAULT '',
    node_json      BLOB NOT NULL,
    raw_json       BLOB NOT NULL,               -- merged definition + transitions (cluster status)
    ended_json     BLOB                         -- node_json once the session ended; NULL: already DEAD
) WITHOUT ROWID;

-- Ray "log events" (logs/events/event_*.log) for /events; event_json is camelCase.
CREATE TABLE IF NOT EXISTS log_events (
    job_id     TEXT NOT NULL,                   -- 'global' when the event has none
    ts         REAL NOT NULL,
    event_id   TEXT NOT NULL,
    event_json BLOB NOT NULL,
    PRIMARY KEY (job_id, event_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS log_events_by_time ON log_events (job_id, ts);

-- The session's stored objects at build time, keys relative to the session prefix
-- (e.g. '<node>/logs/worker-...out'); log listings and worker-file lookups use it.
CREATE TABLE IF NOT EXISTS objects (
    rel_key TEXT PRIMARY KEY,
    size    INTEGER NOT NULL,
    version TEXT NOT NULL DEFAULT ''
) WITHOUT ROWID;

-- Results computed on first request and kept (e.g. a lineage summary per filter).
CREATE TABLE IF NOT EXISTS computed (
    key   TEXT PRIMARY KEY,
    value BLOB NOT NULL
) WITHOUT ROWID;
"""

#: meta keys (all values TEXT; numbers as decimal strings, structures as JSON).
META_SCHEMA_VERSION = "schema_version"
META_EVENTS_FINGERPRINT = "events_fingerprint"  # digest of event objects (key, size, version)
META_OBJECTS_FINGERPRINT = "objects_fingerprint"  # digest of every object in the session
META_BUILT_AT = "built_at"  # Unix seconds
META_BUILD_SECONDS = "build_seconds"
META_SESSION = "session"  # session name
META_CLUSTER = "cluster"  # JSON {namespace, name, owner_kind, owner_name}
META_STATS = "stats"  # JSON: files, events, bad_lines, bad_events, by_type, unreadable_files
