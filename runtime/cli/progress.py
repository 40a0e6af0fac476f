"""A byte progress bar on stderr, off for pipes, CI logs and ``--quiet``."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

Advance = Callable[[int], None]


def progress_enabled(quiet: bool, stderr_is_tty: bool | None = None) -> bool:
    tty = sys.stderr.isatty() if stderr_is_tty is None else stderr_is_tty
    return tty and not quiet


@contextmanager
def byte_progress(description: str, total: int, *, quiet: bool) -> Iterator[Advance]:
    """Yield ``advance(nbytes)``; a rich bar on a terminal, nothing otherwise."""
    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        disable=not progress_enabled(quiet),
        transient=False,
    )
    with progress:
        task = progress.add_task(description, total=total)

        def advance(nbytes: int) -> None:
            progress.update(task, advance=nbytes)

        yield advance


def human_bytes(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"


def note(message: str, *, quiet: bool) -> None:
    """One status line on stderr (stdout stays for results)."""
    if not quiet:
        sys.stderr.write(message + "\n")
        sys.stderr.flush()
