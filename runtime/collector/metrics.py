"""Prometheus metrics of one collector process (served on ``/metrics``).

One registry per collector instance, passed to every part, so tests can run
several collectors in one process without sharing counters.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_PREFIX = "ray_history_collector"
_UPLOAD_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class CollectorMetrics:
    """Every metric the collector exports."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.event_requests = Counter(
            f"{_PREFIX}_event_requests", "POST /v1/events requests by HTTP status", ["status"], registry=r
        )
        self.events_accepted = Counter(
            f"{_PREFIX}_events_accepted", "events durably spooled, by Ray event type", ["event_type"], registry=r
        )
        self.events_quarantined = Counter(
            f"{_PREFIX}_events_quarantined", "invalid events set aside locally, by reason", ["reason"], registry=r
        )
        self.events_uploaded = Counter(f"{_PREFIX}_events_uploaded", "events in uploaded event files", registry=r)
        self.event_files_uploaded = Counter(f"{_PREFIX}_event_files_uploaded", "event files uploaded", registry=r)
        self.spool_bytes = Gauge(f"{_PREFIX}_spool_bytes", "bytes waiting in the local event spool", registry=r)
        self.spool_files = Gauge(f"{_PREFIX}_spool_files", "files waiting in the local event spool", registry=r)
        self.upload_failures = Counter(
            f"{_PREFIX}_upload_failures", "failed uploads by what and error kind", ["what", "kind"], registry=r
        )
        self.upload_seconds = Histogram(
            f"{_PREFIX}_upload_seconds", "upload latency by what", ["what"], buckets=_UPLOAD_BUCKETS, registry=r
        )
        self.log_bytes_shipped = Counter(f"{_PREFIX}_log_bytes_shipped", "log bytes uploaded", registry=r)
        self.log_files_shipped = Counter(f"{_PREFIX}_log_files_shipped", "log file uploads", registry=r)
        self.log_files_skipped = Counter(
            f"{_PREFIX}_log_files_skipped", "log files not shipped: name not allowed in a storage key", registry=r
        )
        self.snapshots = Counter(
            f"{_PREFIX}_snapshots",
            "dashboard snapshots by endpoint kind and outcome",
            ["endpoint", "outcome"],
            registry=r,
        )
        self.markers_written = Counter(f"{_PREFIX}_markers_written", "session markers written", registry=r)
