"""The pooled HTTP session the server's reverse proxies share per app (per worker):
the live proxy to Ray head dashboards and the Grafana / Prometheus proxy.

Shared by every caller, so it must carry nothing of any one of them:

* no environment: no egress proxy, no ``~/.netrc`` credentials reach an upstream;
* no default headers (each request sends exactly what the proxy chose);
* no cookie jar: a ``Set-Cookie`` an upstream sends one caller (a Ray dashboard's
  token cookie, a Grafana session) must never ride on the next caller's requests;
* no retries: a request is sent once (a repeated profiling request, for one, would
  profile the worker twice).
"""

from __future__ import annotations

import threading
from http.cookiejar import DefaultCookiePolicy

import requests
from flask import Flask
from requests.adapters import HTTPAdapter

_lock = threading.Lock()


def pooled_session(app: Flask, extension: str, *, pool_connections: int, pool_maxsize: int) -> requests.Session:
    """The app's session under ``app.extensions[extension]``, created on first use."""
    found = app.extensions.get(extension)
    if isinstance(found, requests.Session):
        return found
    with _lock:
        found = app.extensions.get(extension)
        if isinstance(found, requests.Session):
            return found
        session = requests.Session()
        session.trust_env = False
        session.headers.clear()
        session.cookies.set_policy(DefaultCookiePolicy(allowed_domains=[]))  # stores no cookie
        adapter = HTTPAdapter(pool_connections=pool_connections, pool_maxsize=pool_maxsize, max_retries=0)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        app.extensions[extension] = session
        return session
