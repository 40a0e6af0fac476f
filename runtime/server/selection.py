"""Which cluster session a browser is looking at: the five cookies of
KubeRay's Go history server ("the reference" below), or the session in a
``/sessions/...`` URL (:mod:`runtime.server.session_scope`), which wins over them.

``/enter_cluster`` sets the cookies; every Dashboard route reads the selection here. Values are checked
against whitelists (DNS-1123 names, safe session names), never just for ``..``,
and the cookies are ``HttpOnly`` and ``SameSite=Lax`` (the reference sets neither).
"""

from __future__ import annotations

from dataclasses import dataclass

from flask import Request, Response

from runtime.server.errors import ApiError
from runtime.storage.errors import InvalidKeyError
from runtime.storage.layout import (
    CLUSTER_KINDS,
    RAYCLUSTER,
    ClusterRef,
    validate_k8s_name,
    validate_namespace,
    validate_session_name,
)

LIVE = "live"
LATEST = "latest"
COOKIE_CLUSTER = "cluster_name"
COOKIE_NAMESPACE = "cluster_namespace"
COOKIE_SESSION = "session_name"
COOKIE_OWNER_KIND = "owner_kind"
COOKIE_OWNER_NAME = "owner_name"
COOKIE_NAMES = (COOKIE_CLUSTER, COOKIE_NAMESPACE, COOKIE_SESSION, COOKIE_OWNER_KIND, COOKIE_OWNER_NAME)
#: Where :mod:`runtime.server.session_scope` leaves the selection a ``/sessions/...`` path made.
PATH_SELECTION = "historyserver.path_selection"
#: Sliding expiry, refreshed on every Dashboard request (as the reference).
COOKIE_MAX_AGE = 600


@dataclass(frozen=True)
class Selection:
    """A validated cluster session: a stored one, or ``session == "live"``."""

    namespace: str
    name: str
    session: str
    owner_kind: str = RAYCLUSTER
    owner_name: str = ""

    def __post_init__(self) -> None:
        validate_namespace(self.namespace)
        validate_k8s_name(self.name, "cluster name")
        if self.session != LIVE:
            validate_session_name(self.session)
        kind = (self.owner_kind or RAYCLUSTER).lower()
        if kind not in CLUSTER_KINDS:
            raise InvalidKeyError(f"invalid owner kind {self.owner_kind!r}: must be one of {', '.join(CLUSTER_KINDS)}")
        object.__setattr__(self, "owner_kind", kind)
        if self.owner_name:
            validate_k8s_name(self.owner_name, "owner name")

    @property
    def is_live(self) -> bool:
        return self.session == LIVE

    @property
    def cluster(self) -> ClusterRef:
        return ClusterRef(self.namespace, self.name, self.owner_kind, self.owner_name)


def path_selection(request: Request) -> Selection | None:
    """The selection of a ``/sessions/...`` URL, None for the cookie flow."""
    found = request.environ.get(PATH_SELECTION)
    return found if isinstance(found, Selection) else None


def has_selection(request: Request) -> bool:
    """Whether the request selects a session (by path, or by the session cookie)."""
    return path_selection(request) is not None or bool(request.cookies.get(COOKIE_SESSION))


def selection_from_request(request: Request) -> Selection:
    """The selection of a ``/sessions/...`` path, else the one in the request's cookies;
    400 naming the cookie otherwise."""
    by_path = path_selection(request)
    if by_path is not None:
        return by_path
    cookies = request.cookies
    for name, label in (
        (COOKIE_CLUSTER, "Cluster"),
        (COOKIE_SESSION, "RayCluster Session Name"),
        (COOKIE_NAMESPACE, "Cluster Namespace"),
    ):
        if not cookies.get(name):
            raise ApiError(
                400,
                f"{label} Cookie not found: open /select_cluster (or call /enter_cluster/...) to choose a cluster",
            )
    try:
        return Selection(
            namespace=cookies[COOKIE_NAMESPACE],
            name=cookies[COOKIE_CLUSTER],
            session=cookies[COOKIE_SESSION],
            owner_kind=cookies.get(COOKIE_OWNER_KIND, "") or RAYCLUSTER,
            owner_name=cookies.get(COOKIE_OWNER_NAME, ""),
        )
    except InvalidKeyError as exc:
        raise ApiError(400, f"invalid cookie values: {exc}") from exc


def refresh_selection_cookies(request: Request, response: Response, selection: Selection, *, secure: bool) -> None:
    """Refresh the cookies (sliding expiry) on a cookie-flow answer; a ``/sessions/...``
    answer sets none (its selection is in its URL)."""
    if path_selection(request) is None:
        set_selection_cookies(response, selection, secure=secure)


def set_selection_cookies(response: Response, selection: Selection, *, secure: bool = False) -> None:
    """Write (or refresh) the five cookies on ``response``."""
    values = {
        COOKIE_CLUSTER: selection.name,
        COOKIE_NAMESPACE: selection.namespace,
        COOKIE_SESSION: selection.session,
        COOKIE_OWNER_KIND: selection.owner_kind if selection.owner_name else "",
        COOKIE_OWNER_NAME: selection.owner_name,
    }
    for name, value in values.items():
        response.set_cookie(name, value, max_age=COOKIE_MAX_AGE, path="/", httponly=True, samesite="Lax", secure=secure)
