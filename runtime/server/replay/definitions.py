"""Pure helpers turning task-definition fields into what the State API shows."""

from __future__ import annotations

from typing import Any, Final

import orjson

from runtime.common.json_bytes import dumps_kept


def func_name(descriptor: object) -> str:
    """``Class.function`` or ``function`` from a Python/Java/C++ function descriptor."""
    if not isinstance(descriptor, dict) or not descriptor:
        return ""
    inner = (
        descriptor.get("pythonFunctionDescriptor")
        or descriptor.get("javaFunctionDescriptor")
        or descriptor.get("cppFunctionDescriptor")
    )
    if not isinstance(inner, dict):
        return ""
    function = str(inner.get("functionName") or "")
    cls = str(inner.get("className") or "")
    return f"{cls}.{function}" if cls else function


def runtime_env_info(serialized: str) -> bytes:
    """The State API's ``runtime_env_info`` object (live shape: ``uris`` only when the
    env names a working_dir or py_modules)."""
    info: dict[str, Any] = {"serialized_runtime_env": serialized}
    try:
        env = orjson.loads(serialized) if serialized else None
    except orjson.JSONDecodeError:
        env = None
    if isinstance(env, dict) and (env.get("working_dir") or env.get("py_modules")):
        modules = env.get("py_modules")
        info["uris"] = {
            **({"working_dir_uri": env["working_dir"]} if isinstance(env.get("working_dir"), str) else {}),
            "py_modules_uris": [m for m in modules if isinstance(m, str)] if isinstance(modules, list) else [],
        }
    info["runtime_env_config"] = {"setup_timeout_seconds": 600, "eager_install": True, "log_files": []}
    return orjson.dumps(info)


EMPTY_OBJECT: Final = b"{}"  # most profile entries' extra data (Ray writes "{}")
_UNPARSABLE: Final = object()


def _parsed_extra(extra: str) -> object:
    """Profile extra data parsed, or ``_UNPARSABLE``: the State API answers ``{}`` then."""
    try:
        return orjson.loads(extra)
    except orjson.JSONDecodeError:
        return _UNPARSABLE


def reencoded_extra(extra: str) -> bytes:
    """Profile extra data as the State API answers it: re-encoded JSON, ``{}`` when
    unparsable. Held only until its row is packed, so orjson's buffer is not copied."""
    if extra == "{}":
        return EMPTY_OBJECT
    data = _parsed_extra(extra)
    return EMPTY_OBJECT if data is _UNPARSABLE else orjson.dumps(data)


def profile_extra(name: str, extra: str) -> tuple[str, bytes]:
    """A ``task::<func>`` profile entry's function name (``''`` unless its extra data is
    an object with a ``name``) and its extra data as :func:`reencoded_extra`, from one
    parse. Copied to its own size: an attempt holds it until its shard is written (see
    ``runtime.common.json_bytes``)."""
    data = _parsed_extra(extra)
    if data is _UNPARSABLE:
        return "", EMPTY_OBJECT
    func = name[len("task::") :] if isinstance(data, dict) and data.get("name") else ""
    return func, dumps_kept(data)


def _snake(key: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in key)


def snake_keys(value: object) -> object:
    if isinstance(value, dict):
        return {_snake(str(k)): snake_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [snake_keys(v) for v in value]
    return value
