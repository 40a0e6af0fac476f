"""Dashboard state routes for stored sessions: actors, jobs, nodes, events, cluster
status, timezone / cluster metadata snapshots and the metrics health probes
(:mod:`runtime.server.grafana.probes`)."""

from __future__ import annotations

import logging

from flask import Blueprint, Response, request

from runtime.server.context import SessionContext, services, session_route
from runtime.server.errors import ApiError, json_response
from runtime.server.grafana.probes import grafana_probe, metrics_probe, prometheus_probe
from runtime.server.queries import state
from runtime.server.queries.cluster_status import DEBUG_STATE, MAX_DEBUG_STATE_BYTES, cluster_status_text
from runtime.server.session_end import has_ended
from runtime.storage.errors import InvalidKeyError, ObjectNotFoundError
from runtime.storage.layout import session_created_at

logger = logging.getLogger(__name__)

bp = Blueprint("state", __name__)

_EMPTY_TIMEZONE = b'{"offset":"","value":""}'


def _ended(ctx: SessionContext) -> bool:
    """Whether the selected session is over (its nodes and actors then show DEAD at its end)."""
    return has_ended(ctx.services, ctx.cluster, ctx.session, session_created_at(ctx.session), ctx.index)


# --------------------------------------------------------------------- actors
@bp.get("/logical/actors")
@session_route
def actors(ctx: SessionContext) -> Response:
    ids = request.args.get("ids")
    return json_response(state.all_actors(ctx.index, ids.split(",") if ids is not None else None, ended=_ended(ctx)))


@bp.get("/logical/actors/<path:actor_id>")
@session_route
def actor(ctx: SessionContext, actor_id: str) -> Response:
    return json_response(state.one_actor(ctx.index, actor_id, ended=_ended(ctx)))


# ----------------------------------------------------------------------- jobs
@bp.get("/api/jobs/")
@session_route
def jobs(ctx: SessionContext) -> Response:
    return json_response(state.all_jobs(ctx.index))


@bp.get("/api/jobs/<job_id>")
@session_route
def job(ctx: SessionContext, job_id: str) -> Response:
    found = state.one_job(ctx.index, job_id)
    if found is None:
        # Deliberately a 404 JSON answer: KubeRay's Go history server says 200 with plain text.
        raise ApiError(404, f"Job {job_id} does not exist")
    return json_response(found)


# ---------------------------------------------------------------------- nodes
@bp.get("/nodes")
@session_route
def nodes(ctx: SessionContext) -> Response:
    view = request.args.get("view")
    if view is None or view == "summary":
        return json_response(state.node_summary(ctx.index, ended=_ended(ctx)))
    if view.lower() == "hostnamelist":  # Ray compares this one case-insensitively
        return json_response(state.host_name_list(ctx.index))
    raise ApiError(400, f"unsupported view parameter: {view} (use summary or hostNameList)")


@bp.get("/nodes/<node_id>")
@session_route
def node(ctx: SessionContext, node_id: str) -> Response:
    found = state.node_detail(ctx.index, node_id, ended=_ended(ctx))
    if found is None:
        raise ApiError(404, f"node {node_id} not found")
    return json_response(found)


# --------------------------------------------------------------------- events
@bp.get("/events")
@session_route
def events(ctx: SessionContext) -> Response:
    if "job_id" in request.args:  # present even when empty: Ray's per-job form
        return json_response(state.job_events(ctx.index, request.args.get("job_id", "")))
    return json_response(state.all_events(ctx.index))


# ------------------------------------------------------------- cluster status
@bp.get("/api/cluster_status")
@session_route
def cluster_status(ctx: SessionContext) -> Response:
    if request.args.get("format") != "1":
        return json_response(
            state.envelope(
                "Got cluster status.", {"autoscalingStatus": None, "autoscalingError": None, "clusterStatus": None}
            )
        )

    def read(node_id: str) -> bytes | None:
        try:
            key = ctx.layout.log_key(ctx.cluster, ctx.session, node_id, DEBUG_STATE)
            return ctx.store.get_range(key, 0, MAX_DEBUG_STATE_BYTES)  # the job writes it: bounded
        except (ObjectNotFoundError, InvalidKeyError):
            return None

    text = cluster_status_text(ctx.index, read, session_created_at(ctx.session))
    return json_response(state.envelope("Got formatted cluster status.", {"clusterStatus": text}))


# ---------------------------------------------------- stored endpoint snapshots
def _snapshot(ctx: SessionContext, uri: str) -> bytes | None:
    try:
        return ctx.store.get_bytes(ctx.layout.endpoint_key(ctx.cluster, ctx.session, uri))
    except ObjectNotFoundError:
        return None


@bp.get("/timezone")
@session_route
def timezone(ctx: SessionContext) -> Response:
    return json_response(_snapshot(ctx, "/timezone") or _EMPTY_TIMEZONE)


@bp.get("/api/v0/cluster_metadata")
@session_route
def cluster_metadata(ctx: SessionContext) -> Response:
    found = _snapshot(ctx, "/api/v0/cluster_metadata")
    if found is None:
        raise ApiError(404, "Cluster metadata not found")
    return json_response(found)


# ------------------------------------------------------------- metrics probes
# Answered here for stored and live sessions alike when --grafana-url / --prometheus-url
# are set (runtime.server.grafana); otherwise stored sessions get Ray's own failure and
# live ones are proxied to their dashboard.
@bp.get("/api/grafana_health")
def grafana_health() -> Response:
    return metrics_probe(grafana_probe, configured=services().config.metrics.grafana_url is not None)


@bp.get("/api/prometheus_health")
def prometheus_health() -> Response:
    return metrics_probe(prometheus_probe, configured=services().config.metrics.prometheus_url is not None)
