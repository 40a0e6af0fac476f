"""The "restricted" Pod Security Standard as the components' pods meet it (server and gc job)."""

from __future__ import annotations

from typing import Any

RUN_AS_USER = 1000


def restricted_pod_security() -> dict[str, Any]:
    """The pod half of the "restricted" Pod Security Standard, as uid/gid ``RUN_AS_USER``."""
    return {
        "run_as_non_root": True,
        "run_as_user": RUN_AS_USER,
        "run_as_group": RUN_AS_USER,
        "fs_group": RUN_AS_USER,
        "seccomp_profile": {"type": "RuntimeDefault"},
    }


def restricted_container_security() -> dict[str, Any]:
    """The container half: no privilege escalation, read-only root filesystem, no capabilities."""
    return {
        "run_as_non_root": True,
        "run_as_user": RUN_AS_USER,
        "allow_privilege_escalation": False,
        "read_only_root_filesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "seccomp_profile": {"type": "RuntimeDefault"},
    }
