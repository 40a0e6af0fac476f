"""Head only: session markers and dashboard endpoint snapshots.

Compared with KubeRay's Go collector:

* the marker of the current session is written as soon as the session is known
  (and again at shutdown), so a killed pod still leaves its session listed;
* ``/api/v0/cluster_metadata`` and ``/timezone`` are fetched once *per session*,
  not once per process, so a restarted head container gets them too;
* ``/api/jobs/`` is stored as well: the event stream has no real job status.

Everything runs in one background thread that sleeps on an Event between polls.
Once stop is requested that thread never starts a storage write, so the final poll
in :meth:`SnapshotRecorder.stop` always has the last word. Which endpoints are
fetched, and when each is due again, is in ``snapshot_endpoints.py``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from runtime.collector.config import CollectorConfig
from runtime.collector.dashboard import (
    DEFAULT_TIMEOUT,
    DashboardAuthError,
    DashboardClient,
    DashboardError,
    DashboardResponse,
    ErrorOnce,
    datasets_empty,
    parse_jobs,
    serve_empty,
)
from runtime.collector.discovery import IdentityChange, NodeIdentity
from runtime.collector.extra_polls import ExtraPolls
from runtime.collector.metrics import CollectorMetrics
from runtime.collector.session_markers import SessionMarkers
from runtime.collector.snapshot_endpoints import (
    DATASETS_URI,
    FETCH_ONCE,
    JOBS_URI,
    SERVE_URI,
    TERMINAL_JOB_STATES,
    VERSION_URI,
    DatasetPollState,
    OnceState,
    fresh_once_states,
    polled_endpoints,
    served_session,
)
from runtime.storage.base import ObjectStore
from runtime.storage.errors import InvalidKeyError, StorageError
from runtime.storage.layout import KeyLayout

T = TypeVar("T")

logger = logging.getLogger(__name__)

#: How long stop() waits for the polling thread before polling itself.
JOIN_TIMEOUT = 5.0
#: Re-check cadence while the session is unknown or the marker is not written.
RETRY_IDLE = 5.0


class _CancelledError(Exception):
    """Stop was requested (periodic) or the deadline passed (final)."""


@dataclass(frozen=True)
class _Pass:
    """A periodic pass (cancelled by stop) or the final one (bounded by deadline)."""

    final: bool = False
    deadline: float | None = None


PERIODIC = _Pass()


class SnapshotRecorder:
    """Writes session markers and dashboard snapshots for the head node."""

    def __init__(
        self,
        *,
        config: CollectorConfig,
        store: ObjectStore,
        layout: KeyLayout,
        identity: NodeIdentity,
        dashboard: DashboardClient,
        metrics: CollectorMetrics,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._config = config
        self._store = store
        self._layout = layout
        self._identity = identity
        self._dashboard = dashboard
        self._metrics = metrics
        self._clock = clock
        self._polled, invalid = polled_endpoints(config.additional_endpoints)
        for uri, exc in invalid:
            logger.warning("RAY_COLLECTOR_ADDITIONAL_ENDPOINTS: ignoring %r: %s", uri, exc)
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        # Serialises storage writes and state changes between the polling thread
        # and the final poll; the polling thread re-checks stop while holding it.
        self._commit_lock = threading.Lock()
        self._markers = SessionMarkers(store, layout, config.cluster, metrics)
        self._session: str | None = None
        self._datasets = DatasetPollState()
        self._once: dict[str, OnceState] = fresh_once_states()
        self._next_poll = 0.0
        self._extra_polls = ExtraPolls(clock)
        self._errors = ErrorOnce(logger)
        identity.add_listener(self._on_identity_change)

    @property
    def polled_endpoints(self) -> tuple[str, ...]:
        return tuple(uri for uri, _ in self._polled)

    # --------------------------------------------------------------- markers
    def write_marker(self, session: str, *, force: bool = False) -> bool:
        """Write the 0-byte marker listing ``session`` in the history; True when it
        is in storage. Skipped if this process already wrote it (unless ``force``)."""
        return self._markers.write(session, force=force)

    # ------------------------------------------------------------- lifecycle
    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="snapshot-recorder", daemon=True)
        self._thread.start()

    def stop(self, deadline: float) -> None:
        """Stop polling, then (within ``deadline``, a ``time.monotonic()`` value)
        write the marker again and run one final poll. Never raises; idempotent."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._wake.set()
        thread = self._thread
        if thread is not None and thread.is_alive():
            thread.join(max(0.0, min(JOIN_TIMEOUT, (deadline - self._clock()) / 3)))
            if thread.is_alive():
                # It may still be waiting on an HTTP answer; it will not write anything.
                logger.warning("snapshot thread still busy; final poll proceeds without it")
        session = self._identity.session_name()
        if session is None:
            logger.warning("no Ray session known at shutdown: no marker, no final snapshots")
            return
        try:
            self.write_marker(session, force=True)
            self._final_poll(session, deadline)
        except Exception:
            logger.exception("final snapshot poll failed")

    def job_ended(self) -> None:
        """The head's aggregator reported a driver job FINISHED: poll again shortly
        (:mod:`runtime.collector.extra_polls`)."""
        self._extra_polls.add()
        self._wake.set()

    def _on_identity_change(self, change: IdentityChange) -> None:
        if change.session_changed:
            self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            wait = RETRY_IDLE
            try:
                wait = self.tick()
            except _CancelledError:
                break
            except Exception:
                logger.exception("snapshot cycle failed")
            self._wake.wait(max(0.0, wait))
            self._wake.clear()

    def tick(self) -> float:
        """One pass of the background loop: marker of the current session, fetch-once
        endpoints that are due, and a poll if one is due. Returns the seconds until
        the next pass is due. Public so tests can drive it with a fake clock."""
        session = self._identity.session_name()
        if session is None:
            return RETRY_IDLE
        self._switch_session(session, PERIODIC)
        marker_ok = self.write_marker(session)
        for uri, name in FETCH_ONCE:
            state = self._once[uri]
            if not state.stored and not state.gave_up and self._clock() >= state.next_try:
                self._fetch_once(session, uri, name, state, PERIODIC)
        asked = self._extra_polls.take_due()  # a job just ended (taken even when the periodic poll is due)
        if self._clock() >= self._next_poll:
            self._poll(session, PERIODIC)
            self._next_poll = self._clock() + self._config.poll_interval
        elif asked:
            self._poll(session, PERIODIC)
        pending = [s.next_try for s in self._once.values() if not s.stored and not s.gave_up]
        extra = self._extra_polls.next_at()
        if extra is not None:
            pending.append(extra)
        wait = min([self._next_poll, *pending]) - self._clock()
        return wait if marker_ok else min(wait, RETRY_IDLE)

    def _switch_session(self, session: str, mode: _Pass) -> None:
        if session == self._session:
            return

        def reset() -> None:
            if self._session is not None:
                logger.info("snapshots now go to session %s (was %s)", session, self._session)
            self._session = session
            self._datasets = DatasetPollState()
            self._once = fresh_once_states()
            self._next_poll = 0.0

        self._commit(reset, mode)

    def _final_poll(self, session: str, deadline: float) -> None:
        mode = _Pass(final=True, deadline=deadline)
        try:
            # State (stored terminal jobs, fetch-once progress) is reused only for the same session.
            self._switch_session(session, mode)
            for uri, name in FETCH_ONCE:
                state = self._once[uri]
                if not state.stored and not state.gave_up:
                    self._fetch_once(session, uri, name, state, mode)
            self._poll(session, mode)
        except _CancelledError:
            logger.warning("final snapshot poll ran out of time")

    # ------------------------------------------------------------- plumbing
    def _commit(self, fn: Callable[[], T], mode: _Pass) -> T:
        """Run ``fn`` (a storage write and/or state change) under the commit lock,
        unless stop was requested (periodic) or the deadline passed (final)."""
        timeout = -1.0 if mode.deadline is None else max(0.0, mode.deadline - self._clock())
        if not self._commit_lock.acquire(timeout=timeout):
            raise _CancelledError
        try:
            if not mode.final and self._stop.is_set():
                raise _CancelledError
            return fn()
        finally:
            self._commit_lock.release()

    def _get(self, uri: str, name: str, mode: _Pass) -> tuple[DashboardResponse | None, bool]:
        """(the 200 answer or None, whether auth was refused)."""
        if not mode.final and self._stop.is_set():
            raise _CancelledError
        timeout = DEFAULT_TIMEOUT
        if mode.deadline is not None:
            remaining = mode.deadline - self._clock()
            if remaining <= 0:
                raise _CancelledError
            timeout = min(timeout, remaining)
        subject = f"snapshot {uri}"
        try:
            resp = self._dashboard.get(uri, timeout=timeout)
        except DashboardAuthError as exc:
            self._outcome(name, "error")
            self._errors.failure(subject, str(exc), logging.ERROR)
            return None, True
        except DashboardError as exc:
            self._outcome(name, "error")
            self._errors.failure(subject, str(exc))
            return None, False
        if not resp.ok:  # a 5xx/501 is the dashboard's trouble, not a snapshot
            self._outcome(name, "error")
            self._errors.failure(subject, f"HTTP {resp.status}: {resp.body[:200]!r}")
            return None, False
        return resp, False

    def _serves(self, session: str, mode: _Pass) -> bool:
        """False when the dashboard says it answers for another session (an answer that
        does not say, or none, keeps the previous behaviour: store)."""
        resp, _ = self._get(VERSION_URI, "version", mode)
        served = served_session(resp.body) if resp is not None else None
        if served is None or served == session:
            return True
        self._outcome("version", "other_session")
        logger.info("the dashboard answers for session %s, not %s: this poll is not stored", served, session)
        return False

    def _save(
        self,
        session: str,
        uri: str,
        name: str,
        body: bytes,
        mode: _Pass,
        *,
        on_stored: Callable[[], None] | None = None,
    ) -> bool:
        """Store ``body`` verbatim at the endpoint's key; True once stored."""

        def write() -> bool:
            try:
                self._store.put_bytes(self._layout.endpoint_key(self._config.cluster, session, uri), body)
            except (StorageError, InvalidKeyError) as exc:
                self._metrics.upload_failures.labels(what="snapshot", kind=type(exc).__name__).inc()
                self._outcome(name, "error")
                self._errors.failure(f"snapshot {uri}", f"store failed: {exc}")
                return False
            if on_stored is not None:
                on_stored()
            return True

        stored = self._commit(write, mode)
        if stored:
            self._outcome(name, "stored")
            self._errors.success(f"snapshot {uri}")
        return stored

    def _outcome(self, name: str, outcome: str) -> None:
        self._metrics.snapshots.labels(endpoint=name, outcome=outcome).inc()

    # -------------------------------------------------------------- fetching
    def _fetch_once(self, session: str, uri: str, name: str, state: OnceState, mode: _Pass) -> None:
        resp, auth_refused = self._get(uri, name, mode)
        if auth_refused:
            state.gave_up = True  # permanent for this session; a new session starts over
            return
        stored = False
        if resp is not None and not resp.body.strip():
            self._outcome(name, "empty")
            self._errors.failure(f"snapshot {uri}", "empty body")
        elif resp is not None:
            stored = self._save(session, uri, name, resp.body, mode, on_stored=lambda: setattr(state, "stored", True))
        if not stored:
            state.retry_later(self._clock())

    def _poll(self, session: str, mode: _Pass) -> None:
        """One pass over the polled endpoints, then the per-job datasets. The answers are
        stored only once the dashboard says it still serves ``session``: a head that
        restarted answers for its new session while discovery may still name the old one,
        whose stored job list must not be replaced by the new session's."""
        try:
            jobs: list[tuple[str, str]] = []
            fetched: list[tuple[str, str, bytes]] = []
            for uri, name in self._polled:
                resp, _ = self._get(uri, name, mode)
                if resp is None:
                    continue
                if uri == JOBS_URI:
                    try:
                        jobs = parse_jobs(resp.body)
                    except ValueError as exc:
                        self._errors.failure("snapshot datasets", f"cannot read the job list: {exc}")
                if uri == SERVE_URI and mode.final and serve_empty(resp.body):
                    # The Serve controller usually dies before the dashboard: an empty
                    # list at shutdown must not replace the last real one.
                    self._outcome(name, "empty")
                    continue
                fetched.append((uri, name, resp.body))
            if fetched and not self._serves(session, mode):
                return
            for uri, name, body in fetched:
                self._save(session, uri, name, body, mode)
            for job_id, status in jobs:
                self._poll_dataset(session, job_id, status in TERMINAL_JOB_STATES, mode)
        except _CancelledError:
            if not mode.final:
                raise
            logger.warning("final snapshot poll ran out of time")

    def _poll_dataset(self, session: str, job_id: str, terminal: bool, mode: _Pass) -> None:
        state = self._datasets
        if not state.should_fetch(job_id, mode.final):
            self._outcome("datasets", "skipped")
            return
        uri = DATASETS_URI.format(job_id=job_id)
        resp, _ = self._get(uri, "datasets", mode)
        if resp is None:
            return  # nothing recorded: retried next cycle
        if datasets_empty(resp.body):
            # Never stored: a stats-actor eviction must not erase an earlier snapshot.
            self._outcome("datasets", "empty")
            self._commit(lambda: state.record(job_id, terminal, stored=False), mode)
            return
        self._save(session, uri, "datasets", resp.body, mode, on_stored=lambda: state.record(job_id, terminal, True))
