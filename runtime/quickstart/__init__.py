"""``make demo``: the whole product on a laptop in one command.

A local Ray 2.60 head runs with the collector beside it (storage ``local``), a sample
job with a failing task runs, the cluster is stopped, and the history server serves
the Ray Dashboard of the gone cluster from the same storage until Ctrl-C.

``add_arguments`` and ``run`` are what ``ray-history quickstart`` and
``python -m runtime.quickstart`` call.
"""

from __future__ import annotations

import argparse
import sys

from runtime.quickstart.errors import QuickstartError
from runtime.quickstart.options import OptionsError, add_arguments, options_from_args
from runtime.quickstart.ports import PortInUseError

__all__ = ["add_arguments", "run"]


def run(args: argparse.Namespace) -> int:
    """Exit status: 0 done (or stopped with Ctrl-C while serving), 2 a bad flag or a
    taken port, 1 a step failed, 130 interrupted before the history server was up."""
    from runtime.quickstart.runner import run_quickstart  # imports requests etc. lazily

    try:
        options = options_from_args(args)
    except OptionsError as exc:
        print(f"quickstart: error: {exc}", file=sys.stderr)  # noqa: T201 - CLI output
        return 2
    try:
        return run_quickstart(options)
    except PortInUseError as exc:
        print(f"quickstart: {exc}", file=sys.stderr)  # noqa: T201 - CLI output
        return 2
    except QuickstartError as exc:
        print(f"quickstart: {exc}", file=sys.stderr)  # noqa: T201 - CLI output
        return 1
