"""The CI skip policy (tests/support/skip_policy.py), run on tiny suites in a subprocess."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.support.skip_policy import ALLOWED_SKIPS

REPO = Path(__file__).resolve().parents[2]

KIND_SKIP = """
import pytest

def test_deploys() -> None:
    pytest.skip("the kind end-to-end test needs kind, docker, kubectl and pulumi on PATH; missing: kind")
"""

UNEXPECTED = """
import pytest

@pytest.fixture
def feature() -> None:
    pytest.skip("the feature is not implemented yet")

def test_passes() -> None:
    pass

def test_in_a_fixture(feature: None) -> None:
    pass

@pytest.mark.skipif(True, reason="the index builder has not landed yet")
def test_marked() -> None:
    pass

@pytest.mark.xfail(reason="known broken")
def test_xfailed() -> None:
    raise AssertionError
"""

MODULE_SKIP = """
import pytest

pytest.importorskip("no_such_module_anywhere", reason="the module has not landed yet")
"""


def run_suite(root: Path, files: dict[str, str], ci: str | None) -> subprocess.CompletedProcess[str]:
    (root / "pytest.ini").write_text("[pytest]\n")
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    env = {k: v for k, v in os.environ.items() if k != "CI"} | ({"CI": ci} if ci is not None else {})
    command = [sys.executable, "-m", "pytest", "-p", "tests.support.skip_policy", "-p", "no:cacheprovider"]
    return subprocess.run(
        [*command, f"--rootdir={root}", str(root)],
        cwd=REPO,  # `tests` importable: the plugin under test
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_an_allowed_skip_passes_on_ci(tmp_path: Path) -> None:
    done = run_suite(tmp_path, {"tests/integration/kind/test_kind.py": KIND_SKIP}, ci="true")
    assert done.returncode == 0, done.stdout
    assert "1 skipped" in done.stdout and "UNEXPECTED" not in done.stdout


def test_every_unexpected_skip_fails_on_ci_and_is_named(tmp_path: Path) -> None:
    files = {
        "tests/integration/kind/test_kind.py": KIND_SKIP,
        "tests/unit/test_feature.py": UNEXPECTED,
        "tests/unit/test_module.py": MODULE_SKIP,
    }
    done = run_suite(tmp_path, files, ci="true")
    assert done.returncode == 1, done.stdout
    unexpected = set(re.findall(r"^UNEXPECTED SKIP (\S+): ", done.stdout, re.MULTILINE))
    assert unexpected == {
        "tests/unit/test_feature.py::test_in_a_fixture",
        "tests/unit/test_feature.py::test_marked",
        "tests/unit/test_feature.py::test_xfailed",
        "tests/unit/test_module.py",
    }, done.stdout
    assert "not implemented yet" in done.stdout and "has not landed yet" in done.stdout
    assert "4 skip(s) not on the allow-list" in done.stdout


def test_the_kind_reason_elsewhere_is_not_allowed(tmp_path: Path) -> None:
    done = run_suite(tmp_path, {"tests/unit/test_kind_elsewhere.py": KIND_SKIP}, ci="1")
    assert done.returncode == 1, done.stdout
    assert "UNEXPECTED SKIP tests/unit/test_kind_elsewhere.py::test_deploys" in done.stdout


def test_skips_are_allowed_off_ci(tmp_path: Path) -> None:
    for ci in (None, "false"):
        done = run_suite(tmp_path, {"tests/unit/test_feature.py": UNEXPECTED}, ci=ci)
        assert done.returncode == 0, done.stdout
        assert "UNEXPECTED" not in done.stdout


def test_the_allow_list_is_documented_and_matches_the_real_skip() -> None:
    for entry in ALLOWED_SKIPS:
        assert len(entry.why) > 40, entry
        assert (REPO / entry.where).is_dir(), entry.where
    kind_source = (REPO / "tests/integration/kind/test_kind_end_to_end.py").read_text()
    assert ALLOWED_SKIPS[0].reason.search(kind_source), "the kind suite's skip message changed: update the allow-list"
