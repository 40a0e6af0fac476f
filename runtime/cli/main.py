"""``ray-history``: stored Ray clusters from a shell.

Query commands (``clusters``, ``jobs``, ``tasks``, ``logs``, ``open``) ask a history server
(``--server``, env ``RAY_HISTORY_SERVER``, default http://localhost:8080) or (all but
``open``, which prints a server's URL) with the storage flags of the collector and the
server, read the bucket directly
through the server's own code in-process. ``export`` / ``import`` move one
session between buckets as a tar(.gz) with a manifest. ``gc`` deletes whole
sessions that ended before a cutoff. ``quickstart`` is the local demo
(``runtime.quickstart``).

The modules behind the query and transfer commands use ``rich`` (the ``[cli]``
extra) and are imported when one of them runs, so ``gc`` also works where only the
``[server]`` extra is installed (the history server's image runs it as a CronJob).

Exit status: 0 done, 1 not found / unreachable / damaged, 2 usage error, 130 Ctrl-C.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import TypeAlias

from runtime.cli import gc
from runtime.cli.api import HistoryApi
from runtime.cli.cluster_flags import add_list_filters
from runtime.cli.errors import EXIT_FAILURE, EXIT_INTERRUPTED, CliError, UsageError
from runtime.cli.filters import parse_filter
from runtime.cli.target import add_target_arguments, namespace
from runtime.cli.terminal import printable
from runtime.common.settings import Checked
from runtime.common.validators import positive_int, whole_number
from runtime.storage.config import add_storage_arguments
from runtime.storage.errors import InvalidKeyError, StorageError

PROG = "ray-history"
Handler = Callable[[argparse.Namespace], int]
QUICKSTART_MODULE = "runtime.quickstart"


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-v", "--verbose", action="count", default=0, help="log more (-vv: debug)")


def _add_server(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--server",
        metavar="URL",
        help="history server URL (env RAY_HISTORY_SERVER; default http://localhost:8080 "
        "unless storage flags are given)",
    )
    parser.add_argument(
        "--token",
        metavar="TOKEN",
        help="bearer token for the history server (env RAY_HISTORY_TOKEN, which keeps it out of `ps`; "
        "default: the token of the current kubeconfig context, if it has one)",
    )


def _add_source(parser: argparse.ArgumentParser) -> None:
    """Where answers come from: a history server, or storage read in-process."""
    _add_server(parser)
    add_storage_arguments(parser)
    parser.add_argument(
        "--cache-dir",
        type=Path,
        help="session indexes when reading storage directly (env RAY_HISTORY_CACHE_DIR; default ~/.cache/ray-history)",
    )
    parser.add_argument("--json", action="store_true", help="plain JSON on stdout instead of a table")


def _query(name: str) -> Handler:
    """The query command ``name`` of :mod:`runtime.cli.commands` (imported when it runs)."""

    def handler(args: argparse.Namespace) -> int:
        from runtime.cli import commands

        run: Callable[[HistoryApi, argparse.Namespace], int] = getattr(commands, name)
        with open_api(args) as api:
            return run(api, args)

    return handler


def _open(args: argparse.Namespace) -> int:
    """``open``: always a history server (its URL is what is printed)."""
    from runtime.cli import open as open_command
    from runtime.cli.client import DEFAULT_SERVER, SERVER_ENV, HttpHistoryApi, normalise_server_url
    from runtime.cli.credentials import resolve

    server = normalise_server_url(args.server or os.environ.get(SERVER_ENV, "").strip() or DEFAULT_SERVER)
    with HttpHistoryApi(server, lambda: resolve(args.token, os.environ)) as api:
        return open_command.run(api, args, server)


def _transfer(name: str) -> Handler:
    """``run_export`` / ``run_import`` of :mod:`runtime.cli.transfer` (imported when it runs)."""

    def handler(args: argparse.Namespace) -> int:
        from runtime.cli import transfer

        run: Handler = getattr(transfer, name)
        return run(args)

    return handler


def open_api(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> HistoryApi:
    """``--server`` or the storage flags (never both); then the environment; then localhost."""
    env = os.environ if env is None else env
    from runtime.cli.client import DEFAULT_SERVER, SERVER_ENV, HttpHistoryApi

    storage_flag = args.storage_backend or args.runtime_class_name
    if args.server and storage_flag:
        raise UsageError(f"--server={args.server} and --storage-backend={storage_flag} are alternatives; pass one")
    use_storage = bool(storage_flag)
    if not args.server and not storage_flag:
        env_server, env_backend = env.get(SERVER_ENV, "").strip(), env.get("STORAGE_BACKEND", "").strip()
        if env_server and env_backend:
            raise UsageError(
                f"{SERVER_ENV}={env_server} and STORAGE_BACKEND={env_backend} are both set; "
                "pass --server URL or --storage-backend to choose"
            )
        use_storage = bool(env_backend)
        args.server = env_server or None
    token = getattr(args, "token", None)
    if not use_storage:
        from runtime.cli.credentials import resolve

        return HttpHistoryApi(args.server or DEFAULT_SERVER, lambda: resolve(token, env))
    if token is not None:
        raise UsageError("--token is for a history server (--server); storage flags read the bucket directly")
    from runtime.cli.storage_source import InProcessHistoryApi, default_cache_dir, storage_config

    return InProcessHistoryApi(storage_config(args, env), args.cache_dir or default_cache_dir(env))


# ----------------------------------------------------------------- quickstart
def _quickstart_missing(reason: str) -> Handler:
    def handler(_args: argparse.Namespace) -> int:
        raise CliError(f"quickstart is not available in this installation: {reason}")

    return handler


def _load_quickstart() -> ModuleType | str:
    try:
        return importlib.import_module(QUICKSTART_MODULE)
    except ModuleNotFoundError as exc:
        if exc.name == QUICKSTART_MODULE:
            return f"the module {QUICKSTART_MODULE} is not installed"
        return f"{QUICKSTART_MODULE} needs {exc.name!r}, which is not installed"
    except ImportError as exc:
        return f"{QUICKSTART_MODULE} cannot be imported: {exc}"


def _add_quickstart(subparsers: Subparsers, wanted: bool) -> None:
    help_text = "run the local demo: Ray, collector and history server on this machine"
    parser = subparsers.add_parser("quickstart", help=help_text, description=help_text)
    # Imported only when asked for: the other commands must not pay for (or break on) it.
    module = _load_quickstart() if wanted else "not loaded"
    if isinstance(module, str):
        # Its flags are unknown: main() lets any through and reports the missing module.
        parser.set_defaults(handler=_quickstart_missing(module), accepts_unknown=True)
        return
    module.add_arguments(parser)
    run: Handler = module.run
    parser.set_defaults(handler=run)


# --------------------------------------------------------------------- parser
def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Stored (and live) Ray clusters from a shell: clusters, jobs, tasks, logs, export/import.",
        epilog="Examples: ray-history clusters | ray-history jobs raycluster-demo | "
        "ray-history tasks raycluster-demo --filter state=FAILED | "
        "ray-history export raycluster-demo latest -o s.tar.gz --storage-backend=gcs",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_query_commands(subparsers)
    _add_logs_command(subparsers)
    _add_open_command(subparsers)
    _add_transfer_commands(subparsers)
    _add_gc_command(subparsers)
    wanted = next((a for a in argv if not a.startswith("-")), None) == "quickstart"
    _add_quickstart(subparsers, wanted)
    return parser


Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def _add_query_commands(subparsers: Subparsers) -> None:
    p = subparsers.add_parser("clusters", help="list clusters and their stored sessions (and live ones via a server)")
    _add_common(p)
    _add_source(p)
    p.add_argument("-n", "--namespace", type=namespace, help="only this namespace")
    p.add_argument("--name", help="only this cluster (or RayJob/RayService) name")
    add_list_filters(p)
    p.set_defaults(handler=_query("clusters"))

    p = subparsers.add_parser("jobs", help="a session's jobs and their statuses")
    add_target_arguments(p)
    _add_common(p)
    _add_source(p)
    p.set_defaults(handler=_query("jobs"))

    p = subparsers.add_parser("tasks", help="a session's tasks, filtered like /api/v0/tasks")
    add_target_arguments(p)
    _add_common(p)
    _add_source(p)
    p.add_argument(
        "--filter",
        action="append",
        type=parse_filter,
        metavar="KEY=VALUE|KEY!=VALUE",
        help="repeatable; keys: state, name, job_id, task_id, actor_id, type, func_name, node_id, worker_id, ...",
    )
    p.add_argument(
        "--limit", action=Checked, parse=positive_int, help="at most this many tasks (server default 100, max 10000)"
    )
    p.add_argument("--detail", action="store_true", help="full task records (with --json)")
    p.add_argument(
        "--exclude-driver",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="leave out driver tasks (the server's default); --no-exclude-driver includes them",
    )
    p.set_defaults(handler=_query("tasks"))


def _add_logs_command(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "logs",
        help="print or follow a log file (by node+file, task or actor); without one, list the files",
        description="Print a log: --node ID --file NAME, --task-id ID or --actor-id ID. "
        "With only --node (or nothing, for a one-node session) list the log files.",
    )
    add_target_arguments(p)
    _add_common(p)
    _add_source(p)
    p.add_argument("--node", metavar="NODE_ID", help="node id (hex), needed with --file")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--file", metavar="FILENAME", help="path under the node's logs/ (e.g. raylet.out)")
    which.add_argument("--task-id", metavar="ID", help="the log of this task's worker")
    which.add_argument("--actor-id", metavar="ID", help="the log of this actor's worker")
    p.add_argument("--err", action="store_true", help="stderr of the task/actor worker instead of stdout")
    p.add_argument("--attempt", action=Checked, parse=whole_number, default=0, help="task attempt number (default 0)")
    p.add_argument(
        "--lines", action=Checked, parse=whole_number, help="last N lines (server default 1000; -1 = whole file)"
    )
    p.add_argument(
        "-f", "--follow", action="store_true", help="follow a live session's log; a stored one prints and exits"
    )
    p.set_defaults(handler=_query("logs"))


def _add_open_command(subparsers: Subparsers) -> None:
    from runtime.cli import open as open_command

    p = subparsers.add_parser(
        "open",
        help="print a session's shareable Dashboard URL (/sessions/...); open a browser when one is available",
        description="Print the shareable URL of a session's Ray Dashboard on the history server (--server): "
        "ray-history open CLUSTER [SESSION], or ray-history open SESSION. 'latest' becomes the newest stored "
        "session's name (a running cluster's: latest). A browser is opened with --browser, never with "
        "--no-browser, and by default when stdout is a terminal and a display is present; none is not an error.",
    )
    open_command.add_arguments(p)
    _add_common(p)
    _add_server(p)
    p.set_defaults(handler=_open)


def _add_transfer_commands(subparsers: Subparsers) -> None:
    p = subparsers.add_parser("export", help="one stored session into a .tar or .tar.gz (reads storage directly)")
    add_target_arguments(p, session_required=True)
    _add_common(p)
    add_storage_arguments(p)
    p.add_argument("-o", "--output", type=Path, required=True, metavar="FILE.tar[.gz]", help="archive to write")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar or summary")
    p.add_argument("--json", action="store_true", help="print a JSON summary on stdout")
    p.set_defaults(handler=_transfer("run_export"))

    p = subparsers.add_parser("import", help="an exported archive into storage (verified, idempotent)")
    p.add_argument("archive", type=Path, metavar="FILE", help="an archive written by ray-history export")
    _add_common(p)
    add_storage_arguments(p)
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace objects stored with different content, and add to a session already stored",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar or summary")
    p.add_argument("--json", action="store_true", help="print a JSON summary on stdout")
    p.set_defaults(handler=_transfer("run_import"))


def _add_gc_command(subparsers: Subparsers) -> None:
    help_text = "delete whole stored sessions that ended before a cutoff (never one still running)"
    p = subparsers.add_parser(
        "gc",
        help=help_text,
        description="Delete whole stored sessions that ended before a cutoff, never one still running. "
        "A session has ended when a newer session of its cluster is stored or, with --live-check kubernetes, "
        "when its RayCluster is gone; it is deleted when its newest object is older than --older-than. "
        "--dry-run says why each session is kept or deleted.",
    )
    _add_common(p)
    add_storage_arguments(p)
    gc.add_arguments(p)
    p.set_defaults(handler=gc.run)


def _configure_logging(verbose: int) -> None:
    from runtime.common.process import configure_logging

    configure_logging({0: "WARNING", 1: "INFO"}.get(verbose, "DEBUG"), "text")


def _message(args: argparse.Namespace, what: str, exc: BaseException) -> str:
    """``ray-history CMD: error: ...`` with the notes added on the way (e.g. what a failed
    import left behind); server and stored text in it shown without control characters."""
    lines = [f"{PROG} {args.command}: {what}: {exc}", *getattr(exc, "__notes__", ())]
    return printable("\n".join(lines)) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(arguments)
    args, unknown = parser.parse_known_args(arguments)
    if unknown and not getattr(args, "accepts_unknown", False):
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    _configure_logging(getattr(args, "verbose", 0))
    handler: Handler = args.handler
    try:
        return handler(args)
    except UsageError as exc:
        parser.exit(exc.exit_code, _message(args, "error", exc))
    except CliError as exc:
        parser.exit(exc.exit_code, _message(args, "error", exc))
    except StorageError as exc:
        parser.exit(EXIT_FAILURE, _message(args, "storage error", exc))
    except InvalidKeyError as exc:
        # A key the storage layer refused (an archive's key too long under this root,
        # one lying under another object): named, never a traceback.
        parser.exit(EXIT_FAILURE, _message(args, "invalid key", exc))
    except KeyboardInterrupt as exc:
        # An interrupted import says what it left behind (its note).
        for note in getattr(exc, "__notes__", ()):
            sys.stderr.write(f"{PROG} {args.command}: {printable(note)}\n")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (| head): not an error; keep Python from complaining at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
