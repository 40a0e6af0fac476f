"""gunicorn settings for the history server.

* ``gthread`` workers: threads for concurrent Dashboard requests, and a worker's
  liveness is its main loop, so a long cold index build in a request thread does
  not get it killed (the timeout is still sized past ``--build-timeout``).
  Slow clients cannot hold those threads: request heads are collected by the main
  loop with a deadline, bodies and answers have an I/O timeout
  (:mod:`runtime.server.worker`, docs/security-model.md).
* One worker is the default; with more, ``PROMETHEUS_MULTIPROC_DIR`` is set up in
  the master before the workers fork (so ``/metrics`` sums all workers) and dead
  workers are marked in ``child_exit``.
* gunicorn's own log lines go through the process's logging setup (``--log-format
  json`` applies to them too); probe and scrape requests are not access-logged.
* No control socket (gunicorn >= 25 creates one under ``$HOME`` by default, which a
  read-only container cannot and nobody here uses).

Used by ``historyserver`` (:func:`settings`), or directly as
``HISTORYSERVER_ARGS='--storage-backend=... ' gunicorn -c runtime/server/gunicorn_conf.py
'runtime.server.wsgi:create_from_env()'``.
"""

from __future__ import annotations

import glob
import logging
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from gunicorn import glogging  # type: ignore[import-untyped]

from runtime.server.config import ServerConfig
from runtime.server.worker import HeadFirstThreadWorker

logger = logging.getLogger(__name__)

ACCESS_LOG_FORMAT = '%(h)s "%(r)s" %(s)s %(B)s %(M)sms "%(a)s"'
#: Kubernetes waits 30 s (terminationGracePeriodSeconds) before SIGKILL.
GRACEFUL_TIMEOUT = 25
#: Longer than common load balancers' idle timeout (AWS ALB 60 s), so the server
#: never closes a connection the balancer is about to reuse (-> spurious 502s).
KEEPALIVE = 75
PROBE_PATHS = frozenset({"/livez", "/readz", "/metrics"})
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
#: Query parameters that carry a credential: the OIDC callback's authorization code and
#: state (and a token some client may put in a URL). Their values never reach the access log.
_SECRET_PARAM = re.compile(r"((?:^|[?&;])(?:code|state|token|access_token|id_token)=)[^&;\s\"]*", re.IGNORECASE)
_created_metrics_dir: str | None = None


class GunicornLogger(glogging.Logger):  # type: ignore[misc]
    """gunicorn's error and access logs through the root logger's handler."""

    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        for log in (self.error_log, self.access_log):
            for handler in list(log.handlers):
                log.removeHandler(handler)
            log.propagate = True
        root_level = logging.getLogger().level
        if root_level != logging.NOTSET:  # --log-level / LOG_LEVEL, not gunicorn's own setting
            self.error_log.setLevel(root_level)

    def access(self, resp: Any, req: Any, environ: dict[str, Any], request_time: Any) -> None:
        if environ.get("PATH_INFO") in PROBE_PATHS and getattr(resp, "status_code", 200) < 400:
            return  # kubelet probes and scrapes every few seconds: noise
        super().access(resp, req, environ, request_time)

    def atoms(self, resp: Any, req: Any, environ: dict[str, Any], request_time: Any) -> dict[str, Any]:
        """gunicorn's fields, with credential values in URLs redacted (the OIDC callback's
        ``code`` and ``state``; tokens are never logged in the clear)."""
        atoms: dict[str, Any] = super().atoms(resp, req, environ, request_time)
        # Every field: a URL is also in the referer and in gunicorn's "{name}e" environ fields.
        return {name: redact_url(value) if isinstance(value, str) else value for name, value in atoms.items()}


def redact_url(text: str) -> str:
    """``text`` with the values of credential query parameters replaced by ``REDACTED``."""
    return _SECRET_PARAM.sub(r"\1REDACTED", text)


class ThreadWorker(HeadFirstThreadWorker):
    """gunicorn's gthread worker, slowloris-proof, with signal handlers that cannot deadlock.

    gunicorn 27 shuts its thread pool down *inside* the SIGQUIT/SIGINT handler;
    when the signal lands while the main thread is in ``ThreadPoolExecutor.submit``
    (holding the pool's non-reentrant lock) the worker hangs for good -- reproduced
    with Ctrl-C on the process group. These handlers only set a flag (the event
    loop polls at least every second) or exit at once.
    """

    def handle_exit(self, sig: int, frame: Any) -> None:
        self.alive = False  # SIGTERM: graceful, in-flight requests finish

    def handle_quit(self, sig: int, frame: Any) -> None:
        self.alive = False  # SIGQUIT/SIGINT: immediate, as gunicorn documents
        self.cfg.worker_int(self)
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os._exit(0)


def prepare_metrics_dir(workers: int) -> str | None:
    """Point prometheus_client at a fresh multi-process directory when needed.

    Must run before any worker imports prometheus_client (it picks its mode at
    import), i.e. in the master before fork. A directory given by the operator is
    emptied (stale files from an earlier run would be summed in)."""
    global _created_metrics_dir  # noqa: PLW0603 - one master per process
    given = os.environ.get(MULTIPROC_ENV)
    if given:
        Path(given).mkdir(parents=True, exist_ok=True)
        for stale in glob.glob(os.path.join(given, "*.db")):
            os.remove(stale)
        return given
    if workers <= 1:
        return None
    _created_metrics_dir = tempfile.mkdtemp(prefix="historyserver-metrics-")
    os.environ[MULTIPROC_ENV] = _created_metrics_dir
    return _created_metrics_dir


def on_starting(server: Any) -> None:
    workers = int(server.cfg.workers)
    metrics_dir = prepare_metrics_dir(workers)
    if metrics_dir:
        logger.info("metrics of %d worker(s) are summed through %s", workers, metrics_dir)


def child_exit(server: Any, worker: Any) -> None:
    if os.environ.get(MULTIPROC_ENV):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)  # type: ignore[no-untyped-call]


def on_exit(server: Any) -> None:
    global _created_metrics_dir  # noqa: PLW0603
    if _created_metrics_dir:
        shutil.rmtree(_created_metrics_dir, ignore_errors=True)
        os.environ.pop(MULTIPROC_ENV, None)
        _created_metrics_dir = None


def bind_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


def settings(config: ServerConfig) -> dict[str, Any]:
    """gunicorn settings (names as in gunicorn's config file) for ``config``."""
    shm = "/dev/shm"  # noqa: S108 - gunicorn's advice for containers: heartbeat files off disk
    return {
        "bind": [bind_address(config.host, config.port)],
        "worker_class": "runtime.server.gunicorn_conf.ThreadWorker",  # gthread, minus a deadlock
        "workers": config.workers,
        "threads": config.threads,
        # Connections per worker, slow ones included (they wait for their request
        # head in the main loop, not in a thread); gunicorn's default, said aloud.
        "worker_connections": 1000,
        # Cold loads can take minutes; never let gunicorn kill a worker under one.
        "timeout": int(config.build_timeout) + 60,
        "graceful_timeout": GRACEFUL_TIMEOUT,
        "keepalive": KEEPALIVE,
        # Dashboard URLs carry filters and task ids; 8190 is gunicorn's maximum.
        "limit_request_line": 8190,
        "preload_app": False,  # each worker opens its own storage clients (not fork-safe)
        "accesslog": "-",
        "errorlog": "-",
        "access_log_format": ACCESS_LOG_FORMAT,
        "logger_class": GunicornLogger,
        "worker_tmp_dir": shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None,
        "control_socket_disable": True,
        "proc_name": "historyserver",
        "on_starting": on_starting,
        "child_exit": child_exit,
        "on_exit": on_exit,
    }


if __name__ == "__config__":  # loaded by `gunicorn -c runtime/server/gunicorn_conf.py`
    from runtime.server.options import config_from_env

    globals().update({k: v for k, v in settings(config_from_env()).items() if v is not None})
