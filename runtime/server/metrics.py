"""Prometheus metrics of the history server (``/metrics``).

A private registry per app, so tests can build many apps in one process. With
more than one gunicorn worker, ``PROMETHEUS_MULTIPROC_DIR`` switches the client to
its multi-process mode (set up by :mod:`runtime.server.gunicorn_conf`).
"""

from __future__ import annotations

import os

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, multiprocess
from prometheus_client.exposition import CONTENT_TYPE_LATEST

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
LOAD_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0)


class ServerMetrics:
    """The counters and histograms the server updates."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.request_seconds = Histogram(
            "historyserver_request_duration_seconds",
            "Request latency by route template and status class.",
            ["route", "method", "status"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.cache_requests = Counter(
            "historyserver_index_cache_requests_total",
            "Session index lookups: hit (indexed and fresh), miss (built), refresh (objects re-listed), "
            "joined (waited for a build or check another request started), "
            "stale (the previous index answered while re-indexing).",
            ["result"],
            registry=r,
        )
        self.session_load_seconds = Histogram(
            "historyserver_session_load_duration_seconds",
            "Time to build one session index (cold load).",
            ["mode"],
            buckets=LOAD_BUCKETS,
            registry=r,
        )
        self.index_builds = Counter(
            "historyserver_index_builds_total", "Index builds by outcome.", ["outcome"], registry=r
        )
        self.builds_in_progress = Gauge(
            "historyserver_index_builds_in_progress",
            "Index builds (or freshness checks) running now, waiting for another worker's build included.",
            registry=r,
            multiprocess_mode="livesum",
        )
        self.builds_queued = Gauge(
            "historyserver_index_builds_queued",
            "Index builds started by requests that wait for one of --max-builds slots.",
            registry=r,
            multiprocess_mode="livesum",
        )
        self.building_answers = Counter(
            "historyserver_index_building_responses_total",
            "Requests answered 503 with the progress of the index build they would have waited for.",
            registry=r,
        )
        self.evictions = Counter(
            "historyserver_index_evictions_total", "Indexes deleted to respect --cache-max-size.", registry=r
        )
        self.shared_downloads = Counter(
            "historyserver_shared_index_downloads_total",
            "Shared index look-ups on a cache miss: ok (downloaded and verified, no build), absent, "
            "rejected (foreign, corrupt or truncated: built locally), failed (storage error: built locally).",
            ["result"],
            registry=r,
        )
        self.shared_uploads = Counter(
            "historyserver_shared_index_uploads_total",
            "Shared index uploads after a build (--shared-index write): ok, failed (e.g. refused: answers "
            "are not affected), changed (the file was refreshed while uploading: no manifest written).",
            ["result"],
            registry=r,
        )
        self.proxied = Counter(
            "historyserver_live_proxy_requests_total",
            "Requests proxied to live clusters, by outcome.",
            ["outcome"],
            registry=r,
        )

    def exposition(self) -> bytes:
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
            return bytes(generate_latest(registry))
        return bytes(generate_latest(self.registry))
