"""What ``setup.py`` compiles in the native build (mypyc), read without running setup()."""

from __future__ import annotations

import ast
from pathlib import Path

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
