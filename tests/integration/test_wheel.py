"""The wheel works on its own (#17 item 6): built from the working tree, installed into a fresh
venv (no system site-packages, no repository on the path), its three console scripts print their
usage, ``import ray_history_pulumi`` lists the components without any Pulumi or cloud SDK, and the
installed ``historyserver`` serves the cluster picker from the wheel's own static files."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import tomllib
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path
from urllib.parse import urljoin

import pytest
import requests

from runtime.storage.config import StorageConfig, open_store
from runtime.storage.layout import KeyLayout
from tests.integration.emulators.base import REPO_ROOT, free_port
from tests.support.sample_session import write_sample_session

# Minutes: a venv and the [collector,server,cli] dependencies (~300 MB, from the pip cache when warm).
pytestmark = [pytest.mark.integration, pytest.mark.slow]

EXTRAS = "collector,server,cli"  # what the three binaries need
BINARIES = ("collector", "historyserver", "ray-history")
SHIPPED = ("runtime", "ray_history_pulumi")
# Repository content that is not part of the distribution (infra/ is the stack's program).
NOT_SHIPPED = ("tests", "infra", "bench", "docs", "images")
STATIC = "runtime/server/static"
# The picker's files with the comment syntax of each, for the provenance marker below.
PICKER_FILES = {
    "select_cluster.html": ("text/html", "<!-- {} -->\n"),
    "select_cluster.js": ("text/javascript", "// {}\n"),
    "select_cluster.css": ("text/css", "/* {} */\n"),
}
# Modules the installed Pulumi package must not pull in just to be listed.
SDK_PREFIXES = ("pulumi", "pulumi_", "boto3", "botocore", "google.cloud", "azure", "kubernetes")


@dataclass(frozen=True)
class Built:
    source: Path  # the copy of the working tree the wheel was built from
    wheel: Path

    def names(self) -> list[str]:
        with zipfile.ZipFile(self.wheel) as archive:
            return archive.namelist()

    def read(self, name: str) -> bytes:
        with zipfile.ZipFile(self.wheel) as archive:
            return archive.read(name)

    def dist_info(self) -> str:
        (name,) = {n.split("/")[0] for n in self.names() if n.split("/")[0].endswith(".dist-info")}
        return name


@dataclass(frozen=True)
class Venv:
    root: Path
    purelib: Path  # its site-packages
    outside: Path  # a working directory outside the repository

    def bin(self, name: str) -> Path:
        return self.root / "bin" / name

    def run(self, *args: str | Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(a) for a in args], cwd=self.outside, env=clean_env(), capture_output=True, text=True,
            timeout=timeout, check=False,
        )  # fmt: skip


def clean_env() -> dict[str, str]:
    """Our environment minus whatever could put the repository (or this venv) on the path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV")}
    return {**env, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONNOUSERSITE": "1", "PYTHONUNBUFFERED": "1"}


def checked(cmd: list[str], cwd: Path, timeout: float) -> None:
    done = subprocess.run(cmd, cwd=cwd, env=clean_env(), capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, f"{cmd} failed ({done.returncode}):\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    root = tmp_path_factory.mktemp("wheel")
    # Built from a copy of what git would commit (tracked + new, not ignored files): an in-tree
    # build would write build/ and *.egg-info into the shared checkout, and a stale build/lib
    # there could put deleted modules into the wheel.
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO_ROOT, capture_output=True, check=True,
    ).stdout.decode()  # fmt: skip
    source = root / "source"
    for rel in filter(None, listed.split("\0")):
        path = REPO_ROOT / rel
        if path.is_file():  # --cached also lists files deleted in the working tree
            (source / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, source / rel)
    # With build isolation, as `pip wheel .` runs for a user: the venv's own setuptools cannot
    # build it (ensurepip's 65.x, below the declared setuptools>=77, has no bdist_wheel without
    # the `wheel` package). Isolation costs seconds: setuptools comes from the pip cache.
    checked([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(root / "dist"), str(source)], root, 300)
    (wheel,) = (root / "dist").glob("ray_history_server-*.whl")
    return Built(source, wheel)


@pytest.fixture(scope="module")
def venv(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    root = tmp_path_factory.mktemp("venv") / "venv"
    outside = tmp_path_factory.mktemp("cwd")
    assert not outside.resolve().is_relative_to(REPO_ROOT), "the checks run outside the repository"
    checked([sys.executable, "-m", "venv", str(root)], outside, 300)  # never --system-site-packages
    assert "include-system-site-packages = false" in (root / "pyvenv.cfg").read_text()
    # Dependencies from the index (the pip cache keeps a rerun fast); the package only from the wheel.
    checked([str(root / "bin" / "python"), "-m", "pip", "install", "--quiet", f"{built.wheel}[{EXTRAS}]"], outside, 900)
    probe = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    purelib = subprocess.run(
        [str(root / "bin" / "python"), "-c", probe], cwd=outside, env=clean_env(), capture_output=True, text=True,
        check=True,
    ).stdout.strip()  # fmt: skip
    return Venv(root, Path(purelib), outside)


def test_wheel_holds_the_packages_and_nothing_else(built: Built) -> None:
    names = built.names()
    dist_info = built.dist_info()
    assert {n.split("/")[0] for n in names} == {*SHIPPED, dist_info}
    for folder in NOT_SHIPPED:
        assert not [n for n in names if n.startswith(f"{folder}/")], f"{folder}/ is not part of the distribution"
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    # Every module and every picker file of the source tree, none left behind.
    expected = {
        path.relative_to(built.source).as_posix()
        for package in SHIPPED
        for path in (built.source / package).rglob("*")
        if path.is_file() and (path.suffix == ".py" or path.parent == built.source / STATIC)
    }
    assert {f"{STATIC}/{name}" for name in PICKER_FILES} <= expected
    assert sorted(expected - set(names)) == []
    # The metadata says what pyproject.toml says: console scripts and extras.
    project = tomllib.loads((built.source / "pyproject.toml").read_text())["project"]
    entry_points = built.read(f"{dist_info}/entry_points.txt").decode()
    for script, target in project["scripts"].items():
        assert f"{script} = {target}" in entry_points
    metadata = Parser().parsestr(built.read(f"{dist_info}/METADATA").decode())
    assert set(metadata.get_all("Provides-Extra") or []) == set(project["optional-dependencies"])
    assert metadata["License-Expression"] == project["license"] == "Apache-2.0"


def test_packages_import_from_the_venv(venv: Venv) -> None:
    code = "import json, runtime, ray_history_pulumi as rhp; print(json.dumps([runtime.__file__, rhp.__file__]))"
    done = venv.run(venv.bin("python"), "-c", code)
    assert done.returncode == 0, done.stderr
    for file in json.loads(done.stdout):
        assert Path(file).resolve().is_relative_to(venv.purelib.resolve()), file


@pytest.mark.parametrize("binary", BINARIES)
def test_binaries_print_their_usage(venv: Venv, binary: str) -> None:
    done = venv.run(venv.bin(binary), "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: {binary} "), done.stdout[:500]


def test_pulumi_components_list_without_any_sdk(venv: Venv, built: Built) -> None:
    code = (
        "import importlib.util, json, pkgutil, sys\n"
        "import ray_history_pulumi\n"
        "modules = sorted(m.name for m in pkgutil.iter_modules(ray_history_pulumi.__path__))\n"
        f"loaded = sorted(n for n in sys.modules if n.startswith({SDK_PREFIXES!r}))\n"
        "sdk = importlib.util.find_spec('pulumi') is not None\n"
        "print(json.dumps({'modules': modules, 'loaded': loaded, 'pulumi': sdk}))\n"
    )
    done = venv.run(venv.bin("python"), "-c", code)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    source = built.source / "ray_history_pulumi"
    expected = sorted(
        [p.stem for p in source.glob("*.py") if p.stem != "__init__"]
        + [p.parent.name for p in source.glob("*/__init__.py")]  # subpackages (grafana: Ray's dashboards)
    )
    assert found["modules"] == expected
    assert found["loaded"] == []
    assert found["pulumi"] is False, "[collector,server,cli] must not install the Pulumi SDK"


@pytest.fixture
def installed_server(venv: Venv, built: Built, tmp_path: Path) -> Iterator[tuple[str, dict[str, bytes], str]]:
    """The venv's ``historyserver`` over a local store holding the sample session.

    Yields its URL, the files it should serve (the picker's and the Dashboard stand-in's
    ``index.html``) and the stored session's name.
    """
    store = open_store(StorageConfig(backend="local", local_dir=str(tmp_path / "store"), create_bucket=True))
    sample = write_sample_session(store, KeyLayout(""))
    # A marker appended to the installed copies only: served bytes carrying it can only come
    # from the venv's site-packages (the repository's files are identical to the wheel's).
    served: dict[str, bytes] = {}
    for name, (_, comment) in PICKER_FILES.items():
        installed = venv.purelib / STATIC / name
        assert installed.read_bytes() == built.read(f"{STATIC}/{name}")
        installed.write_bytes(installed.read_bytes() + comment.format(f"installed copy {venv.root}").encode())
        served[name] = installed.read_bytes()
    # [server] alone has no Ray Dashboard build (the image copies Ray's and passes --dashboard-dir):
    # a stand-in, so `/` sends a visitor with no cluster chosen to the picker.
    dashboard = tmp_path / "dashboard"
    dashboard.mkdir()
    served["index.html"] = b"<!doctype html><title>Ray Dashboard stand-in</title>"
    (dashboard / "index.html").write_bytes(served["index.html"])
    port = free_port()
    args = [
        str(venv.bin("historyserver")), "--storage-backend=local", f"--local-storage-dir={tmp_path / 'store'}",
        f"--cache-dir={tmp_path / 'cache'}", "--host=127.0.0.1", f"--port={port}", "--kubernetes=off",
        f"--dashboard-dir={dashboard}",
    ]  # fmt: skip
    log_path = tmp_path / "historyserver.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            args, cwd=venv.outside, env=clean_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120  # generous: the 2-core CI machine is busy
        while True:
            assert proc.poll() is None, f"historyserver exited with {proc.returncode}:\n{log_path.read_text()}"
            try:
                if requests.get(f"{url}/readz", timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                pass
            assert time.monotonic() < deadline, f"historyserver not ready:\n{log_path.read_text()}"
            time.sleep(0.2)
        yield url, served, sample.session
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            code = proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
    assert code == 0, log_path.read_text()


def test_installed_server_serves_the_picker(installed_server: tuple[str, dict[str, bytes], str]) -> None:
    url, served, session = installed_server
    first = requests.get(f"{url}/", allow_redirects=False, timeout=30)  # no cluster chosen yet: the picker
    assert first.status_code == 302 and first.headers["Location"] == "select_cluster"
    page = requests.get(f"{url}/select_cluster", timeout=30)
    assert page.status_code == 200 and page.headers["Content-Type"].startswith("text/html")
    assert page.content == served["select_cluster.html"]
    # The files the page references, resolved as a browser would.
    references = re.findall(r'(?:href|src)="([^"]+)"', page.text)
    assert sorted(references) == ["select_cluster.css", "select_cluster.js"]
    for reference in references:
        asset = requests.get(urljoin(f"{url}/select_cluster", reference), timeout=30)
        assert asset.status_code == 200 and asset.headers["Content-Type"].startswith(PICKER_FILES[reference][0])
        assert asset.content == served[reference]
    # What the picker lists, and the stored session behind it, come from the installed server too.
    clusters = requests.get(f"{url}/clusters", timeout=60).json()
    assert any(c["sessionName"] == session for c in clusters), clusters
    client = requests.Session()
    entered = client.get(f"{url}/enter_cluster/default/raycluster/raycluster-demo/{session}", timeout=120)
    assert entered.status_code == 200, entered.text
    jobs = client.get(f"{url}/api/jobs/", timeout=120)
    assert jobs.status_code == 200 and any(job.get("submission_id") for job in jobs.json()), jobs.text
    index = client.get(f"{url}/", allow_redirects=False, timeout=30)  # a cluster chosen: the Dashboard
    assert index.status_code == 200 and index.content == served["index.html"]
