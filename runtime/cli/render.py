"""Output: rich tables for people, plain JSON (``--json``) for scripts."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table
from rich.text import Text

from runtime.cli.terminal import printable

_STATUS_STYLES = {
    "FAILED": "bold red",
    "STOPPED": "yellow",
    "RUNNING": "cyan",
    "PENDING": "cyan",
    "SUCCEEDED": "green",
    "FINISHED": "green",
    "ALIVE": "green",
    "DEAD": "red",
}


def stdout_console() -> Console:
    """Tables on stdout; a pipe gets no colours and a width wide enough not to fold ids."""
    if sys.stdout.isatty():
        return Console(highlight=False)
    return Console(highlight=False, width=200, no_color=True)


def print_json(data: Any) -> None:
    sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")
    sys.stdout.flush()


def ms_time(value: Any) -> str:
    """Milliseconds since the epoch -> ``2026-11-22 01:45:43Z``; '' when unset."""
    if not isinstance(value, int | float) or value <= 0:
        return ""
    return datetime.fromtimestamp(value / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def duration(start: Any, end: Any) -> str:
    if not isinstance(start, int | float) or not isinstance(end, int | float) or start <= 0 or end < start:
        return ""
    seconds = (end - start) / 1000
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


def styled(status: Any) -> Text:
    """A status cell, coloured when it is one of Ray's states."""
    value = "" if status is None else str(status)
    return Text(printable(value), style=_STATUS_STYLES.get(value, ""))


def text(value: Any) -> Text:
    """A cell: None -> ''; never read as rich markup, control characters shown as escapes.

    Cells hold what others chose (a job's entrypoint, a session name from the server):
    as markup, ``[/]`` or ``\\[/]`` in one would stop the table with a MarkupError.
    """
    return Text("" if value is None else printable(str(value)))


def title(value: str | None) -> Text | None:
    """A table's title or caption, as literal text (it names server-given sessions)."""
    return None if value is None else Text(printable(value))


def _table(
    title_text: str | None, columns: Sequence[str], rows: Iterable[Sequence[Text]], caption: str | None
) -> Table:
    table = Table(
        title=title(title_text), caption=title(caption), show_lines=False, header_style="bold", title_justify="left"
    )
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*row)
    return table


def _jobs_by_status(jobs: Mapping[str, Any]) -> Text:
    counts: list[Text | str] = []
    for status, count in jobs.items():
        if counts:
            counts.append(" ")
        counts += [styled(status or "UNKNOWN"), ":", text(count)]
    return Text.assemble(*counts)


def clusters_table(entries: Sequence[Mapping[str, Any]]) -> Table:
    rows = []
    for entry in entries:
        owner = f"{entry.get('ownerKind')}/{entry['ownerName']}" if entry.get("ownerName") else ""
        summary = entry.get("summary") or {}  # none: live, or not indexed yet
        rows.append(
            [
                text(entry.get("namespace")),
                text(entry.get("name")),
                text(owner),
                styled("RUNNING") if entry.get("sessionName") == "live" else text(entry.get("sessionName")),
                text(entry.get("createTime")),
                Text(duration(summary.get("start"), summary.get("end"))),
                _jobs_by_status(summary.get("jobs") or {}),
                text(summary.get("failedTasks")),
            ]
        )
    columns = ["NAMESPACE", "CLUSTER", "OWNER", "SESSION", "CREATED", "DURATION", "JOBS", "FAILED TASKS"]
    return _table(None, columns, rows, f"{len(entries)} session(s)")


def jobs_table(jobs: Sequence[Mapping[str, Any]], where: str) -> Table:
    rows = []
    for job in jobs:
        entrypoint = str(job.get("entrypoint") or "")
        rows.append(
            [
                text(job.get("job_id")),
                text(job.get("submission_id")),
                text(job.get("type")),
                styled(job.get("status")),
                Text(ms_time(job.get("start_time"))),
                Text(duration(job.get("start_time"), job.get("end_time"))),
                text(entrypoint if len(entrypoint) <= 60 else entrypoint[:57] + "..."),
            ]
        )
    columns = ["JOB ID", "SUBMISSION ID", "TYPE", "STATUS", "START (UTC)", "DURATION", "ENTRYPOINT"]
    return _table(where, columns, rows, f"{len(jobs)} job(s)")


def tasks_table(result: Mapping[str, Any], where: str) -> Table:
    tasks: Sequence[Mapping[str, Any]] = result.get("result") or []
    rows = [
        [
            text(task.get("task_id")),
            text(task.get("attempt_number")),
            text(task.get("name")),
            styled(task.get("state")),
            text(task.get("type")),
            text(task.get("job_id")),
            text(str(task.get("node_id") or "")[:12]),
            text(task.get("error_type")),
        ]
        for task in tasks
    ]
    caption = f"{len(tasks)} shown, {result.get('num_filtered', len(tasks))} match, {result.get('total', '?')} total"
    columns = ["TASK ID", "ATTEMPT", "NAME", "STATE", "TYPE", "JOB", "NODE", "ERROR TYPE"]
    return _table(where, columns, rows, caption)


def log_files_table(categories: Mapping[str, Sequence[str]], where: str) -> Table:
    rows = [[text(category), text(name)] for category, names in categories.items() for name in names]
    return _table(where, ["CATEGORY", "FILE"], rows, f"{len(rows)} file(s)")
