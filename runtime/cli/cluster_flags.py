"""``ray-history clusters`` filters: ``--failed``, ``--since``, ``--until``, ``--owner``.

They become the server's ``/clusters`` parameters (``failed``, ``since``, ``until``,
``owner``; also in-process from storage), checked here first with the server's own
rules (:mod:`runtime.server.cluster_list`) so a mistake names the flag.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable


def _time_flag(flag: str) -> Callable[[str], str]:
    def check(value: str) -> str:
        # Imported when used: `ray-history gc` runs where runtime.server must not load.
        from runtime.server.cluster_list import ListParamError, parse_time

        try:
            parse_time(value, flag)
        except ListParamError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return value.strip()  # sent as typed: the server resolves "7d" against its clock

    return check


def add_list_filters(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--failed",
        action="store_true",
        help="only sessions with a failed job or a failed task attempt (indexed sessions only: "
        "an unindexed one cannot be judged and is left out)",
    )
    parser.add_argument(
        "--since", type=_time_flag("--since"), metavar="WHEN", help="created at or after: 7d, 12h, 2026-11-01, ISO time"
    )
    parser.add_argument(
        "--until", type=_time_flag("--until"), metavar="WHEN", help="created at or before (a date: that whole day)"
    )
    parser.add_argument("--owner", metavar="[KIND/]NAME", help="only sessions of this RayJob or RayService")


def list_params(args: argparse.Namespace) -> list[tuple[str, str]]:
    params = [("failed", "true")] if args.failed else []
    params += [(name, value) for name in ("since", "until", "owner") if (value := getattr(args, name))]
    return params
