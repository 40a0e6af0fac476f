"""What ``setup.py`` compiles in the native build (mypyc), read without running setup()."""

from __future__ import annotations

import ast
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


def native_modules() -> list[str]:
    """``setup.py``'s NATIVE_MODULES as dotted module names."""
    tree = ast.parse((REPO / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "NATIVE_MODULES" for t in node.targets):
            paths = ast.literal_eval(node.value)
            return [path.removesuffix(".py").replace("/", ".") for path in paths]
    raise AssertionError("setup.py defines no NATIVE_MODULES")


def c_extensions() -> list[str]:
    """``setup.py``'s C_EXTENSIONS: the dotted names of its ``Extension(name, ...)`` s."""
    tree = ast.parse((REPO / "setup.py").read_text())
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if any(getattr(t, "id", None) == "C_EXTENSIONS" for t in targets):
            return [
                ast.literal_eval(call.args[0])
                for call in ast.walk(node)
                if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "Extension"
            ]
    raise AssertionError("setup.py defines no C_EXTENSIONS")


def c_extension(name: str, built: ModuleType | None, directory: Path) -> ModuleType:
    """One of C_EXTENSIONS: ``built`` (the native build's own, as the package found
    it), else compiled into ``directory`` here; under ``make test-native``
    (RHS_EXPECT_NATIVE=1) a missing one fails the test."""
    if built is not None:
        return built
    if os.environ.get("RHS_EXPECT_NATIVE") == "1":
        pytest.fail(f"the native build did not compile {name.replace('.', '/')}.c")
    return compile_c_extension(name, directory)


def compile_c_extension(name: str, directory: Path) -> ModuleType:
    """One of C_EXTENSIONS compiled into ``directory`` with the system's C compiler and
    loaded under its own name (not imported: the tree's modules stay what they are).
    Skips the calling test when there is no compiler (never under make test-native)."""
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler here: the native build's C modules are tested by make test-native")
    source = REPO / (name.replace(".", "/") + ".c")
    out = directory / (name.rpartition(".")[2] + str(sysconfig.get_config_var("EXT_SUFFIX")))
    include = sysconfig.get_paths()["include"]
    flags = ["-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", f"-I{include}"]
    subprocess.run([compiler, *flags, str(source), "-o", str(out)], check=True)
    loader = importlib.machinery.ExtensionFileLoader(name, str(out))
    spec = importlib.util.spec_from_file_location(name, out, loader=loader)
    assert spec is not None
    had = name in sys.modules
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    if not had:  # CPython files a single-phase-init extension in sys.modules: not imported, as said
        sys.modules.pop(name, None)
    return module
