"""Resolving the profile's secret references at spawn time; values never leave this process's memory
except as the child's environment (VLLM_API_KEY, HF_TOKEN)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from launcher.config.profile import Profile, SecretRef
from launcher.config.spawnable import word_problem
from launcher.errors import ConfigError


def _read(ref: SecretRef, key: str, environ: Mapping[str, str]) -> str:
    if ref.kind == "env":
        value = environ.get(ref.ref, "")
        if not value:
            raise ConfigError(f"{key}: the environment variable {ref.ref} is not set (or empty); export it before "
                              f"`vllm-launch up`, or use {key}: {{file: /path/to/{key}}}")
        return value
    try:
        value = _credential_path(ref.ref, key, environ).read_text().strip()
    except OSError as exc:
        raise ConfigError(f"{key}: cannot read {ref.ref} ({exc.strerror}); check the path and its permissions "
                          "(systemd: LoadCredential= puts credentials in $CREDENTIALS_DIRECTORY)") from None
    if not value:
        raise ConfigError(f"{key}: {ref.ref} is empty; write the secret into it")
    problem = word_problem(value, "VLLM_API_KEY=")  # it reaches vLLM as one environment entry
    if problem:
        raise ConfigError(f"{key}: {ref.ref} {problem}; "
                          "write only the secret into it, on one line")
    return value


CREDENTIALS_PREFIX = "$CREDENTIALS_DIRECTORY/"


def _credential_path(ref: str, key: str, environ: Mapping[str, str]) -> Path:
    """A file reference; `$CREDENTIALS_DIRECTORY/NAME` is systemd's per-unit credential directory
    (LoadCredential=), so one installed profile works whatever the instance is called."""
    if not ref.startswith(CREDENTIALS_PREFIX):
        return Path(ref)
    directory = environ.get("CREDENTIALS_DIRECTORY", "")
    if not directory:
        raise ConfigError(f"{key}: {ref} needs systemd's LoadCredential= (CREDENTIALS_DIRECTORY is not set); "
                          f"run it as the installed unit, or use {key}: {{env: NAME}} by hand")
    return Path(directory) / ref.removeprefix(CREDENTIALS_PREFIX)


def resolve(profile: Profile, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """{"VLLM_API_KEY": …, "HF_TOKEN": …} for the secrets the profile references."""
    environ = os.environ if environ is None else environ
    values: dict[str, str] = {}
    if profile.api_key is not None:
        values["VLLM_API_KEY"] = _read(profile.api_key, "api_key", environ)
    if profile.hf_token is not None:
        values["HF_TOKEN"] = _read(profile.hf_token, "hf_token", environ)
    return values
