"""The query commands: clusters, jobs, tasks, logs (via a server or in-process from storage)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from runtime.cli import render
from runtime.cli.api import MAX_ERROR_BYTES, HistoryApi, check_status, error_message
from runtime.cli.cluster_flags import list_params
from runtime.cli.errors import CliError, UsageError
from runtime.cli.filters import filter_params
from runtime.cli.target import enter


def _where(api: HistoryApi, args: argparse.Namespace, session: str) -> str:
    return f"{args.namespace}/{args.cluster} {session} ({api.where})"


def unexpected(api: HistoryApi, path: str, what: str, answer: Any) -> CliError:
    """A server answer of the wrong shape: an error naming the route and what was wrong."""
    return CliError(f"{api.where}{path}: unexpected answer ({what}): {answer!r:.200}")


def _objects(api: HistoryApi, path: str, answer: Any, what: str) -> list[dict[str, Any]]:
    """``answer`` if it is a list of JSON objects."""
    if not isinstance(answer, list) or not all(isinstance(item, dict) for item in answer):
        raise unexpected(api, path, f"{what} must be a list of objects", answer)
    return answer


def _state_result(api: HistoryApi, answer: Any, path: str) -> Any:
    """``{"result": true, "data": {"result": X}}`` -> X (Ray's state-API envelope)."""
    try:
        return answer["data"]["result"]
    except (KeyError, TypeError, IndexError):
        raise unexpected(api, path, "no data.result", answer) from None


def _cluster_entries(api: HistoryApi, answer: Any) -> list[dict[str, Any]]:
    entries = _objects(api, "/clusters", answer, "the clusters")
    for entry in entries:
        summary = entry.get("summary")
        if summary is not None and not isinstance(summary, dict):
            raise unexpected(api, "/clusters", "a summary must be an object", entry)
        if summary and summary.get("jobs") is not None and not isinstance(summary["jobs"], dict):
            raise unexpected(api, "/clusters", "summary.jobs must be an object", entry)
    return entries


def clusters(api: HistoryApi, args: argparse.Namespace) -> int:
    params = [(k, v) for k, v in (("namespace", args.namespace), ("name", args.name)) if v]
    params += list_params(args)
    entries = _cluster_entries(api, api.get_json("/clusters", params))
    if args.json:
        render.print_json(entries)
    else:
        render.stdout_console().print(render.clusters_table(entries))
    return 0


def jobs(api: HistoryApi, args: argparse.Namespace) -> int:
    entered = enter(api, args)
    found = _objects(api, "/api/jobs/", api.get_json("/api/jobs/"), "the jobs")
    if args.json:
        render.print_json(found)
    else:
        render.stdout_console().print(render.jobs_table(found, _where(api, args, entered.session)))
    return 0


def tasks(api: HistoryApi, args: argparse.Namespace) -> int:
    params: list[tuple[str, str]] = [("limit", str(args.limit))] if args.limit is not None else []
    if args.detail:
        params.append(("detail", "true"))
    if args.exclude_driver is not None:
        params.append(("exclude_driver", "true" if args.exclude_driver else "false"))
    params += filter_params(args.filter or [])
    entered = enter(api, args)
    result = _state_result(api, api.get_json("/api/v0/tasks", params), "/api/v0/tasks")
    if not isinstance(result, dict):
        raise unexpected(api, "/api/v0/tasks", "data.result must be an object", result)
    if result.get("result") is not None:
        _objects(api, "/api/v0/tasks", result["result"], "data.result.result")
    if args.json:
        render.print_json(result)
    else:
        render.stdout_console().print(render.tasks_table(result, _where(api, args, entered.session)))
    return 0


def logs(api: HistoryApi, args: argparse.Namespace) -> int:
    if args.file and not args.node:
        raise UsageError("--file needs --node NODE_ID (list a node's files with: ray-history logs CLUSTER --node ID)")
    entered = enter(api, args)
    if not (args.file or args.task_id or args.actor_id):
        return _list_log_files(api, args, entered.session)
    params: list[tuple[str, str]] = []
    if args.file:
        params += [("node_id", args.node), ("filename", args.file)]
    elif args.task_id:
        params += [("task_id", args.task_id), ("attempt_number", str(args.attempt))]
    else:
        params.append(("actor_id", args.actor_id))
    if args.node and not args.file:
        params.append(("node_id", args.node))
    params.append(("suffix", "err" if args.err else "out"))
    if args.lines is not None:
        params.append(("lines", str(args.lines)))
    # A live session's stream keeps following the file; a stored one ends with its content.
    path = "/api/v0/logs/stream" if args.follow else "/api/v0/logs/file"
    response = api.get(path, params, stream=True)
    if not 200 <= response.status < 300:
        body = response.head(MAX_ERROR_BYTES)
        check_status(response.status, body, api.where, path)
        raise CliError(error_message(body))
    out = sys.stdout.buffer
    try:
        for chunk in response.chunks:
            out.write(chunk)
            out.flush()
    finally:
        response.close()
    return 0


def _list_log_files(api: HistoryApi, args: argparse.Namespace, session: str) -> int:
    params = [("node_id", args.node)] if args.node else []
    categories = _state_result(api, api.get_json("/api/v0/logs", params), "/api/v0/logs")
    if not isinstance(categories, dict) or not all(isinstance(names, list) for names in categories.values()):
        raise unexpected(api, "/api/v0/logs", "data.result must map categories to lists of files", categories)
    if args.json:
        render.print_json(categories)
    else:
        render.stdout_console().print(render.log_files_table(categories, _where(api, args, session)))
    return 0
