"""The CLI's expected failures and their exit statuses (no traceback for these)."""

from __future__ import annotations

#: A missing cluster, session, file or object; an unreachable server or storage.
EXIT_FAILURE = 1
#: A bad flag, argument or filter (argparse's own status for usage errors).
EXIT_USAGE = 2
#: Interrupted with Ctrl-C (the shell convention 128 + SIGINT).
EXIT_INTERRUPTED = 130


class CliError(Exception):
    """An expected failure: printed as ``ray-history: error: ...`` and exited with ``exit_code``."""

    exit_code = EXIT_FAILURE


class UsageError(CliError):
    """The command line (or a value it carried) was wrong."""

    exit_code = EXIT_USAGE
