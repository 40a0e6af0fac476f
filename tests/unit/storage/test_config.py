"""Storage configuration: reference flag names and aliases, env-only mode, and
clear errors naming the setting."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from runtime.storage.azureblob import AzureBlobSettings
from runtime.storage.config import StorageConfig, add_storage_arguments, open_store
from runtime.storage.errors import PermanentStorageError, StorageConfigError
from runtime.storage.gcs import GCSSettings
from runtime.storage.s3 import S3Settings


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_storage_arguments(parser)
    return parser.parse_args(argv)


def test_gke_guide_flags() -> None:
    config = StorageConfig.from_args(parse(["--runtime-class-name=gcs", "--ray-root-dir=log"]), {"GCS_BUCKET": "b"})
    assert (config.backend, config.root_dir) == ("gcs", "log")


def test_current_kuberay_flags() -> None:
    config = StorageConfig.from_args(parse(["--storage-backend=S3", "--storage-root-dir=/hist/"]), {})
    assert (config.backend, config.root_dir) == ("s3", "hist")


def test_environment_only() -> None:
    config = StorageConfig.from_env({"STORAGE_BACKEND": "azureblob", "STORAGE_ROOT_DIR": "r"})
    assert (config.backend, config.root_dir) == ("azureblob", "r")


def test_flag_and_env_agreeing_is_fine() -> None:
    config = StorageConfig.from_args(parse(["--storage-backend=gcs"]), {"STORAGE_BACKEND": "GCS"})
    assert config.backend == "gcs"


def test_flag_and_env_contradicting_names_both() -> None:
    with pytest.raises(StorageConfigError, match=r"--storage-backend=local contradicts STORAGE_BACKEND=gcs"):
        StorageConfig.from_args(parse(["--storage-backend=local", "--local-storage-dir=x"]), {"STORAGE_BACKEND": "gcs"})


def test_alias_and_flag_contradicting() -> None:
    with pytest.raises(StorageConfigError, match="contradictory flags"):
        StorageConfig.from_args(parse(["--storage-backend=gcs", "--runtime-class-name=s3"]), {})


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "storage backend is required"),
        ({"STORAGE_BACKEND": "ftp"}, "--storage-backend='ftp' is unknown"),
        ({"STORAGE_BACKEND": "localtest"}, "use 'local'"),
        ({"STORAGE_BACKEND": "aliyunoss"}, "not supported"),
        ({"STORAGE_BACKEND": "local"}, "--local-storage-dir"),
        ({"STORAGE_BACKEND": "gcs", "STORAGE_ROOT_DIR": "../x"}, "--storage-root-dir"),
        ({"STORAGE_BACKEND": "gcs", "STORAGE_CREATE_BUCKET": "maybe"}, "STORAGE_CREATE_BUCKET"),
    ],
)
def test_bad_configuration_names_the_setting(env: dict[str, str], message: str) -> None:
    with pytest.raises(StorageConfigError, match=message):
        StorageConfig.from_env(env)


def test_backend_config_file_wins_per_key(tmp_path: Path) -> None:
    path = tmp_path / "backend.json"
    path.write_text(json.dumps({"s3Bucket": "from-file", "s3ForcePathStyle": True}))
    config = StorageConfig.from_env(
        {
            "STORAGE_BACKEND": "s3",
            "STORAGE_BACKEND_CONFIG_PATH": str(path),
            "S3_BUCKET": "from-env",
            "S3_REGION": "eu-west-1",
        }
    )
    settings = S3Settings.from_source(config.source)
    assert settings.bucket == "from-file"
    assert settings.region == "eu-west-1"  # env still used where the file is silent
    assert settings.force_path_style is True


@pytest.mark.parametrize(("content", "message"), [("{", "not valid JSON"), ("[]", "JSON object")])
def test_bad_backend_config_file(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "backend.json"
    path.write_text(content)
    with pytest.raises(StorageConfigError, match=message):
        StorageConfig.from_env({"STORAGE_BACKEND": "s3", "STORAGE_BACKEND_CONFIG_PATH": str(path)})


def test_missing_backend_config_file(tmp_path: Path) -> None:
    with pytest.raises(StorageConfigError, match="cannot read file"):
        StorageConfig.from_env({"STORAGE_BACKEND": "s3", "STORAGE_BACKEND_CONFIG_PATH": str(tmp_path / "nope")})


def test_gcs_requires_a_bucket() -> None:
    config = StorageConfig.from_env({"STORAGE_BACKEND": "gcs"})
    with pytest.raises(StorageConfigError, match="GCS_BUCKET"):
        GCSSettings.from_source(config.source)


def test_s3_defaults_follow_the_reference() -> None:
    settings = S3Settings.from_source(StorageConfig.from_env({"STORAGE_BACKEND": "s3"}).source)
    assert settings.bucket == "ray-historyserver"


def test_s3_bad_bucket_name_names_the_variable() -> None:
    config = StorageConfig.from_env({"STORAGE_BACKEND": "s3", "S3_BUCKET": "Bad_Bucket"})
    with pytest.raises(StorageConfigError, match="S3_BUCKET"):
        S3Settings.from_source(config.source)


def test_azure_needs_a_connection_string_or_account_url() -> None:
    config = StorageConfig.from_env({"STORAGE_BACKEND": "azureblob"})
    with pytest.raises(StorageConfigError, match="AZURE_STORAGE_CONNECTION_STRING"):
        AzureBlobSettings.from_source(config.source)


def test_azure_unknown_auth_mode_is_an_error() -> None:
    config = StorageConfig.from_env(
        {"STORAGE_BACKEND": "azureblob", "AZURE_STORAGE_AUTH_MODE": "magic", "AZURE_STORAGE_ACCOUNT_URL": "https://a"}
    )
    with pytest.raises(StorageConfigError, match="AZURE_STORAGE_AUTH_MODE"):
        AzureBlobSettings.from_source(config.source)


def test_local_missing_directory_is_reported_not_created(tmp_path: Path) -> None:
    target = tmp_path / "history"
    config = StorageConfig.from_env({"STORAGE_BACKEND": "local", "LOCAL_STORAGE_DIR": str(target)})
    with pytest.raises(PermanentStorageError, match="does not exist"):
        open_store(config)
    assert not target.exists()
    created = StorageConfig.from_env(
        {"STORAGE_BACKEND": "local", "LOCAL_STORAGE_DIR": str(target), "STORAGE_CREATE_BUCKET": "true"}
    )
    open_store(created).close()
    assert target.is_dir()
