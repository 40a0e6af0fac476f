"""``ray-history open``: a session's shareable Dashboard URL (``/sessions/...``), and a
browser on it when one can be shown.

The session is found in the server's ``/clusters`` listing (no index is built):
``open CLUSTER [SESSION]`` as the query commands take it, or ``open SESSION`` alone (a
stored session name, searched in every namespace unless ``-n`` is given). ``latest``
becomes the newest stored session's name, so the URL keeps showing what was shared; a
running cluster's becomes ``latest`` (the live cluster now, its stored session once it is
gone). The URL is printed on stdout, alone, for scripts.

Browser: ``--browser`` always tries, ``--no-browser`` never does; by default one is
opened when stdout is a terminal and a display is present (macOS, Windows, or
``DISPLAY``/``WAYLAND_DISPLAY`` set). Python's ``webbrowser`` picks it (``BROWSER``
overrides). No browser is never an error: the URL was printed.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import webbrowser
from collections.abc import Mapping
from typing import Any

from runtime.cli.api import HistoryApi
from runtime.cli.errors import CliError, UsageError
from runtime.cli.target import LATEST, LIVE, cluster_name, namespace, session_name
from runtime.storage.errors import InvalidKeyError
from runtime.storage.layout import CLUSTER_KINDS, RAYCLUSTER, ClusterRef, validate_session_name
from runtime.storage.session_keys import looks_like_session_name

logger = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "target",
        metavar="TARGET",
        help="CLUSTER: a RayCluster name (the RayJob/RayService name with --kind); "
        "or SESSION: a stored session name alone",
    )
    parser.add_argument(
        "session",
        metavar="SESSION",
        nargs="?",
        type=session_name,
        help="session name, 'latest' (default) or 'live'",
    )
    parser.add_argument(
        "-n",
        "--namespace",
        type=namespace,
        help="namespace (default: default; for a session name alone: every namespace)",
    )
    parser.add_argument(
        "--kind",
        choices=CLUSTER_KINDS,
        default=RAYCLUSTER,
        help="what CLUSTER names: a raycluster (default) or the rayjob/rayservice that created it",
    )
    parser.add_argument(
        "--browser",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="open the URL in a browser (default: when stdout is a terminal and a display is present)",
    )


def run(api: HistoryApi, args: argparse.Namespace, base_url: str) -> int:
    """Print the URL of the session ``args`` names (and maybe open it)."""
    cluster, session = resolve(api, args)
    from runtime.server.session_urls import session_path

    url = base_url.rstrip("/") + session_path(cluster, session)
    sys.stdout.write(url + "\n")
    sys.stdout.flush()
    if wants_browser(args.browser, sys.stdout.isatty(), os.environ, sys.platform):
        open_browser(url)
    return 0


def resolve(api: HistoryApi, args: argparse.Namespace) -> tuple[ClusterRef, str]:
    """The cluster and the session for the URL (see the module doc for ``latest``)."""
    if looks_like_session_name(args.target):
        if args.session is not None:
            raise UsageError(f"{args.target} is a session name: give CLUSTER SESSION, or the session alone")
        return _by_session(api, session_name_arg(args.target), args.namespace)
    try:
        name = cluster_name(args.target)
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"CLUSTER: {exc}") from None
    return _by_cluster(api, args.namespace or "default", args.kind, name, args.session or LATEST)


def session_name_arg(text: str) -> str:
    try:
        return session_name(text)
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"SESSION: {exc}") from None


def _listing(api: HistoryApi, params: list[tuple[str, str]]) -> list[dict[str, Any]]:
    entries = api.get_json("/clusters", params)
    if not isinstance(entries, list):
        raise CliError(f"{api.where}/clusters: unexpected answer {entries!r:.200}")
    return [e for e in entries if isinstance(e, dict)]


def _bad_entry(api: HistoryApi, what: str, entry: dict[str, Any]) -> CliError:
    return CliError(f"{api.where}/clusters: unexpected answer ({what}): {entry!r:.200}")


def _cluster_of(
    api: HistoryApi, entry: dict[str, Any], kind: str | None = None, owner: str | None = None
) -> ClusterRef:
    """The entry's cluster (``kind``/``owner`` given: asked for by owner); each name
    checked as storage checks it, since it goes into the printed URL."""
    ns, name = entry.get("namespace"), entry.get("name")
    if kind is None:
        kind, owner = entry.get("ownerKind") or RAYCLUSTER, entry.get("ownerName") or ""
    if not (isinstance(ns, str) and isinstance(name, str) and isinstance(kind, str) and isinstance(owner, str)):
        raise _bad_entry(api, "namespace, name, ownerKind and ownerName must be strings", entry)
    try:
        return ClusterRef(ns, name, kind, owner)
    except InvalidKeyError as exc:
        raise _bad_entry(api, str(exc), entry) from None


def _session_of(api: HistoryApi, entry: dict[str, Any]) -> str:
    """The entry's ``sessionName``: ``live`` (a running cluster) or a stored session name."""
    session = entry.get("sessionName")
    if session == LIVE:
        return LIVE
    if not isinstance(session, str):
        raise _bad_entry(api, "sessionName must be a string", entry)
    try:
        return validate_session_name(session)
    except InvalidKeyError as exc:
        raise _bad_entry(api, str(exc), entry) from None


def _by_session(api: HistoryApi, session: str, ns: str | None) -> tuple[ClusterRef, str]:
    if session in (LATEST, LIVE):
        raise UsageError(f"'{session}' of which cluster? give CLUSTER {session}")
    found = [e for e in _listing(api, [("namespace", ns)] if ns else []) if e.get("sessionName") == session]
    clusters = {_cluster_of(api, e) for e in found}
    if not clusters:
        where = f" in namespace {ns}" if ns else ""
        raise CliError(f"no stored session {session}{where} (ray-history clusters lists them)")
    if len(clusters) > 1:
        names = ", ".join(sorted(f"{c.namespace}/{c.name}" for c in clusters))
        raise UsageError(f"{session} is stored for several clusters ({names}): give CLUSTER {session} -n NAMESPACE")
    return clusters.pop(), session


def _by_cluster(api: HistoryApi, ns: str, kind: str, name: str, session: str) -> tuple[ClusterRef, str]:
    def matches(entry: dict[str, Any]) -> bool:
        if entry.get("namespace") != ns:  # asked for ns: anything else is not the cluster meant
            return False
        if kind == RAYCLUSTER:
            return bool(entry.get("name") == name)
        return bool(entry.get("ownerKind") == kind and entry.get("ownerName") == name)

    found = [e for e in _listing(api, [("namespace", ns), ("name", name)]) if matches(e)]
    what = f"{ns}/{name}" if kind == RAYCLUSTER else f"{ns}/{kind}/{name}"
    if session == LIVE:
        found = [e for e in found if e.get("sessionName") == LIVE]
        if not found:
            raise CliError(f"{what} is not running (no live cluster)")
    elif session != LATEST:
        found = [e for e in found if e.get("sessionName") == session]
    if not found:
        detail = "" if session == LATEST else f" with session {session}"
        raise CliError(f"no cluster {what}{detail} (ray-history clusters -n {ns} lists them)")
    entry = found[0]  # live first, then stored newest first: the latest
    resolved = _session_of(api, entry)
    if resolved == LIVE and session == LATEST:
        resolved = LATEST  # the live cluster now, its stored session once it is gone
    # Asked for by owner: the owner's URL, even if the entry lacks the owner (no controller reference).
    cluster = _cluster_of(api, entry) if kind == RAYCLUSTER else _cluster_of(api, entry, kind, name)
    return cluster, resolved


def wants_browser(flag: bool | None, is_tty: bool, env: Mapping[str, str], platform: str) -> bool:
    """``--browser``/``--no-browser``, else a terminal with a display (see the module doc)."""
    if flag is not None:
        return flag
    display = platform in ("darwin", "win32") or bool(env.get("DISPLAY") or env.get("WAYLAND_DISPLAY"))
    return is_tty and display


def open_browser(url: str) -> bool:
    """Try a browser; a warning (never an error) when none opens."""
    try:
        opened = webbrowser.open(url)
    except (webbrowser.Error, OSError) as exc:
        logger.debug("webbrowser failed: %s", exc)
        opened = False
    if not opened:
        sys.stderr.write("ray-history open: no browser could be opened; open the URL above\n")
    return opened
