"""Checks every request passes before any view runs.

* **Host** (DNS rebinding, see :mod:`runtime.server.hosts`): a Host outside
  ``--allowed-hosts`` is ``400`` JSON naming it. ``/livez`` and ``/readz`` are
  exempt (a probe with a custom Host header must not restart the pod; they
  reveal nothing).
* **Leading slashes**: ``//select_cluster`` would serve the picker with a base of
  ``//`` (relative URLs then resolve against another path); every path starting
  with more than one slash is redirected (308) to the single-slash one. The redirect
  carries no data, and is marked so (:func:`no_data_response`): with access control on,
  the gate's fail-closed check would otherwise turn it into a 503.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from urllib.parse import quote

from flask import Flask, Response, request

from runtime.server.auth.gate import no_data_response
from runtime.server.errors import json_error
from runtime.server.hosts import HostPolicy

logger = logging.getLogger(__name__)

#: Probes answer whatever the Host: they reveal nothing.
EXEMPT_PATHS = frozenset({"/livez", "/readz"})
#: Characters a redirect target may keep as they are (RFC 3986 path characters).
_PATH_SAFE = "/;:@&=+$,!~*'()-._"


def register_request_guards(app: Flask, allowed_hosts: Iterable[str]) -> None:
    policy = HostPolicy.from_entries(allowed_hosts)

    @app.before_request
    def _guard() -> Response | None:
        path = request.environ.get("PATH_INFO", "")
        host = request.environ.get("HTTP_HOST")
        if path not in EXEMPT_PATHS and not policy.allows(host):
            shown = (host or "")[:255]
            logger.info("refused a request for host %r (not in --allowed-hosts)", shown)
            return json_error(
                400, f"host {shown!r} is not allowed; add it to --allowed-hosts (HISTORYSERVER_ALLOWED_HOSTS)"
            )
        if path.startswith("//"):
            return _single_slash_redirect(path)
        return None


def _single_slash_redirect(path: str) -> Response:
    # Backslashes too: browsers read "/\\evil.example" as "//evil.example".
    target = "/" + path.lstrip("/\\")
    location = quote(target.encode("latin-1", "replace"), safe=_PATH_SAFE)
    query = request.environ.get("QUERY_STRING", "")
    if query:
        location += "?" + quote(query, safe=_PATH_SAFE + "?%")
    response = json_error(308, f"moved to {location}", {"Location": location, "Cache-Control": "no-store"})
    # Answered before authentication: no view ran, the body names only the target.
    return no_data_response(response)
