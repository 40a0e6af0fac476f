"""Reading backend settings from the environment and the optional JSON file
(``--storage-backend-config-path``), with the names of KubeRay's Go history server ("the reference").

Unlike the reference (where S3 takes either the env vars or the file, and
non-string JSON values panic), every key is looked up per setting: the JSON file
wins over the environment, and JSON values may be strings, booleans or numbers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from runtime.common.validators import FALSE_WORDS, TRUE_WORDS
from runtime.storage.errors import StorageConfigError


def parse_bool(value: object, name: str) -> bool:
    """Go ``ParseBool``-like parsing (plus yes/no/on/off); errors name the setting."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in TRUE_WORDS:
        return True
    if text in FALSE_WORDS:
        return False
    raise StorageConfigError(f"{name}: expected a boolean (true/false), got {value!r}")


@dataclass(frozen=True)
class SettingSource:
    """Environment variables plus the JSON backend config file, looked up per key."""

    env: Mapping[str, str] = field(default_factory=dict)
    file_config: Mapping[str, object] = field(default_factory=dict)

    def get(self, env_name: str | None, json_key: str | None, default: str | None = None) -> str | None:
        """The JSON key if present, else the env var if non-empty, else ``default``."""
        if json_key and json_key in self.file_config and self.file_config[json_key] not in (None, ""):
            value = self.file_config[json_key]
            if isinstance(value, (dict, list)):
                raise StorageConfigError(
                    f"backend config key {json_key!r} must be a string, got {type(value).__name__}"
                )
            if isinstance(value, bool):
                return "true" if value else "false"
            return str(value).strip()
        if env_name:
            value_env = self.env.get(env_name, "").strip()
            if value_env:
                return value_env
        return default

    def get_bool(self, env_name: str | None, json_key: str | None, default: bool) -> bool:
        raw = self.get(env_name, json_key)
        if raw is None:
            return default
        names = " / ".join(n for n in (env_name, json_key and f"config key {json_key}") if n)
        return parse_bool(raw, names)

    def require(self, env_name: str, json_key: str | None, what: str) -> str:
        value = self.get(env_name, json_key)
        if not value:
            hint = f"set {env_name}" + (f" (or {json_key!r} in the backend config file)" if json_key else "")
            raise StorageConfigError(f"{what} is required: {hint}")
        return value
