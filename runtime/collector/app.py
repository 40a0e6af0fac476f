"""The collector process: wires the parts together and runs the shutdown sequence.

Start-up never blocks on Ray: the event receiver listens at once (events for a
node not identified yet are spooled under ``_unknown`` and filed when the node ID
is known), unlike KubeRay's Go collector, which listens only after the head dashboard
answered and exits after a minute if it does not.

Shutdown (SIGTERM), all inside ``shutdown_deadline``:
stop accepting (503) -> let in-flight batches finish -> rotate every spool file
(a batch whose body completes after that gets 503 too) ->
in parallel: upload all spool files, ship every log byte, final snapshot poll and
session marker (head) -> exit.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from runtime.collector.config import CollectorConfig
from runtime.collector.dashboard import DashboardClient, base_url_from_fq_ip
from runtime.collector.discovery import IdentityChange, NodeIdentity
from runtime.collector.events.http_server import ServerLimits
from runtime.collector.events.quarantine import Quarantine
from runtime.collector.events.receiver import EventReceiver
from runtime.collector.events.spool import Spool
from runtime.collector.events.uploader import EventUploader
from runtime.collector.logs import LogShipper
from runtime.collector.metrics import CollectorMetrics
from runtime.collector.metrics_config import MetricsConfigShipper
from runtime.collector.session_end import SessionEndMarker
from runtime.collector.snapshots import SnapshotRecorder
from runtime.storage.base import ObjectStore

logger = logging.getLogger(__name__)

#: Time kept back from the deadline for closing the listener and exiting.
EXIT_MARGIN = 1.0
#: How long past the deadline a part may take to notice it (it checks between calls).
LATE_GRACE = 0.2


@dataclass
class ShutdownReport:
    events_uploaded: bool
    logs_shipped: bool
    seconds: float


class Collector:
    """One collector: receiver, spool, uploader, log shipper and (head) snapshots."""

    def __init__(self, config: CollectorConfig, store: ObjectStore, metrics: CollectorMetrics | None = None) -> None:
        self.config = config
        self.store = store
        self.metrics = metrics or CollectorMetrics()
        self.layout = config.storage.layout
        head_for_discovery = None
        if config.fq_ray_ip and config.pod_ip:
            head_for_discovery = self._dashboard(base_url_from_fq_ip(config.fq_ray_ip, config.dashboard_port))
        self.identity = NodeIdentity(config, head_for_discovery)
        self.identity.add_listener(self._on_identity_change)
        self._stop_threads = threading.Event()
        #: set once the receiver listens; ``bound_port`` is then the real port
        self.started = threading.Event()
        self.bound_port = config.events_port

        if config.event_data_dir.resolve().is_relative_to(config.ray_tmp_root.resolve()):
            logger.warning(
                "the event spool %s is under Ray's temp root %s, which the Ray job can write: "
                "give it a volume of its own (--event-data-dir; docs/collector.md#where-the-spool-lives)",
                config.event_data_dir,
                config.ray_tmp_root,
            )
        cluster_key = f"{config.cluster.name}_{config.cluster.namespace}"
        # One quarantine: invalid events from the receiver, unstorable files from the uploader.
        quarantine = Quarantine(config.event_data_dir / "quarantine" / f"{cluster_key}.jsonl")
        self.spool = Spool(
            config.event_data_dir,
            cluster_key,
            max_file_size=config.event_max_file_size,
            rotation_interval=config.event_rotation_interval,
            fsync=config.event_fsync,
            max_open_files=config.max_open_spool_files,
            on_ready=lambda ready: self.uploader.submit(ready),  # noqa: PLW0108 - uploader is built below
        )
        self.uploader = EventUploader(
            store=store,
            layout=self.layout,
            cluster=config.cluster,
            spool=self.spool,
            node_id=self.identity.node_id,
            metrics=self.metrics,
            quarantine=quarantine,
            compression=config.event_compression,
            workers=config.upload_workers,
        )
        self.receiver = EventReceiver(
            spool=self.spool,
            quarantine=quarantine,
            metrics=self.metrics,
            max_disk=config.event_max_disk,
            max_request_size=config.max_request_size,
            fallback_node=self.identity.node_id,
            max_targets_per_batch=config.max_targets_per_batch,
            limits=ServerLimits(
                max_connections=config.max_connections,
                header_timeout=config.request_header_timeout,
                body_timeout=config.request_body_timeout,
            ),
            on_job_ended=self._job_ended,
        )
        self.snapshots: SnapshotRecorder | None = None
        if config.is_head and config.enable_log_collector:
            self.snapshots = SnapshotRecorder(
                config=config,
                store=store,
                layout=self.layout,
                identity=self.identity,
                dashboard=self._dashboard(config.dashboard_address),
                metrics=self.metrics,
            )
        self.logs: LogShipper | None = None
        if config.enable_log_collector:
            self.logs = LogShipper(
                store=store,
                layout=self.layout,
                cluster=config.cluster,
                tmp_root=config.ray_tmp_root,
                node_id=self.identity.node_id,
                upload_interval=config.log_upload_interval,
                metrics=self.metrics,
                on_session=self._session_seen if self.snapshots else None,
                node_for_session=self.identity.node_id_for,
            )

        self.session_end = SessionEndMarker(store, self.layout, config.cluster) if self.snapshots else None
        # Ray's generated Grafana dashboards and Prometheus config, once per session (#20).
        self.metrics_config = (
            MetricsConfigShipper(store, self.layout, config.cluster, config.ray_tmp_root) if self.snapshots else None
        )

    def _mark_ended(self, deadline: float) -> None:
        """Last of the shutdown (head): nothing this collector stored is newer than the
        end marker. Bounded by the deadline like every other part."""
        session = self.identity.session_name()
        if self.session_end is None or session is None:
            return
        marker = self.session_end
        thread = threading.Thread(
            target=marker.ended, args=(session, "the head collector shut down"), name="session-end", daemon=True
        )
        thread.start()
        thread.join(max(0.0, deadline + EXIT_MARGIN / 2 - time.monotonic()))

    def _job_ended(self) -> None:
        if self.snapshots is not None:  # only the head polls its dashboard
            self.snapshots.job_ended()

    def _dashboard(self, base_url: str) -> DashboardClient:
        return DashboardClient(
            base_url,
            auth_token=self.config.auth_token,
            k8s_token_auth=self.config.k8s_token_auth,
            auth_mode=self.config.auth_mode,
        )

    def _session_seen(self, session: str) -> None:
        """The log shipper found a session's logs: make sure it is listed (head only)."""
        if self.snapshots is not None:
            self.snapshots.write_marker(session)

    def _on_identity_change(self, change: IdentityChange) -> None:
        if change.old_node != change.new_node and change.new_node is not None:
            # Events that arrived before the node was known can be filed now.
            self.spool.rotate_unknown_node()
        if self.session_end is not None and change.session_changed:
            # Storage calls off the discovery thread: it must not wait on a slow bucket.
            self._thread(self._sessions_switched, "session-end-marker", change.old_session, change.new_session)

    def _sessions_switched(self, old: str | None, new: str | None) -> None:
        if self.session_end is None:
            return
        if new is not None:
            self.session_end.reopened(new)
        if old is not None:
            self.session_end.ended(old, "Ray started a new session on this head")

    # -------------------------------------------------------------- running
    def run(self, stop: threading.Event) -> ShutdownReport:
        """Serve until ``stop`` is set, then shut down within the deadline."""
        for ready in self.spool.resume():
            self.uploader.submit(ready)
        self.uploader.start()
        self.identity.refresh()
        self._thread(self.identity.run, "identity", self._stop_threads)
        if self.logs is not None:
            self.logs.start()
        if self.snapshots is not None:
            self.snapshots.start()
        if self.metrics_config is not None:
            self.metrics_config.start()
        server = self.receiver.make_server(self.config.events_host, self.config.events_port)
        self._thread(server.serve_forever, "event-receiver")
        self._thread(self._rotate_periodically, "spool-rotation")
        logger.info(
            "collector (%s) for %s/%s listening on %s:%d, storage %s",
            self.config.role,
            self.config.cluster.namespace,
            self.config.cluster.name,
            self.config.events_host,
            server.server_address[1],
            self.store.describe(),
        )
        self.bound_port = int(server.server_address[1])
        self.started.set()
        stop.wait()
        try:
            return self.shutdown()
        finally:
            # The listener answered 503 during shutdown; close it last.
            server.shutdown()
            server.server_close()

    def _thread(self, target: Callable[..., object], name: str, *args: object) -> None:
        threading.Thread(target=target, args=args, name=name, daemon=True).start()

    def _rotate_periodically(self) -> None:
        interval = max(0.5, min(5.0, self.config.event_rotation_interval / 2))
        while not self._stop_threads.wait(interval):
            try:
                with self.receiver.write_lock:
                    self.spool.rotate_due()
            except OSError:
                logger.exception("rotating spool files failed")
            self.metrics.spool_bytes.set(self.spool.used_bytes)

    def shutdown(self) -> ShutdownReport:
        started = time.monotonic()
        deadline = started + self.config.shutdown_deadline - EXIT_MARGIN
        logger.info("shutting down: uploading everything within %.0fs", self.config.shutdown_deadline)
        self.receiver.begin_shutdown()
        self.receiver.wait_idle(timeout=min(2.0, self.config.shutdown_deadline / 4))
        # From here a batch still arriving gets 503 (Ray sends it again), never a 200
        # for a spool file this shutdown would leave behind.
        self.receiver.final_rotation()
        self._stop_threads.set()

        # Each part honours the deadline between storage calls, but one call can block
        # far longer (a connect or read timeout, a retry budget): wait only until the
        # deadline and leave a blocked part behind. Nothing is lost by that: what it
        # carried is still on local disk for the next process.
        pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="shutdown")
        events = pool.submit(self.uploader.drain, deadline)
        logs = pool.submit(self.logs.stop, deadline) if self.logs else None
        snaps = pool.submit(self.snapshots.stop, deadline) if self.snapshots else None
        config_files = pool.submit(self.metrics_config.stop) if self.metrics_config else None
        parts: list[Future[Any]] = [f for f in (events, logs, snaps, config_files) if f is not None]
        _done, late = wait(parts, timeout=max(0.0, deadline - time.monotonic()) + LATE_GRACE)
        pool.shutdown(wait=False)
        if late:
            logger.warning("shutdown: %d part(s) still blocked on storage at the deadline; left behind", len(late))
        events_ok = events not in late and bool(events.result())
        logs_ok = logs is None or (logs not in late and bool(logs.result()))
        self.uploader.stop(timeout=max(0.0, deadline + EXIT_MARGIN / 2 - time.monotonic()))
        self._mark_ended(deadline)
        report = ShutdownReport(bool(events_ok), bool(logs_ok), time.monotonic() - started)
        logger.info(
            "shutdown finished in %.1fs: events %s, logs %s",
            report.seconds,
            "all uploaded" if report.events_uploaded else "LEFT ON DISK",
            "all shipped" if report.logs_shipped else "NOT ALL SHIPPED",
        )
        return report
