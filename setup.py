"""Packaging beyond pyproject.toml: the optional native build of the index builder's hot path.

With ``RHS_MYPYC=1`` the modules below are compiled with mypyc (same source, C speed for
its loops; ~15 % less CPU per index build, measured by ``bench/server_cold_load.py``).
The server image builds this way; everything else, including the development venv, runs
the same modules as Python. ``make test-native`` runs the build's tests against the
compiled modules. Compiling needs mypy (the dev extra's version) and a C compiler.
"""

from __future__ import annotations

import os

from setuptools import Extension, setup

#: Pure and typed: per-event replay, routing, rendering and the shard writers.
NATIVE_MODULES = [
    "runtime/server/replay/attempt.py",
    "runtime/server/replay/definitions.py",
    "runtime/server/replay/ids.py",
    "runtime/server/replay/render_tasks.py",
    "runtime/server/replay/route.py",
    "runtime/server/replay/shard.py",
    "runtime/server/replay/task_detail.py",
    "runtime/server/replay/task_failures.py",
    "runtime/server/replay/task_feed.py",
    "runtime/server/replay/tasks.py",
    "runtime/server/replay/timestamps.py",
    "runtime/server/index/shard_db.py",
    "runtime/server/index/spill.py",
    "runtime/common/json_bytes.py",
]


#: Written in C: the scan and apply of lifecycle task events (three of four task events), and
#: the router's per-line loop.
C_EXTENSIONS = [
    Extension("runtime.server.replay._lifecycle", ["runtime/server/replay/_lifecycle.c"]),
    Extension("runtime.server.replay._route", ["runtime/server/replay/_route.c"]),
]


def _ext_modules() -> list[object]:
    if os.environ.get("RHS_MYPYC") != "1":
        return []
    from mypyc.build import mypycify  # only a native build needs mypy

    # group_name names the shared runtime library (a top-level module beside ``runtime``).
    compiled = list(mypycify(NATIVE_MODULES, opt_level="3", group_name="ray_history_server"))
    for extension in C_EXTENSIONS:
        extension.extra_compile_args = ["-O3"]
    return compiled + C_EXTENSIONS


setup(ext_modules=_ext_modules())
