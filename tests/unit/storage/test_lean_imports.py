"""The SDK imports skip the transports we never use, and the hiding is temporary."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from runtime.storage.lean_imports import without_modules


def test_hidden_module_fails_to_import_inside_the_block_only() -> None:
    name = "xml.dom.minidom"
    sys.modules.pop(name, None)
    with without_modules(name), pytest.raises(ImportError):
        importlib.import_module(name)
    assert name not in sys.modules
    assert importlib.import_module(name).__name__ == name


def test_an_already_imported_module_is_left_alone() -> None:
    import json

    with without_modules("json"):
        assert importlib.import_module("json") is json
    assert sys.modules["json"] is json


@pytest.mark.parametrize(
    ("module", "skipped"),
    [("runtime.storage.gcs", "grpc"), ("runtime.storage.azureblob", "aiohttp")],
)
def test_storage_backends_do_not_load_unused_transports(module: str, skipped: str) -> None:
    # A fresh interpreter: this one may have loaded either module already.
    code = f"import sys, {module}; print({skipped!r} in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "False"
