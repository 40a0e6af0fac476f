"""Session-scoped URLs: ``/sessions/{namespace}/{cluster}/{session}/`` serves the Ray
Dashboard for one session, no cookies needed.

Forms (``{session}`` is a stored session name, ``latest`` or ``live``):

* RayCluster: ``/sessions/{namespace}/{cluster}/{session}/``
* owner kinds: ``/sessions/{namespace}/{rayjob|rayservice}/{owner name}/{session}/``
  (the name means what it means in ``/enter_cluster/{ns}/{kind}/{name}/{session}``).

A segment is a session only if it is ``latest``/``live`` or looks like a Ray session
name (``session_...``), so ``/sessions/ns/rayjob/x/session_.../`` is the owner form and
``/sessions/ns/rayjob/session_.../`` is a RayCluster named ``rayjob``.

The Dashboard's own requests are relative (``api/jobs/``, ``static/js/...``), so every
call a page under such a URL makes carries the session in its path. This module holds
the URL functions (pure: the picker, ``/enter_cluster`` and the quickstart use them);
:mod:`runtime.server.session_scope` answers those paths.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from runtime.server.errors import ApiError
from runtime.server.selection import LATEST, LIVE, Selection
from runtime.storage.errors import InvalidKeyError
from runtime.storage.layout import (
    OWNER_KINDS,
    RAYCLUSTER,
    ClusterRef,
    session_created_at,
    validate_k8s_name,
    validate_namespace,
    validate_session_name,
)
from runtime.storage.session_keys import looks_like_session_name

PREFIX = "/sessions/"


@dataclass(frozen=True)
class SessionTarget:
    """What a ``/sessions/...`` path names, before resolution (``session`` may be latest/live).

    ``kind`` is ``raycluster`` (``name`` is the RayCluster) or an owner kind (``name`` is
    the RayJob/RayService).
    """

    namespace: str
    kind: str
    name: str
    session: str

    @property
    def path(self) -> str:
        """The target's URL path (leading and trailing ``/``)."""
        if self.kind == RAYCLUSTER:
            return f"{PREFIX}{self.namespace}/{self.name}/{self.session}/"
        return f"{PREFIX}{self.namespace}/{self.kind}/{self.name}/{self.session}/"


def session_path(cluster: ClusterRef, session: str) -> str:
    """The shareable path of ``session`` of ``cluster``: the owner form when the cluster
    has a RayJob/RayService owner, else the RayCluster form."""
    if cluster.owner_kind in OWNER_KINDS and cluster.owner_name:
        return SessionTarget(cluster.namespace, cluster.owner_kind, cluster.owner_name, session).path
    return SessionTarget(cluster.namespace, RAYCLUSTER, cluster.name, session).path


def is_session_segment(segment: str) -> bool:
    """Whether a path segment is meant as a session (see the module doc)."""
    return segment in (LATEST, LIVE) or looks_like_session_name(segment)


def parse_session_path(path: str) -> tuple[SessionTarget, str]:
    """Split ``/sessions/...`` into its target and the rest of the path.

    The rest keeps its leading ``/`` (``"/api/jobs/"``, ``"/"``), and is ``""`` when
    the path ends right after the session segment (no trailing slash).

    Raises:
        ApiError: 400 naming the bad segment.
    """
    if not (path + "/").startswith(PREFIX):
        raise ApiError(400, f"not a session URL: must start with {PREFIX}")
    segments = path[len(PREFIX) :].split("/")
    if len(segments) >= 4 and segments[1].lower() in OWNER_KINDS and is_session_segment(segments[3]):
        namespace, kind, name, session = segments[:4]
        kind, used = kind.lower(), 4
    elif len(segments) >= 3 and is_session_segment(segments[2]):
        namespace, name, session = segments[:3]
        kind, used = RAYCLUSTER, 3
    else:
        raise ApiError(
            400,
            "session URL without a session segment: use /sessions/{namespace}/{cluster}/{session}/ or "
            "/sessions/{namespace}/{rayjob|rayservice}/{name}/{session}/ ({session}: a session name, latest or live)",
        )
    _check_segment("namespace", namespace, validate_namespace)
    _check_segment("cluster name" if kind == RAYCLUSTER else f"{kind} name", name, validate_k8s_name)
    if session not in (LATEST, LIVE):
        _check_segment("session", session, validate_session_name)
        if session_created_at(session) is None:
            raise ApiError(400, f'invalid session segment "{session[:128]}": not a Ray session name')
    rest = "/" + "/".join(segments[used:]) if len(segments) > used else ""
    return SessionTarget(namespace, kind, name, session), rest


def _check_segment(what: str, value: str, validate: Callable[..., object]) -> None:
    try:
        validate(value)
    except InvalidKeyError as exc:
        raise ApiError(400, f'invalid {what} segment "{value[:128]}": {exc}') from None


def enter_location(request_path: str, selection: Selection, requested: str = LATEST) -> str:
    """Where ``/enter_cluster/...`` sends a browser: the session's ``/sessions/...`` URL.

    ``requested`` is the session segment entered: ``latest`` resolved to a running cluster
    stays ``latest`` (the live cluster now, its stored session once it is gone); otherwise
    the resolved session. Relative to ``request_path`` (works behind a path prefix) and
    without a fragment, so the browser keeps its own (RFC 9110 section 10.2.2):
    ``/enter_cluster/...#/jobs/<id>`` lands on that job.
    """
    session = LATEST if selection.is_live and requested in ("", LATEST) else selection.session
    return "../" * (request_path.count("/") - 1) + session_path(selection.cluster, session)[1:]
