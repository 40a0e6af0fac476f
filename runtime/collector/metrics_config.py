"""Ship the session's generated Grafana dashboards and Prometheus config once (head only).

Ray 2.60's dashboard writes, at start, the exact dashboards of its version
(``{session}/metrics/grafana/dashboards/*.json``, 70-520 KB each) and the Prometheus
config it would use (``{session}/metrics/prometheus/prometheus.yml``). They are stored
under the session (:meth:`KeyLayout.metrics_config_key`), so the dashboards that match
a stored session's metric names can be provisioned into Grafana later.

Only Ray's files are shipped (#14): those two places and names, regular files reached
without following a link (:mod:`runtime.collector.log_files`), each under a size cap,
dashboards only when they parse as a JSON object and the config only as UTF-8 text.
Each file is shipped once per session; one that is missing or still being written is
tried again at the next scan.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import threading
from pathlib import Path

import orjson

from runtime.collector.log_files import UnsafePathError, open_dir
from runtime.collector.session_files import resolve_session_latest
from runtime.storage.base import ObjectStore
from runtime.storage.errors import InvalidKeyError, StorageError
from runtime.storage.layout import ClusterRef, KeyLayout

logger = logging.getLogger(__name__)

DASHBOARDS_DIR = "grafana/dashboards"
PROMETHEUS_CONFIG = "prometheus/prometheus.yml"
MAX_DASHBOARD_BYTES = 4 * 1024 * 1024  # Ray 2.60's largest is ~520 KB
MAX_CONFIG_BYTES = 64 * 1024  # Ray 2.60's is ~0.5 KB
MAX_DASHBOARDS = 32  # Ray 2.60 writes 8
SCAN_INTERVAL = 10.0
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def _read_below(dir_fd: int, name: str, cap: int) -> bytes | None:
    """A regular file's bytes (opened without following a link), None when absent or over ``cap``."""
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafePathError(exc.errno, "a symbolic link", name) from exc
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePathError(errno.EINVAL, "not a regular file", name)
        if st.st_size > cap:
            logger.warning("metrics file %s is %d bytes, over the %d cap: not shipped", name, st.st_size, cap)
            return None
        os.set_blocking(fd, True)
        with os.fdopen(os.dup(fd), "rb") as handle:
            data = handle.read(cap + 1)
        return data if len(data) <= cap else None
    finally:
        os.close(fd)


def _read_safely(dir_fd: int, name: str, cap: int) -> bytes | None:
    try:
        return _read_below(dir_fd, name, cap)
    except OSError as exc:  # a link, a FIFO, unreadable: that file stays behind
        logger.warning("not shipping metrics file %s: %s", name, exc)
        return None


def ray_metrics_files(tmp_root: Path, session_dir: Path) -> dict[str, bytes]:
    """The session's shippable metrics files (relative path -> bytes), as they are now."""
    found: dict[str, bytes] = {}
    metrics = session_dir / "metrics"
    try:
        fd = open_dir(tmp_root, metrics / DASHBOARDS_DIR)
    except (FileNotFoundError, UnsafePathError) as exc:
        if not isinstance(exc, FileNotFoundError):
            logger.warning("not shipping Grafana dashboards of %s: %s", session_dir.name, exc)
        fd = -1
    if fd >= 0:
        try:
            names = sorted(n for n in os.listdir(fd) if n.endswith(".json"))[:MAX_DASHBOARDS]
            for name in names:
                data = _read_safely(fd, name, MAX_DASHBOARD_BYTES)
                if data is not None and _is_json_object(data):
                    found[f"{DASHBOARDS_DIR}/{name}"] = data
        finally:
            os.close(fd)
    try:
        fd = open_dir(tmp_root, metrics / Path(PROMETHEUS_CONFIG).parent)
    except (FileNotFoundError, UnsafePathError):
        return found
    try:
        data = _read_safely(fd, Path(PROMETHEUS_CONFIG).name, MAX_CONFIG_BYTES)
        if data is not None and _is_text(data):
            found[PROMETHEUS_CONFIG] = data
    finally:
        os.close(fd)
    return found


def _is_json_object(data: bytes) -> bool:
    try:
        return isinstance(orjson.loads(data), dict)
    except orjson.JSONDecodeError:
        return False  # not written completely yet, or not a dashboard: tried again next scan


def _is_text(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return b"\0" not in data


class MetricsConfigShipper:
    """Scans the current session every ``interval`` seconds and ships what is new."""

    def __init__(
        self,
        store: ObjectStore,
        layout: KeyLayout,
        cluster: ClusterRef,
        tmp_root: Path,
        interval: float = SCAN_INTERVAL,
    ) -> None:
        self._store, self._layout, self._cluster = store, layout, cluster
        self._tmp_root = Path(tmp_root)
        self._interval = interval
        self._shipped: set[tuple[str, str]] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def ship_current(self) -> int:
        """Ship the current session's files not shipped yet; how many were."""
        session_dir = resolve_session_latest(self._tmp_root)
        if session_dir is None:
            return 0
        session = session_dir.name
        shipped = 0
        for relpath, data in ray_metrics_files(self._tmp_root, session_dir).items():
            if (session, relpath) in self._shipped:
                continue
            try:
                self._store.put_bytes(self._layout.metrics_config_key(self._cluster, session, relpath), data)
            except InvalidKeyError as exc:
                logger.warning("not shipping metrics file %s: %s", relpath, exc)
            except StorageError as exc:
                logger.warning("uploading metrics file %s of %s failed, will retry: %s", relpath, session, exc)
                continue
            self._shipped.add((session, relpath))
            shipped += 1
        if shipped:
            logger.info("shipped %d Grafana/Prometheus config file(s) of %s", shipped, session)
        return shipped

    def _run(self) -> None:
        while True:
            try:
                self.ship_current()
            except OSError as exc:
                logger.warning("scanning the session's metrics files failed: %s", exc)
            if self._stop.wait(self._interval):
                return

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="metrics-config", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """One last scan (files written late), then the thread ends."""
        self._stop.set()
        try:
            self.ship_current()
        except OSError as exc:
            logger.warning("scanning the session's metrics files failed: %s", exc)
