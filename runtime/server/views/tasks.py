"""State-API task routes for stored sessions: list, summarize, timeline."""

from __future__ import annotations

from datetime import datetime

from flask import Blueprint, Response, request

from runtime.server.context import SessionContext, session_route
from runtime.server.errors import json_response
from runtime.server.queries.options import parse_task_query
from runtime.server.queries.state import normalise_id
from runtime.server.queries.summary import summarize_tasks
from runtime.server.queries.tasks import list_tasks
from runtime.server.queries.timeline import download_name, timeline

bp = Blueprint("tasks", __name__)


@bp.get("/api/v0/tasks")
@session_route
def tasks_list(ctx: SessionContext) -> Response:
    query = parse_task_query(request.args)  # 400s before the index is opened (or built)
    return json_response(list_tasks(ctx.index, query))


@bp.get("/api/v0/tasks/summarize")
@session_route
def tasks_summarize(ctx: SessionContext) -> Response:
    query = parse_task_query(request.args, summary=True)
    return json_response(summarize_tasks(ctx.index, query))


@bp.get("/api/v0/tasks/timeline")
@session_route
def tasks_timeline(ctx: SessionContext) -> Response:
    raw_job = request.args.get("job_id")
    job_id = normalise_id(raw_job) if raw_job else None
    response = json_response(timeline(ctx.index, job_id))
    if request.args.get("download") == "1":
        name = download_name(job_id, datetime.now())  # Ray names it in server local time
        response.headers["Content-Disposition"] = f'attachment; filename="{name}"'
    return response
