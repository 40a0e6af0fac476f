"""The optional native build of the index builder's hot path (``setup.py``, ``RHS_MYPYC=1``).

The same source runs as Python in the development venv and compiled (mypyc) in the server
image. ``make test-native`` compiles a copy of the tree and runs the build's tests there
with ``RHS_EXPECT_NATIVE=1``; these tests check that each run exercises the form it claims:
compiled modules under ``make test-native``, and the source everywhere else (a compiled
module left beside its source would shadow every later edit of it).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from importlib.machinery import EXTENSION_SUFFIXES

import pytest

from tests.support.native_build import REPO, c_extensions, native_modules


def test_every_native_module_is_a_module_of_the_package() -> None:
    names = native_modules()
    assert names, "NATIVE_MODULES is empty"
    for name in names:
        assert name.startswith("runtime."), name
        assert (REPO / (name.replace(".", "/") + ".py")).is_file(), name


@pytest.mark.parametrize("name", native_modules())
def test_each_module_runs_in_the_form_this_run_expects(name: str) -> None:
    module = importlib.import_module(name)
    compiled = any(str(module.__file__).endswith(suffix) for suffix in EXTENSION_SUFFIXES)
    if os.environ.get("RHS_EXPECT_NATIVE") == "1":
        assert compiled, f"{name} was loaded from {module.__file__}, not compiled (make test-native)"
    else:
        assert not compiled, (
            f"{name} was loaded from {module.__file__}: a compiled module shadows the source; "
            "delete it (compile in a copy of the tree, as make test-native does)"
        )


def test_every_c_extension_has_its_source() -> None:
    names = c_extensions()
    assert names, "C_EXTENSIONS is empty"
    for name in names:
        assert (REPO / (name.replace(".", "/") + ".c")).is_file(), name


@pytest.mark.parametrize("name", c_extensions())
def test_each_c_extension_is_built_only_where_this_run_expects(name: str) -> None:
    if os.environ.get("RHS_EXPECT_NATIVE") == "1":
        module = importlib.import_module(name)
        assert any(str(module.__file__).endswith(suffix) for suffix in EXTENSION_SUFFIXES), module.__file__
    else:  # built in the tree, it would replace the Python path in every test of the source form
        assert importlib.util.find_spec(name) is None, f"{name} is built in the tree: delete it"
