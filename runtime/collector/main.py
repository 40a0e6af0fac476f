"""``collector`` entry point.

Works three ways, all equivalent:

* flags as in the GKE guide: ``collector --role=Head --runtime-class-name=gcs
  --ray-cluster-name=NAME --ray-root-dir=log --events-port=8084``;
* flags as in current KubeRay: ``--storage-backend``, ``--storage-root-dir``,
  ``--owner-kind``/``--owner-name``, ``--ray-cluster-namespace``, ...;
* no arguments at all, configured by the environment KubeRay >= 1.7 injects.

Exit status: 0 after a clean shutdown, 2 for bad configuration (the message
names the flag or variable), 1 when storage is unusable at start.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading

from runtime.collector.app import Collector
from runtime.collector.config import CollectorConfigError, build_parser, load_config
from runtime.collector.dashboard import DashboardAuthError
from runtime.common.process import configure_logging, limit_malloc_arenas
from runtime.storage.config import open_store
from runtime.storage.errors import StorageConfigError, StorageError

logger = logging.getLogger("runtime.collector")


def main(argv: list[str] | None = None) -> int:
    limit_malloc_arenas()
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.log_level, args.log_format)
    try:
        config = load_config(args)
    except (CollectorConfigError, StorageConfigError) as exc:
        parser.exit(2, f"collector: error: {exc}\n")
    if args.log_batching or args.push_interval:
        logger.warning("--log-batching and --push-interval are accepted for compatibility and ignored")
    try:
        store = open_store(config.storage)
    except StorageConfigError as exc:
        parser.exit(2, f"collector: error: {exc}\n")
    except StorageError as exc:
        parser.exit(1, f"collector: error: {exc}\n")
    try:
        collector = Collector(config, store)
    except DashboardAuthError as exc:
        store.close()
        parser.exit(2, f"collector: error: {exc}\n")
    stop = threading.Event()
    signals_seen = 0

    def on_signal(signum: int, _frame: object) -> None:
        nonlocal signals_seen
        signals_seen += 1
        if signals_seen == 1:
            # Stop first: logging from a signal handler can raise (a reentrant write to the
            # stream the interrupted main thread was writing), and must not cost the shutdown.
            stop.set()
            logger.info("received %s", signal.Signals(signum).name)
        else:
            logger.warning("shutdown already in progress; ignoring %s", signal.Signals(signum).name)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, on_signal)
    try:
        report = collector.run(stop)
    except OSError as exc:  # e.g. the events port is taken
        logger.error("collector cannot start: %s", exc)
        return 1
    finally:
        store.close()
    return exit_leaving_blocked_threads(0, work_left=not (report.events_uploaded and report.logs_shipped))


def exit_leaving_blocked_threads(code: int, *, work_left: bool) -> int:
    """Return ``code``, or end the process with it at once when the shutdown left work
    behind or a non-daemon thread still runs. Either means an upload may be blocked
    on storage (a connect or read timeout of a minute when it is unreachable), and the
    interpreter would wait for it at exit, past the pod's grace period: it joins every
    thread-pool worker, daemon or not. What such an upload carried is still on local
    disk: the next collector uploads it."""
    others = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    blocking = [t.name for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
    if not work_left and not blocking:
        return code
    logger.warning("exiting now, leaving %d thread(s) behind: %s", len(others), others)
    logging.shutdown()  # flushes the handlers: os._exit skips that
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
