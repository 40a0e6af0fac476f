"""Storage configuration shared by the collector and the history server.

Flags and environment variables follow KubeRay's Go history server and collector
("the reference"):
``--storage-backend`` (older alias ``--runtime-class-name``) / ``STORAGE_BACKEND``,
``--storage-root-dir`` (older alias ``--ray-root-dir``) / ``STORAGE_ROOT_DIR``,
``--storage-backend-config-path`` / ``STORAGE_BACKEND_CONFIG_PATH``, plus
``--local-storage-dir`` / ``LOCAL_STORAGE_DIR`` and ``--create-bucket`` /
``STORAGE_CREATE_BUCKET``. The reference lets a non-empty env var silently
override the flag; here a flag and an env var that disagree are an error naming
both, so nobody debugs a pod that ignores its own command line.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from runtime.storage.base import ObjectStore
from runtime.storage.errors import StorageConfigError, StorageError
from runtime.storage.layout import KeyLayout, normalise_root
from runtime.storage.retry import RetryPolicy
from runtime.storage.settings import SettingSource, parse_bool

BACKENDS = ("local", "gcs", "s3", "azureblob")
_UNSUPPORTED = {
    "localtest": "the reference's in-memory 'localtest' is not supported; use 'local' with --local-storage-dir",
    "aliyunoss": "'aliyunoss' is not supported; use gcs, s3 (also for S3-compatible stores) or azureblob",
}


@dataclass(frozen=True)
class StorageConfig:
    """Where history objects live.

    Attributes:
        backend: ``local``, ``gcs``, ``s3`` or ``azureblob``.
        root_dir: key prefix inside the bucket ('' = bucket root).
        local_dir: the directory for the ``local`` backend.
        create_bucket: create a missing bucket/container/directory at start instead
            of failing (off by default: a typo should not create a bucket).
        source: environment and JSON config file the backend reads its settings from.
    """

    backend: str
    root_dir: str = ""
    local_dir: str | None = None
    create_bucket: bool = False
    source: SettingSource = field(default_factory=SettingSource)

    def __post_init__(self) -> None:
        backend = (self.backend or "").strip().lower()
        if not backend:
            raise StorageConfigError(
                "storage backend is required: pass --storage-backend (or set STORAGE_BACKEND) to one of "
                + ", ".join(BACKENDS)
            )
        if backend in _UNSUPPORTED:
            raise StorageConfigError(f"--storage-backend={backend}: {_UNSUPPORTED[backend]}")
        if backend not in BACKENDS:
            raise StorageConfigError(f"--storage-backend={backend!r} is unknown; choose one of {', '.join(BACKENDS)}")
        object.__setattr__(self, "backend", backend)
        try:
            object.__setattr__(self, "root_dir", normalise_root(self.root_dir))
        except ValueError as exc:
            raise StorageConfigError(f"--storage-root-dir: {exc}") from exc
        if backend == "local" and not self.local_dir:
            raise StorageConfigError(
                "--storage-backend=local needs a directory: pass --local-storage-dir or set LOCAL_STORAGE_DIR"
            )

    @property
    def layout(self) -> KeyLayout:
        return KeyLayout(self.root_dir)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> StorageConfig:
        """Configuration purely from environment variables (KubeRay >= 1.7 sidecar mode)."""
        return cls.from_args(None, env)

    @classmethod
    def from_args(cls, args: argparse.Namespace | None, env: Mapping[str, str] | None = None) -> StorageConfig:
        """Merge parsed flags (see :func:`add_storage_arguments`) with the environment."""
        env = dict(os.environ if env is None else env)

        def flag(*names: str) -> str | None:
            values = {n: getattr(args, n, None) for n in names} if args is not None else {}
            given = {n: v for n, v in values.items() if v not in (None, "")}
            distinct = {str(v) for v in given.values()}
            if len(distinct) > 1:
                shown = " and ".join(f"--{n.replace('_', '-')}={v}" for n, v in given.items())
                raise StorageConfigError(f"contradictory flags: {shown}")
            return next(iter(given.values()), None) if given else None

        def merged(flag_value: str | None, flag_name: str, env_name: str, *, lower: bool = False) -> str | None:
            env_value = env.get(env_name, "").strip() or None

            def norm(value: str) -> str:
                return value.strip().lower() if lower else value.strip()

            if flag_value is not None and env_value is not None and norm(flag_value) != norm(env_value):
                raise StorageConfigError(
                    f"{flag_name}={flag_value} contradicts {env_name}={env_value}; set only one of them"
                )
            return flag_value if flag_value is not None else env_value

        backend = merged(
            flag("storage_backend", "runtime_class_name"), "--storage-backend", "STORAGE_BACKEND", lower=True
        )
        root = merged(flag("storage_root_dir", "ray_root_dir"), "--storage-root-dir", "STORAGE_ROOT_DIR")
        local_dir = merged(flag("local_storage_dir"), "--local-storage-dir", "LOCAL_STORAGE_DIR")
        config_path = merged(
            flag("storage_backend_config_path"), "--storage-backend-config-path", "STORAGE_BACKEND_CONFIG_PATH"
        )
        create_flag = bool(getattr(args, "create_bucket", False)) if args is not None else False
        create_env = env.get("STORAGE_CREATE_BUCKET", "").strip()
        create = create_flag or (parse_bool(create_env, "STORAGE_CREATE_BUCKET") if create_env else False)

        return cls(
            backend=backend or "",
            root_dir=root or "",
            local_dir=local_dir,
            create_bucket=create,
            source=SettingSource(env=env, file_config=_read_config_file(config_path)),
        )


def _read_config_file(path: str | None) -> Mapping[str, object]:
    if not path:
        return {}
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise StorageConfigError(f"--storage-backend-config-path={path}: cannot read file: {exc.strerror}") from exc
    except json.JSONDecodeError as exc:
        raise StorageConfigError(f"--storage-backend-config-path={path}: not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise StorageConfigError(f"--storage-backend-config-path={path}: must hold a JSON object")
    return data


def add_storage_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the storage flags shared by ``collector``, ``historyserver`` and tools."""
    group = parser.add_argument_group("storage")
    group.add_argument(
        "--storage-backend",
        choices=None,
        metavar="{local,gcs,s3,azureblob}",
        help="where history is stored (env STORAGE_BACKEND)",
    )
    group.add_argument("--runtime-class-name", help=argparse.SUPPRESS)  # older name (GKE guide)
    group.add_argument("--storage-root-dir", help="key prefix inside the bucket (env STORAGE_ROOT_DIR)")
    group.add_argument("--ray-root-dir", help=argparse.SUPPRESS)  # older name (GKE guide)
    group.add_argument(
        "--storage-backend-config-path",
        help='JSON file with backend settings, e.g. {"s3Bucket": ...} (env STORAGE_BACKEND_CONFIG_PATH)',
    )
    group.add_argument("--local-storage-dir", help="directory for --storage-backend=local (env LOCAL_STORAGE_DIR)")
    group.add_argument(
        "--create-bucket",
        action="store_true",
        help="create the bucket/container/directory if missing (env STORAGE_CREATE_BUCKET)",
    )


def open_store(config: StorageConfig, retry: RetryPolicy | None = None, check: bool = True) -> ObjectStore:
    """Build the configured backend; with ``check``, verify (or create) the bucket now
    so a wrong name or missing permission fails at start, not at the first upload."""
    store: ObjectStore
    if config.backend == "local":
        from runtime.storage.local import LocalStore

        store = LocalStore(Path(config.local_dir or ""), retry=retry)
    elif config.backend == "gcs":
        from runtime.storage.gcs import GCSSettings, GCSStore

        store = GCSStore(GCSSettings.from_source(config.source), retry=retry)
    elif config.backend == "s3":
        from runtime.storage.s3 import S3Settings, S3Store

        store = S3Store(S3Settings.from_source(config.source), retry=retry)
    else:
        from runtime.storage.azureblob import AzureBlobSettings, AzureBlobStore

        store = AzureBlobStore(AzureBlobSettings.from_source(config.source), retry=retry)
    store.probe_prefix = config.layout.probe_prefix()
    if check:
        store.check(create=config.create_bucket)
    return store


def open_configured_store(
    parser: argparse.ArgumentParser, args: argparse.Namespace, env: Mapping[str, str] | None = None
) -> tuple[StorageConfig, ObjectStore]:
    """Build and verify the storage from flags + env, or exit with a message that
    names the flag (exit 2) or the storage problem (exit 1)."""
    try:
        config = StorageConfig.from_args(args, env)
        store = open_store(config)
    except StorageConfigError as exc:
        parser.exit(2, f"{parser.prog}: error: {exc}\n")
    except StorageError as exc:
        parser.exit(1, f"{parser.prog}: error: {exc}\n")
    return config, store
