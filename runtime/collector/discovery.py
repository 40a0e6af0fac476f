"""Which Ray node and which session this collector serves.

Node ID sources, first that answers wins:

1. ``{ray_tmp_root}/raylet_node_id`` (the GKE guide's postStart hook writes it);
2. the head dashboard's ``/api/v0/nodes?limit=10000``: the first ALIVE entry whose
   ``node_ip`` is ``POD_IP`` (only with ``POD_IP`` and ``FQ_RAY_IP`` set);
3. the current session directory (``*_port_<nodeId>`` files, ``raylet.out``).

Unlike KubeRay's Go collector ("the reference" below), nothing here exits or blocks: an unknown ID stays None and is
retried every pass, so the event receiver can listen from the first second. The
dashboard is asked every pass only while the ID is unknown; once known it is asked
again when the session or the raylet socket changes (a restarted raylet has a new
ID) and otherwise once a minute, so thousands of workers do not hammer the head.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime.collector import session_files
from runtime.collector.config import CollectorConfig
from runtime.collector.dashboard import DashboardClient, DashboardError, ErrorOnce
from runtime.common.ids import InvalidIdError, to_hex_id

logger = logging.getLogger(__name__)

NODES_URI = "/api/v0/nodes?limit=10000"
NODES_TIMEOUT = 5.0
#: How often a known node ID is re-checked against the dashboard without a trigger.
DASHBOARD_RECHECK = 60.0
#: After a trigger (session or raylet socket changed), ask on every pass this long:
#: the old raylet may still be listed ALIVE for a while.
TRIGGER_WINDOW = 60.0


@dataclass(frozen=True)
class IdentityChange:
    """What a refresh pass changed (either pair may be equal)."""

    old_node: str | None
    new_node: str | None
    old_session: str | None
    new_session: str | None

    @property
    def node_changed(self) -> bool:
        return self.old_node != self.new_node

    @property
    def session_changed(self) -> bool:
        return self.old_session != self.new_session


def match_node(body: Any, pod_ip: str, prefer: str | None = None) -> str | None:
    """The node ID (hex) for ``pod_ip`` in an ``/api/v0/nodes`` answer.

    Like the reference, the first entry with ``node_ip == pod_ip``, a non-empty
    ``node_id`` and ``state == "ALIVE"``. When several match (several raylets behind
    one IP), ``prefer`` wins if it is among them.
    """
    try:
        entries = body["data"]["result"]["result"]
    except (KeyError, TypeError) as exc:
        raise ValueError("answer is not shaped {data: {result: {result: [...]}}}") from exc
    if not isinstance(entries, list):
        raise ValueError("data.result.result is not a list")
    found: list[str] = []
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("node_ip") != pod_ip or entry.get("state") != "ALIVE":
            continue
        raw = entry.get("node_id")
        if not isinstance(raw, str) or not raw:
            continue
        try:
            found.append(to_hex_id(raw))
        except InvalidIdError:
            logger.warning("ignoring undecodable node_id %r in %s", raw[:80], NODES_URI)
    if prefer is not None and prefer in found:
        return prefer
    return found[0] if found else None


def _socket_identity(session_dir: Path | None) -> tuple[int, int] | None:
    """Inode and mtime of the raylet socket: they change when a raylet restarts."""
    if session_dir is None:
        return None
    try:
        st = os.stat(session_dir / "sockets" / "raylet")
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns)


class NodeIdentity:
    """Thread-safe tracker of this node's Ray node ID (lower-case hex) and session."""

    def __init__(
        self,
        config: CollectorConfig,
        head_dashboard: DashboardClient | None,
        *,
        dashboard_recheck: float = DASHBOARD_RECHECK,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._tmp_root = Path(config.ray_tmp_root)
        self._pod_ip = config.pod_ip
        self._dashboard = head_dashboard if config.pod_ip else None
        self._recheck = dashboard_recheck
        self._clock = clock
        self._lock = threading.Lock()  # guards the published values and listeners
        self._refresh_lock = threading.Lock()  # one refresh pass at a time
        self._node: str | None = None
        self._node_source = ""
        self._session_dir: Path | None = None
        self._listeners: list[Callable[[IdentityChange], None]] = []
        # Dashboard bookkeeping, touched only under _refresh_lock.
        self._dash_node: str | None = None
        self._dash_asked_at: float | None = None
        self._trigger_until = 0.0
        self._socket: tuple[int, int] | None = None
        self._errors = ErrorOnce(logger)
        if head_dashboard is not None and not config.pod_ip:
            logger.info("POD_IP is not set: node ID comes from %s or the session directory", self._tmp_root)

    # -------------------------------------------------------------- readers
    def node_id(self) -> str | None:
        with self._lock:
            return self._node

    def node_id_for(self, session: str) -> str | None:
        """This node's ID in ``session``, None while discovery knows another session (or
        none): the log shipper may see a new session before discovery does, and must not
        file its logs under the previous session's node."""
        with self._lock:
            known = self._session_dir.name if self._session_dir is not None else None
            return self._node if known == session else None

    def session_dir(self) -> Path | None:
        with self._lock:
            return self._session_dir

    def session_name(self) -> str | None:
        with self._lock:
            return self._session_dir.name if self._session_dir is not None else None

    def add_listener(self, fn: Callable[[IdentityChange], None]) -> None:
        """``fn`` is called (outside the lock, in the refreshing thread) on any change."""
        with self._lock:
            self._listeners.append(fn)

    # ------------------------------------------------------------- refresh
    def refresh(self) -> bool:
        """One discovery pass; True if the node ID or the session changed."""
        with self._refresh_lock:
            session_dir = session_files.resolve_session_latest(self._tmp_root)
            with self._lock:
                old_node, old_dir = self._node, self._session_dir
            old_session = old_dir.name if old_dir is not None else None
            new_session = session_dir.name if session_dir is not None else old_session
            if session_dir is None:
                session_dir = old_dir  # keep the last known session while the link is missing
            if session_dir is None:
                self._errors.failure(
                    "session", f"{self._tmp_root}/{session_files.SESSION_LATEST} does not resolve yet", logging.INFO
                )
            else:
                self._errors.success("session")
            session_changed = new_session != old_session
            node, source = self._discover_node(session_dir, session_changed=session_changed)
            if node is None:
                # Unknown this pass: keep what we had, unless it was the previous
                # session's node (a restarted Ray has a new node ID).
                node, source = (None, "") if session_changed else (old_node, self._node_source)
            with self._lock:
                self._node, self._node_source, self._session_dir = node, source, session_dir
                listeners = list(self._listeners)
            change = IdentityChange(old_node, node, old_session, new_session)
        if not (change.node_changed or change.session_changed):
            return False
        if change.session_changed:
            logger.info("Ray session: %s -> %s", old_session, new_session)
        if change.node_changed:
            logger.info("Ray node ID: %s -> %s (from %s)", old_node, node, source)
        for fn in listeners:
            try:
                fn(change)
            except Exception:
                logger.exception("identity listener %r failed", fn)
        return True

    def _discover_node(self, session_dir: Path | None, *, session_changed: bool) -> tuple[str | None, str]:
        from_file = session_files.node_id_from_file(self._tmp_root)
        if from_file is not None:
            return from_file, "file"
        local = session_files.node_id_from_session_dir(session_dir) if session_dir is not None else None
        if self._dashboard is not None and self._pod_ip:
            socket_now = _socket_identity(session_dir)
            now = self._clock()
            if session_changed or socket_now != self._socket:
                self._trigger_until = now + TRIGGER_WINDOW
            if session_changed:
                self._dash_node = None  # the dashboard's answer named the previous session's node
            self._socket = socket_now
            if self._dashboard_due(now, known=self._dash_node is not None or local is not None):
                self._dash_asked_at = now
                answered, found = self._ask_dashboard(self._pod_ip, prefer=local)
                if answered:  # a failed request keeps the last answer
                    self._dash_node = found
            if self._dash_node is not None:
                return self._dash_node, "dashboard"
        if local is not None:
            return local, "session directory"
        return None, ""

    def _dashboard_due(self, now: float, *, known: bool) -> bool:
        if self._dash_asked_at is None or not known or now < self._trigger_until:
            return True
        return now - self._dash_asked_at >= self._recheck

    def _ask_dashboard(self, pod_ip: str, prefer: str | None) -> tuple[bool, str | None]:
        """(whether the dashboard answered, the matching node ID)."""
        if self._dashboard is None:
            return False, None
        subject = f"node ID from {self._dashboard.base_url}{NODES_URI}"
        try:
            resp = self._dashboard.get(NODES_URI, timeout=NODES_TIMEOUT)
            if not resp.ok:
                raise DashboardError(f"HTTP {resp.status}")
            found = match_node(json.loads(resp.body), pod_ip, prefer)
        except (DashboardError, ValueError) as exc:  # JSONDecodeError is a ValueError
            self._errors.failure(subject, str(exc))
            return False, None
        if found is None:
            self._errors.failure(subject, f"no ALIVE node with node_ip {pod_ip} yet", level=logging.INFO)
        else:
            self._errors.success(subject)
        return True, found

    def run(self, stop: threading.Event, interval: float = 5.0) -> None:
        """Refresh every ``interval`` seconds until ``stop`` is set; never raises."""
        while not stop.is_set():
            try:
                self.refresh()
            except Exception:  # a bug here must not kill discovery for good
                logger.exception("node identity refresh failed")
            stop.wait(interval)
