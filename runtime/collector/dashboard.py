"""A small synchronous client for a Ray dashboard (``collector.md`` §1.2, §6).

Used by the head's snapshot recorder (``RAY_DASHBOARD_ADDRESS``) and by node-ID
discovery (the head dashboard at ``FQ_RAY_IP``). Auth sends
``x-ray-authorization: Bearer <token>`` with, first found:

1. the Kubernetes projected token (``RAY_ENABLE_K8S_TOKEN_AUTH``, as the reference);
2. then the order of Ray's own ``AuthenticationTokenLoader`` (Ray 2.60, measured):
   ``RAY_AUTH_TOKEN`` (trimmed; empty counts as unset) > the file named by
   ``RAY_AUTH_TOKEN_PATH`` (KubeRay ``authOptions.mode: token``; set but unreadable or
   empty is an error, never a fall-through) > ``~/.ray/auth_token`` (only with
   ``RAY_AUTH_MODE=token``, as Ray reads it only then);
3. else no header -- or an error when ``RAY_AUTH_MODE=token``.

Token files are re-read on every request, so a rotated token is used at once.
Tokens are never logged.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from http.cookiejar import DefaultCookiePolicy
from pathlib import Path
from typing import Any

import requests
from requests.adapters import HTTPAdapter

from runtime.collector.config import CollectorConfig

logger = logging.getLogger(__name__)

AUTH_HEADER = "x-ray-authorization"
K8S_TOKEN_PATH = Path("/var/run/secrets/ray.io/serviceaccount/token")
TOKEN_PATH_ENV = "RAY_AUTH_TOKEN_PATH"  # noqa: S105 - a variable name, not a secret
#: Ray's default token file, relative to the home directory.
DEFAULT_TOKEN_FILE = Path(".ray") / "auth_token"
DEFAULT_TIMEOUT = 30.0
#: Bodies are held in memory before upload; the sidecar's limit is 256 MiB, so a
#: runaway response must not take the collector down with it.
DEFAULT_MAX_BODY = 64 * 1024 * 1024
_CHUNK = 256 * 1024
#: Job IDs we put into ``/api/data/datasets/{job_id}`` (Ray uses hex).
JOB_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


class DashboardError(Exception):
    """Base class of everything :meth:`DashboardClient.get` raises."""


class DashboardAuthError(DashboardError):
    """The dashboard rejected our credentials (401/403), or auth is misconfigured.
    Permanent: retrying with the same settings cannot help."""


class DashboardUnavailable(DashboardError):  # noqa: N818 - name fixed by the collector's interface
    """Connection refused, timeout, reset, or a body larger than allowed."""


@dataclass(frozen=True)
class DashboardResponse:
    """One answer from the dashboard; only ``status == 200`` counts as a snapshot."""

    status: int
    body: bytes
    content_type: str

    @property
    def ok(self) -> bool:
        return self.status == 200


def base_url_from_fq_ip(fq_ip: str, port: int) -> str:
    """``FQ_RAY_IP`` to a base URL, as the reference accepts it: ``host`` (gets
    ``port``), ``host:port``, ``http://host[:port]`` or ``https://host[:port]``."""
    value = fq_ip.strip().rstrip("/")
    if not value:
        raise ValueError("FQ_RAY_IP is empty")
    lowered = value.lower()
    if lowered.startswith(("http://", "https://")):
        return value
    try:
        # A bare IPv6 address has colons but no port.
        if ipaddress.ip_address(value.strip("[]")).version == 6:
            return f"http://[{value.strip('[]')}]:{port}"
    except ValueError:
        pass
    if ":" in value:
        return f"http://{value}"
    return f"http://{value}:{port}"


class DashboardClient:
    """GET requests against one dashboard base URL with pooled connections.

    ``get`` may be called from several threads: the session keeps no per-request
    state (no cookies, no redirects) and urllib3's pool is thread-safe.
    """

    def __init__(
        self,
        base_url: str,
        *,
        auth_token: str | None = None,
        k8s_token_auth: bool = False,
        auth_mode: str = "",
        token_path: Path = K8S_TOKEN_PATH,
        max_body: int = DEFAULT_MAX_BODY,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        """``environ`` (default ``os.environ``) supplies ``RAY_AUTH_TOKEN_PATH`` and ``HOME``."""
        self.base_url = base_url.rstrip("/")
        self._static_token = (auth_token or "").strip() or None
        self._k8s_token_auth = k8s_token_auth
        self._token_path = Path(token_path)
        self._max_body = max_body
        self._token_mode = auth_mode.strip().lower() == "token"
        env = os.environ if environ is None else environ
        self._token_file = (env.get(TOKEN_PATH_ENV) or "").strip() or None
        self._default_token_file = _home(env) / DEFAULT_TOKEN_FILE if self._token_mode else None
        if self._token_mode and not self._has_token_source():
            raise DashboardAuthError(
                f"RAY_AUTH_MODE=token but no token: set RAY_AUTH_TOKEN, {TOKEN_PATH_ENV} or "
                f"RAY_ENABLE_K8S_TOKEN_AUTH (or create ~/{DEFAULT_TOKEN_FILE})"
            )
        self._session = requests.Session()
        # In-cluster addresses only: no HTTP(S)_PROXY or .netrc from the environment,
        # and no cookies, so every request authenticates with the header alone.
        self._session.trust_env = False
        self._session.cookies.set_policy(DefaultCookiePolicy(allowed_domains=[]))
        # Pool sizes as the reference (20 per host); the session is shared by threads.
        adapter = HTTPAdapter(pool_connections=4, pool_maxsize=20, max_retries=0)
        self._session.mount("http://", adapter)
        self._session.mount("https://", adapter)
        self._closed = threading.Event()

    # ----------------------------------------------------------- factories
    @classmethod
    def for_snapshots(cls, config: CollectorConfig, *, token_path: Path = K8S_TOKEN_PATH) -> DashboardClient:
        """The local head dashboard (``RAY_DASHBOARD_ADDRESS``)."""
        return cls(
            config.dashboard_address,
            auth_token=config.auth_token,
            k8s_token_auth=config.k8s_token_auth,
            auth_mode=config.auth_mode,
            token_path=token_path,
        )

    @classmethod
    def for_head(cls, config: CollectorConfig, *, token_path: Path = K8S_TOKEN_PATH) -> DashboardClient | None:
        """The head dashboard as seen from any node (``FQ_RAY_IP``), or None if unset."""
        if not config.fq_ray_ip:
            return None
        return cls(
            base_url_from_fq_ip(config.fq_ray_ip, config.dashboard_port),
            auth_token=config.auth_token,
            k8s_token_auth=config.k8s_token_auth,
            auth_mode=config.auth_mode,
            token_path=token_path,
        )

    # ------------------------------------------------------------- requests
    def _auth_headers(self) -> dict[str, str]:
        if self._k8s_token_auth:
            # Re-read every time: projected service-account tokens rotate.
            try:
                token = self._token_path.read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise DashboardAuthError(
                    f"RAY_ENABLE_K8S_TOKEN_AUTH is on but {self._token_path} cannot be read: {exc}"
                ) from exc
            if not token:
                raise DashboardAuthError(f"RAY_ENABLE_K8S_TOKEN_AUTH is on but {self._token_path} is empty")
            return _bearer(token, str(self._token_path))
        if self._static_token is not None:
            return _bearer(self._static_token, "RAY_AUTH_TOKEN")
        if self._token_file is not None:
            from_file, problem = _read_token_file(Path(self._token_file))
            if from_file:
                return _bearer(from_file, f"{TOKEN_PATH_ENV}={self._token_file}")
            if self._token_mode:
                raise DashboardAuthError(f"RAY_AUTH_MODE=token but {TOKEN_PATH_ENV}={self._token_file}: {problem}")
            return {}  # Ray itself sends no token unless RAY_AUTH_MODE=token
        if self._default_token_file is not None:
            from_file, problem = _read_token_file(self._default_token_file)
            if from_file:
                return _bearer(from_file, str(self._default_token_file))
            raise DashboardAuthError(
                f"RAY_AUTH_MODE=token but no token: {self._default_token_file}: {problem} "
                f"(set RAY_AUTH_TOKEN or {TOKEN_PATH_ENV})"
            )
        return {}

    def _has_token_source(self) -> bool:
        if self._k8s_token_auth or self._static_token is not None or self._token_file is not None:
            return True
        return self._default_token_file is not None and self._default_token_file.is_file()

    def url(self, path_with_query: str) -> str:
        if not path_with_query.startswith("/"):
            raise ValueError(f"dashboard path must start with '/': {path_with_query!r}")
        return self.base_url + path_with_query

    def get(self, path_with_query: str, timeout: float = DEFAULT_TIMEOUT) -> DashboardResponse:
        """GET ``path_with_query``; any status is returned except 401/403.

        Raises DashboardAuthError (401/403 or unusable auth settings) and
        DashboardUnavailable (transport failure, timeout, oversized body).
        """
        url = self.url(path_with_query)
        headers = self._auth_headers()
        timeout = max(0.05, timeout)
        try:
            # No redirects: the auth header must not follow a redirect to another host.
            with self._session.get(url, headers=headers, timeout=timeout, stream=True, allow_redirects=False) as resp:
                if resp.status_code in (401, 403):
                    raise DashboardAuthError(f"GET {url}: HTTP {resp.status_code} (check the dashboard token)")
                body = self._read_body(resp, url)
                return DashboardResponse(resp.status_code, body, resp.headers.get("Content-Type", ""))
        except requests.RequestException as exc:
            raise DashboardUnavailable(f"GET {url}: {type(exc).__name__}: {exc}") from exc

    def _read_body(self, resp: requests.Response, url: str) -> bytes:
        declared = resp.headers.get("Content-Length")
        if declared and declared.isdigit() and int(declared) > self._max_body:
            raise DashboardUnavailable(f"GET {url}: body of {declared} bytes exceeds {self._max_body}")
        chunks: list[bytes] = []
        size = 0
        for chunk in resp.iter_content(_CHUNK):
            size += len(chunk)
            if size > self._max_body:
                raise DashboardUnavailable(f"GET {url}: body exceeds {self._max_body} bytes")
            chunks.append(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        if not self._closed.is_set():
            self._closed.set()
            self._session.close()

    def __repr__(self) -> str:
        return f"DashboardClient({self.base_url!r})"


_TOKEN_CHARS = re.compile(r"^[\x21-\x7e]+$")


def _bearer(token: str, source: str) -> dict[str, str]:
    """The header; a token requests would refuse (and quote in its error) is refused here, unquoted."""
    if not _TOKEN_CHARS.match(token):
        raise DashboardAuthError(f"the token from {source} contains spaces, control or non-ASCII characters")
    return {AUTH_HEADER: f"Bearer {token}"}


def _read_token_file(path: Path) -> tuple[str | None, str]:
    """The file's trimmed contents, read now (a mounted Secret may have rotated), or
    None and why not -- the reason never includes the file's contents."""
    try:
        token = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        return None, f"cannot be read ({exc.strerror or type(exc).__name__})"
    except UnicodeDecodeError:
        return None, "is not UTF-8 text"
    return (token, "") if token else (None, "is empty")


def _home(env: Mapping[str, str]) -> Path:
    home = env.get("HOME")
    if home:
        return Path(home)
    try:
        return Path.home()
    except RuntimeError:  # no HOME and no passwd entry
        return Path("/nonexistent")


# ------------------------------------------------------- answer shapes (ray-events.md §8)
def _empty_collection(body: bytes, key: str) -> bool:
    """Whether ``body`` is JSON whose ``key`` is missing, null or empty. Anything
    not shaped as expected counts as non-empty: better stored than dropped."""
    try:
        doc = json.loads(body)
    except ValueError:
        return False
    if doc is None:
        return True
    if not isinstance(doc, dict):
        return False
    value = doc.get(key)
    if value is None:
        return True
    if isinstance(value, (list, dict)):
        return len(value) == 0
    return False


def datasets_empty(body: bytes) -> bool:
    return _empty_collection(body, "datasets")


def serve_empty(body: bytes) -> bool:
    return _empty_collection(body, "applications")


def parse_jobs(body: bytes) -> list[tuple[str, str]]:
    """``(job_id, status)`` of each started job in an ``/api/jobs/`` answer, first
    occurrence only. Submissions whose driver never started have a null job_id."""
    doc: Any = json.loads(body)
    if not isinstance(doc, list):
        raise ValueError("/api/jobs/ did not answer a JSON list")
    seen: dict[str, str] = {}
    for entry in doc:
        if not isinstance(entry, dict):
            continue
        job_id = entry.get("job_id")
        if not isinstance(job_id, str) or not JOB_ID_RE.match(job_id) or job_id in seen:
            continue
        status = entry.get("status")
        seen[job_id] = status.upper() if isinstance(status, str) else ""
    return list(seen.items())


class ErrorOnce:
    """Logs a failure once per distinct message per subject, and the recovery once.

    Background loops retry every few seconds; repeating the same warning each time
    would bury everything else in the log.
    """

    def __init__(self, log: logging.Logger, level: int = logging.WARNING) -> None:
        self._log = log
        self._level = level
        self._last: dict[str, str] = {}
        self._lock = threading.Lock()

    def failure(self, subject: str, message: str, level: int | None = None) -> None:
        with self._lock:
            repeated = self._last.get(subject) == message
            self._last[subject] = message
        if repeated:
            self._log.debug("%s: %s (repeated)", subject, message, stacklevel=2)
        else:
            self._log.log(self._level if level is None else level, "%s: %s", subject, message, stacklevel=2)

    def success(self, subject: str) -> None:
        with self._lock:
            failed = self._last.pop(subject, None)
        if failed is not None:
            self._log.info("%s: recovered", subject, stacklevel=2)
