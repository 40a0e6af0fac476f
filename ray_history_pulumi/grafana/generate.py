"""Write Ray's Grafana dashboards, as the installed Ray generates them, into ``dashboards/``.

Ray builds its dashboards at runtime (``ray.dashboard.modules.metrics``) and writes them
under ``session_latest/metrics/grafana/dashboards/``; the Pulumi components must not need
Ray installed, so the files are generated here once and shipped as package data. After
upgrading Ray run::

    .venv/bin/python -m ray_history_pulumi.grafana.generate

``tests/unit/infra/components/test_grafana_dashboards.py`` fails while the committed files
differ from what the installed Ray generates.
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

DASHBOARD_DIR = Path(__file__).resolve().parent / "dashboards"
#: Ray reads these per dashboard (``RAY_GRAFANA_DEFAULT_DASHBOARD_UID``, ...): the vendored
#: files must be Ray's defaults whatever the generating shell has set.
_OVERRIDE_PREFIX = "RAY_GRAFANA_"


def _generators() -> dict[str, Callable[[], tuple[str, str]]]:
    """File name -> Ray's generator, the file names ``metrics_head.py`` writes."""
    from ray.dashboard.modules.metrics import grafana_dashboard_factory as factory

    return {
        "default_grafana_dashboard.json": factory.generate_default_grafana_dashboard,
        "serve_grafana_dashboard.json": factory.generate_serve_grafana_dashboard,
        "serve_deployment_grafana_dashboard.json": factory.generate_serve_deployment_grafana_dashboard,
        "serve_llm_grafana_dashboard.json": factory.generate_serve_llm_grafana_dashboard,
        "serve_llm_sglang_grafana_dashboard.json": factory.generate_serve_llm_sglang_grafana_dashboard,
        "data_grafana_dashboard.json": factory.generate_data_grafana_dashboard,
        "data_llm_grafana_dashboard.json": factory.generate_data_llm_grafana_dashboard,
        "train_grafana_dashboard.json": factory.generate_train_grafana_dashboard,
    }


def generate() -> dict[str, str]:
    """File name -> content of every dashboard, as the installed Ray writes it (with Ray's default uids)."""
    saved = {key: value for key, value in os.environ.items() if key.startswith(_OVERRIDE_PREFIX)}
    for key in saved:
        del os.environ[key]
    try:
        return {name: make()[0] + "\n" for name, make in _generators().items()}
    finally:
        os.environ.update(saved)


def write(directory: Path = DASHBOARD_DIR) -> list[Path]:
    """Replace the ``*.json`` files of ``directory`` with freshly generated ones."""
    directory.mkdir(parents=True, exist_ok=True)
    contents = generate()
    for stale in directory.glob("*.json"):
        if stale.name not in contents:
            stale.unlink()
    written = []
    for name, content in contents.items():
        path = directory / name
        path.write_text(content, encoding="utf-8")
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DASHBOARD_DIR, help="directory to write the JSON files to")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for path in write(args.out):
        log.info("wrote %s", path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
