"""The settings table (launcher/config/settings.py): it is what the validator reads, what the defaults are,
and what the JSON Schema and docs/profile.md say; editors and the launcher agree on a profile."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import jsonschema
import pytest
import yaml

from launcher.config.load import loads
from launcher.config.profile import HealthPolicy, LadderBounds, LauncherSettings, Requirements, RestartPolicy
from launcher.config.settings import SETTINGS
from launcher.errors import ProfileError
from launcher.run import attempt, gpurelease
from tests.conftest import CONFIGS, ROOT

SCHEMA = json.loads((ROOT / "docs" / "profile.schema.json").read_text(encoding="utf-8"))
BASE = {"model": "Org/Model", "vllm": {"host": "127.0.0.1", "port": 8123, "max-model-len": 4096}}


def validator() -> jsonschema.Draft7Validator:
    jsonschema.Draft7Validator.check_schema(SCHEMA)
    return jsonschema.Draft7Validator(SCHEMA)


def test_the_schema_and_the_reference_are_current() -> None:
    """docs/profile.schema.json and docs/profile.md are generated from the settings table."""
    done = subprocess.run([sys.executable, "scripts/profile_docs.py", "--check"], cwd=ROOT, capture_output=True,
                          text=True, check=False)
    assert 0 == done.returncode, done.stderr


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_profile_validates_against_the_schema(path: Any) -> None:
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert [] == [error.message for error in validator().iter_errors(document)]


BROKEN = [
    pytest.param({"launcher": {"log_backups": "three"}}, "launcher.log_backups", id="wrong-type"),
    pytest.param({"launcher": {"health": {"completion_probe": "yes"}}}, "launcher.health.completion_probe",
                 id="wrong-type-nested"),
    pytest.param({"launcher": {"startup_timout": "10m"}}, "launcher.startup_timout", id="unknown-launcher-key"),
    pytest.param({"launcher": {"health": {"intervall": "10s"}}}, "launcher.health.intervall", id="unknown-nested"),
    pytest.param({"launcher": {"max_attempts": 0}}, "launcher.max_attempts", id="below-the-minimum"),
    pytest.param({"launcher": {"confirm_window": 500}}, "launcher.confirm_window", id="above-the-maximum"),
    pytest.param({"launcher": {"ladder": {"gpu_memory_utilization": [1.5]}}},
                 "launcher.ladder.gpu_memory_utilization", id="rung-out-of-range"),
    pytest.param({"launcher": {"metrics": {"port": 9400, "textfile": "/x/vllm.prom"}}}, "launcher.metrics",
                 id="metrics-port-and-textfile"),
    pytest.param({"launcher": {"device": "tpu"}}, "launcher.device", id="not-a-choice"),
    pytest.param({"api_key": {"vault": "x"}}, "api_key", id="secret-form"),
    pytest.param({"nodes": {"count": 1}}, "nodes.count", id="one-node"),
    pytest.param({"modle": "x"}, "modle", id="unknown-top-level-key"),
    pytest.param({"vllm": {"host": "127.0.0.1", "gpu_memory_utilization": 1.5}}, "vllm.gpu_memory_utilization",
                 id="utilization-above-1"),
    pytest.param({"vllm": {"host": "127.0.0.1", "tp": "two"}}, "vllm.tp", id="short-flag-name"),
    pytest.param({"env": {"HF_HOME": ["a"]}}, "env.HF_HOME", id="env-list"),
]


@pytest.mark.parametrize(("change", "key"), BROKEN)
def test_a_broken_profile_is_rejected_by_the_schema_and_the_launcher(change: dict[str, Any], key: str) -> None:
    """What the editor marks, the launcher refuses too, naming the same key."""
    document = {**BASE, **change}
    assert list(validator().iter_errors(document)), "the schema accepted it"
    with pytest.raises(ProfileError) as caught:
        loads(yaml.safe_dump(document, sort_keys=False), source="p.yaml")
    assert key == caught.value.key


def test_the_schema_accepts_the_forms_the_launcher_accepts() -> None:
    document = {**BASE, "api_key": {"file": "/run/credentials/x/api_key"}, "env": {"HF_HOME": "/cache", "N": 1},
                "vllm": {"host": "127.0.0.1", "max_model_len": "64K", "tp": 1, "compilation-config": {"level": 3},
                         "served-model-name": ["a", "b"], "enforce-eager": None},
                "launcher": {"log_max_size": "2GiB", "confirm_window": "2s", "restart": {"backoff": ["1s", 30]},
                             "metrics": {"textfile": "/var/lib/node_exporter/vllm.prom"},
                             "ladder": {"min_model_len": "32k"}}}
    assert [] == [error.message for error in validator().iter_errors(document)]
    loads(yaml.safe_dump(document, sort_keys=False))


def _bad_everywhere() -> list[tuple[dict[str, Any], str]]:
    """For every key of the table, a launcher: section whose only bad value is that key's."""
    cases = []
    for item in SETTINGS:
        if item.kind == "section":
            continue
        bad: dict[str, Any] = {item.leaf: {"not": "a value"}}
        if item.name == "metrics.address":  # the section needs its port (or textfile) first
            bad["port"] = 9400
        launcher = {item.section: bad} if item.section else bad
        cases.append((launcher, item.key))
    return cases


@pytest.mark.parametrize(("launcher", "key"), _bad_everywhere(), ids=[key for _l, key in _bad_everywhere()])
def test_every_declared_key_is_validated(launcher: dict[str, Any], key: str) -> None:
    """No key of the table goes unread: a mapping where a value belongs is refused, naming that key."""
    with pytest.raises(ProfileError) as caught:
        loads(yaml.safe_dump({**BASE, "launcher": launcher}), source="p.yaml")
    assert key == caught.value.key
    assert "; " in str(caught.value)


def test_the_defaults_are_the_same_everywhere() -> None:
    """A profile that says nothing, the dataclasses' own defaults and the run-time fallbacks agree."""
    loaded = loads(yaml.safe_dump(BASE)).launcher
    bare = LauncherSettings(
        device="gpu", vllm_bin=None, log_file=None, log_max_bytes=loaded.log_max_bytes, log_backups=3,
        startup_timeout_s=3600.0, startup_stall_s=600.0, stop_grace_s=30.0, max_attempts=6,
        ladder=LadderBounds((), drop_fp8_kv_if_unsupported=True, min_model_len=None),
        require=Requirements(None, None), restart=RestartPolicy(5, 3600.0, 5.0, 300.0),
        health=HealthPolicy(interval_s=10.0, failures=3, timeout_s=5.0, completion_probe=False))
    assert bare == loaded
    assert (300.0, 60.0, 5.0, 100 * 1024**2) == (loaded.health.completion_interval_s,
                                                 loaded.gpu_release_timeout_s, loaded.confirm_window_s,
                                                 loaded.log_max_bytes)
    assert loaded.gpu_release_timeout_s == gpurelease.RELEASE_TIMEOUT_S
    assert loaded.confirm_window_s == attempt.CONFIRM_WINDOW_S
