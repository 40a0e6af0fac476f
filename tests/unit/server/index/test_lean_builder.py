"""The index builder and its workers start in fresh interpreters for every cold
build: whatever they import is paid before the first event is read, so they stay
clear of the web stack (Flask alone took ~0.17 s of a 100k-task build's ~3 s)."""

from __future__ import annotations

import subprocess
import sys

import pytest

WEB_STACK = ("flask", "werkzeug", "jinja2", "click")


@pytest.mark.parametrize(
    "module", ["runtime.server.index.child", "runtime.server.index.build", "runtime.server.index.worker"]
)
def test_build_processes_do_not_import_the_web_stack(module: str) -> None:
    # A fresh interpreter: this one has imported the app already.
    code = f"import sys, {module}; print(sorted(m for m in {WEB_STACK!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60).stdout
    assert out.strip() == "[]", f"{module} imports {out.strip()}"
