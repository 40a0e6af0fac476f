"""Which stored object (and which bytes of it) a log-file request means.

Resolution, first applicable: ``filename`` (node required), ``task_id`` (byte range
from the attempt's ``task_log_info``, never a guessed worker file), ``actor_id``
(the actor's worker file), ``pid`` (node required), ``submission_id`` (the job
driver log). Everything is looked up in the session index, never by listing
storage, and only file names the index knows or that passed the whitelist reach
a key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from runtime.server.errors import ApiError
from runtime.server.logs.params import LogFileParams
from runtime.storage.errors import InvalidKeyError
from runtime.storage.layout import validate_file_name

ACTOR_TASK = "ACTOR_TASK"


@dataclass(frozen=True)
class TaskLogRow:
    """The log-relevant columns of one task attempt."""

    type: str
    actor_id: str
    node_id: str
    worker_id: str
    stdout_file: str | None
    stderr_file: str | None
    stdout_start: int | None
    stdout_end: int | None
    stderr_start: int | None
    stderr_end: int | None


@dataclass(frozen=True)
class ActorLogRow:
    node_id: str
    worker_id: str


@dataclass(frozen=True)
class ResolvedLog:
    """One object: ``path`` relative to the node's ``logs/``; bytes ``[start, end)``
    (``end is None`` = to the end of the object)."""

    node_id: str
    path: str
    start: int = 0
    end: int | None = None

    @property
    def basename(self) -> str:
        return self.path.rsplit("/", 1)[-1]


class LogCatalog(Protocol):
    """What resolution needs from the session index."""

    def nodes_with_logs(self) -> list[str]: ...

    def nodes_for_ip(self, ip: str) -> list[str]: ...

    def log_files(self, node_id: str, under: str = "") -> list[str]:
        """Paths relative to the node's ``logs/`` (only those below ``under``), sorted."""
        ...

    def has_log(self, node_id: str, path: str) -> bool: ...

    def task_attempts(self, task_id: str) -> dict[int, TaskLogRow]: ...

    def actor(self, actor_id: str) -> ActorLogRow | None: ...


def resolve_node(catalog: LogCatalog, node_id: str | None, node_ip: str | None, *, want: str | None = None) -> str:
    """The node a request names by id or IP. Among several nodes with one IP (a host
    reused over time) prefer one holding ``want``."""
    if node_id:
        return node_id
    if not node_ip:
        raise ApiError(400, "node_id or node_ip is required")
    nodes = catalog.nodes_for_ip(node_ip)
    if not nodes:
        raise ApiError(404, f"Cannot find matching node_id for a given node ip {node_ip}")
    if want is not None:
        for node in nodes:
            if catalog.has_log(node, want):
                return node
    return nodes[0]


def resolve_log(params: LogFileParams, catalog: LogCatalog) -> ResolvedLog:
    """The object (and byte window) ``params`` asks for; ApiError otherwise."""
    if params.filename:
        # attempt_number is ignored for an explicit file name (KubeRay's Go history server appends
        # ".<attempt>", which names a file Ray never writes).
        node = resolve_node(catalog, params.node_id, params.node_ip, want=params.filename)
        return ResolvedLog(node, params.filename)
    if params.task_id:
        return _resolve_task(params, catalog)
    if params.actor_id:
        return _resolve_actor(params, catalog)
    if params.pid:
        node = resolve_node(catalog, params.node_id, params.node_ip)
        return ResolvedLog(node, _pid_file(catalog, node, params.pid, params.suffix))
    if params.submission_id:
        return _resolve_submission(params, catalog)
    raise ApiError(400, "At least one of actor_id, task_id, pid, or filename is required")


def _resolve_task(params: LogFileParams, catalog: LogCatalog) -> ResolvedLog:
    task_id = params.task_id or ""
    attempts = catalog.task_attempts(task_id)
    if not attempts:
        raise ApiError(400, f"task {task_id} is not in this session")
    row = attempts.get(params.attempt_number)
    if row is None:
        known = ", ".join(str(a) for a in sorted(attempts))
        raise ApiError(400, f"task {task_id} has no attempt {params.attempt_number} (attempts: {known})")
    if row.type == ACTOR_TASK:
        raise ApiError(
            400,
            f"for actor task, please query actor log for actor({row.actor_id}) by providing actor_id query parameter",
        )
    if params.suffix == "out":
        path, start, end = row.stdout_file, row.stdout_start, row.stdout_end
    else:
        path, start, end = row.stderr_file, row.stderr_start, row.stderr_end
    name = _basename(path)
    hint = f"; its actor's log is available with actor_id={row.actor_id}" if row.actor_id else ""
    if name is None:
        # Never fall back to the worker's whole file: workers run many tasks.
        raise ApiError(
            404,
            f"Could not find log file for task attempt {task_id}({params.attempt_number}): "
            f"Ray recorded no task_log_info for it (its worker may have exited before reporting){hint}",
        )
    start = start or 0
    if end == 0 and start > 0:
        # No end offset reported (the index keeps an unreported end as 0): the attempt was
        # still running, e.g. its node died under it. Ray's log manager then reads from the
        # start offset to the end of the file (end None), and so do we.
        end = None
    if start < 0 or (end is not None and end < start):
        attempt = f"{task_id}({params.attempt_number})"
        raise ApiError(500, f"task attempt {attempt} has an invalid log range [{start}, {end})")
    if not row.node_id:
        raise ApiError(400, f"task attempt {task_id}({params.attempt_number}) was never scheduled on a node")
    return ResolvedLog(row.node_id, name, start, end)


def _resolve_actor(params: LogFileParams, catalog: LogCatalog) -> ResolvedLog:
    actor_id = params.actor_id or ""
    actor = catalog.actor(actor_id)
    if actor is None:
        raise ApiError(400, f"actor {actor_id} is not in this session")
    if not actor.node_id or not actor.worker_id:
        raise ApiError(404, f"actor {actor_id} has no worker recorded (it may never have started)")
    prefix = f"worker-{actor.worker_id}-"
    suffix = f".{params.suffix}"
    for name in catalog.log_files(actor.node_id):
        if "/" not in name and name.startswith(prefix) and name.endswith(suffix):
            return ResolvedLog(actor.node_id, name)
    raise ApiError(404, f"log file of actor {actor_id} (worker-{actor.worker_id}-*{suffix}) is not in storage")


def _pid_file(catalog: LogCatalog, node: str, pid: int, suffix: str) -> str:
    ending = f"-{pid}.{suffix}"
    names = [n for n in catalog.log_files(node) if "/" not in n and n.endswith(ending)]
    if not names:
        raise ApiError(404, f"no log file of pid {pid} (*{ending}) on node {node}")
    workers = [n for n in names if n.startswith("worker-")]
    return (workers or names)[0]


def _resolve_submission(params: LogFileParams, catalog: LogCatalog) -> ResolvedLog:
    name = f"job-driver-{params.submission_id}.log"
    if params.node_id or params.node_ip:
        return ResolvedLog(resolve_node(catalog, params.node_id, params.node_ip, want=name), name)
    for node in catalog.nodes_with_logs():
        if catalog.has_log(node, name):
            return ResolvedLog(node, name)
    raise ApiError(404, f"driver log of submission {params.submission_id} ({name}) is not in storage")


def _basename(path: str | None) -> str | None:
    """The file name of Ray's absolute path, or None when unusable."""
    if not path:
        return None
    name = path.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
    try:
        return validate_file_name(name)
    except InvalidKeyError:
        return None
