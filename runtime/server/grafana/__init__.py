"""Metrics of dead clusters (issue #20): the Dashboard's Grafana panels and a
Prometheus range query served for stored sessions.

* :mod:`.probes` -- ``/api/grafana_health`` and ``/api/prometheus_health``.
* :mod:`.window` -- a stored session's time window and the rewrite of Grafana's
  relative ``from``/``to`` into it.
* :mod:`.promql` -- which PromQL a caller may send (every selector pinned to a session).
* :mod:`.access` -- a ``SessionName`` to the stored session, and may the caller read it.
* :mod:`.upstream` -- the streamed, credential-adding hop to Grafana or Prometheus.

The settings are :class:`runtime.server.config.MetricsConfig`; the routes are in
:mod:`runtime.server.views.grafana`.
"""
