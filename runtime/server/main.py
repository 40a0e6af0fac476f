"""``historyserver`` entry point: flags -> :class:`ServerConfig` -> gunicorn.

``historyserver --storage-backend=local --local-storage-dir=DIR --port 8080`` is
the whole command; gunicorn runs embedded (gthread workers, settings in
:mod:`runtime.server.gunicorn_conf`). The GKE guide's spelling
``historyserver --runtime-class-name=gcs --ray-root-dir=log`` works too. The flags
are declared in :mod:`runtime.server.settings` and read by
:mod:`runtime.server.options`.

Exit status: 0 after a clean shutdown (SIGTERM/SIGINT), 2 for bad configuration
(the message names the flag), 1 when storage is unusable at start.
"""

from __future__ import annotations

import logging
import sys

from runtime.common.process import limit_malloc_arenas
from runtime.server.options import build_parser, load_config

__all__ = ["build_parser", "load_config", "main"]

logger = logging.getLogger("runtime.server")


def main(argv: list[str] | None = None) -> int:
    limit_malloc_arenas()
    config = load_config(argv)
    # gunicorn is imported only to serve (not for --help or a configuration error).
    from runtime.server.wsgi import HistoryServerApplication

    logger.info(
        "history server on %s:%d (storage %s, cache %s, %d worker(s) x %d threads, hosts %s)",
        config.host,
        config.port,
        config.storage.backend,
        config.cache_dir,
        config.workers,
        config.threads,
        ", ".join(config.allowed_hosts),
    )
    HistoryServerApplication(config).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
