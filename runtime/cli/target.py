"""Which stored (or live) session a query command means, and entering it."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from runtime.cli.api import HistoryApi
from runtime.cli.errors import CliError
from runtime.storage.errors import InvalidKeyError
from runtime.storage.layout import (
    CLUSTER_KINDS,
    RAYCLUSTER,
    session_created_at,
    validate_k8s_name,
    validate_namespace,
    validate_session_name,
)

LATEST = "latest"
LIVE = "live"


def cluster_name(text: str) -> str:
    try:
        return validate_k8s_name(text, "cluster name")
    except InvalidKeyError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def namespace(text: str) -> str:
    try:
        return validate_namespace(text)
    except InvalidKeyError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def session_name(text: str) -> str:
    """``latest``, ``live`` or a stored ``session_YYYY-MM-DD_HH-MM-SS_ffffff_pid``."""
    if text in (LATEST, LIVE):
        return text
    try:
        validate_session_name(text)
    except InvalidKeyError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if session_created_at(text) is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a session name like session_2026-11-22_01-45-25_333080_9264 (or 'latest', 'live')"
        )
    return text


def add_target_arguments(parser: argparse.ArgumentParser, *, session_required: bool = False) -> None:
    """``CLUSTER [SESSION] --namespace NS --kind KIND``."""
    parser.add_argument(
        "cluster",
        metavar="CLUSTER",
        type=cluster_name,
        help="RayCluster name (the RayJob/RayService name with --kind rayjob/rayservice)",
    )
    if session_required:
        parser.add_argument("session", metavar="SESSION", type=session_name, help="session name, or 'latest'")
    else:
        parser.add_argument(
            "session",
            metavar="SESSION",
            nargs="?",
            default=LATEST,
            type=session_name,
            help="session name; 'latest' (default: the live cluster if running, else the newest stored session)",
        )
    parser.add_argument("-n", "--namespace", type=namespace, default="default", help="namespace (default: default)")
    parser.add_argument(
        "--kind",
        choices=CLUSTER_KINDS,
        default=RAYCLUSTER,
        help="what CLUSTER names: a raycluster (default) or the rayjob/rayservice that created it",
    )


@dataclass(frozen=True)
class Entered:
    """The session the server selected (``latest`` resolved)."""

    namespace: str
    name: str
    session: str


def enter(api: HistoryApi, args: argparse.Namespace) -> Entered:
    """``/enter_cluster/...``: the server keeps the selection in cookies for the next calls."""
    path = f"/enter_cluster/{args.namespace}/{args.kind}/{args.cluster}/{args.session}"
    answer = api.get_json(path)
    if not isinstance(answer, dict) or answer.get("result") != "success":
        raise CliError(f"{api.where}{path}: unexpected answer {answer!r:.200}")
    fields = [answer.get(name) for name in ("namespace", "name", "session")]
    if not all(isinstance(value, str) and value for value in fields):
        raise CliError(
            f"{api.where}{path}: unexpected answer (namespace, name and session must be strings) {answer!r:.200}"
        )
    return Entered(str(fields[0]), str(fields[1]), str(fields[2]))
