"""Profiles: typed loading, --set overrides, and one clear line for every bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.config import profile
from launcher.config.load import load
from launcher.errors import EX_CONFIG, ProfileError
from tests.conftest import CONFIGS
from tests.helpers.profiles import write_profile

GOOD = """\
model: Org/Model
vllm:
  host: 127.0.0.1
  port: 8123
  max_model_len: 4096
"""


class TestLoading:
    def test_qwen3_profile_is_typed(self) -> None:
        """The shipped qwen3 profile loads with its flags in kebab case, in order."""
        p = load(CONFIGS / "qwen3.yaml")
        assert p.model == "Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8"
        assert list(p.vllm)[:3] == ["served-model-name", "max-model-len", "gpu-memory-utilization"]
        assert (65536, 0.92, "fp8", 8000) == (p.max_model_len, p.utilization, p.kv_cache_dtype, p.port)
        assert profile.SecretRef("env", "VLLM_API_KEY") == p.api_key
        assert (0.92, 0.88) == p.launcher.ladder.utilization_rungs
        assert 32768 == p.launcher.ladder.min_model_len
        assert 2.0 == p.launcher.require.min_sessions
        assert 3600.0 == p.launcher.startup_timeout_s

    def test_snake_case_flags_become_kebab(self, tmp_path: Path) -> None:
        """`max_model_len` and `max-model-len` are the same flag."""
        p = load(write_profile(tmp_path, GOOD))
        assert {"host": "127.0.0.1", "port": 8123, "max-model-len": 4096} == dict(p.vllm)

    def test_set_overrides_any_key(self, tmp_path: Path) -> None:
        """--set reaches flags, launcher keys and env, and values are typed like YAML."""
        p = load(write_profile(tmp_path, GOOD), sets=["vllm.max-model-len=2048", "launcher.ladder.min_model_len=1024",
                                                       "env.OMP_NUM_THREADS=2", "vllm.enforce-eager=true"])
        assert 2048 == p.max_model_len
        assert 1024 == p.launcher.ladder.min_model_len
        assert "2" == p.env["OMP_NUM_THREADS"]
        assert p.vllm["enforce-eager"] is True

    def test_first_rung_is_the_starting_utilization(self, tmp_path: Path) -> None:
        """With ladder rungs and no utilization flag, the first rung is passed to vLLM."""
        p = load(write_profile(tmp_path, GOOD + "launcher:\n  ladder:\n    gpu_memory_utilization: [0.9, 0.8]\n"))
        assert 0.9 == p.utilization

    def test_digest_follows_content(self, tmp_path: Path) -> None:
        """Two equal profiles share a digest; a changed flag changes it."""
        a = load(write_profile(tmp_path, GOOD))
        b = load(write_profile(tmp_path, GOOD), sets=["vllm.port=9000"])
        assert a.digest == load(write_profile(tmp_path, GOOD)).digest
        assert a.digest != b.digest

    @pytest.mark.parametrize(("text", "expected"), [
        ("64K", 65536), ("64k", 64000), ("25.6k", 25600), ("2048", 2048), ("auto", None), (-1, None), (None, None),
    ])
    def test_max_model_len_reads_like_vllm(self, text: object, expected: int | None) -> None:
        """Suffixes follow vLLM: k is ×1000, K is ×1024; auto and -1 mean vLLM decides."""
        assert expected == profile.parse_max_model_len(text)


# (profile text, key named in the error, words in the message)
BAD_PROFILES = [
    ("model: [unclosed\n", "", "malformed YAML"),
    ("model: a\n  bad: indent\n", "", "malformed YAML"),
    ("vllm: {host: 127.0.0.1}\n", "model", "missing model"),
    ("", "model", "empty"),
    ("- a list\n", "", "mapping"),
    ("model: 3\n", "model", "expected a model id"),
    ("model: a\nvllm: {host: 127.0.0.1}\nmodle: b\n", "modle", "unknown key"),
    ("model: a\nvllm: {host: 127.0.0.1}\nlauncher: {ladderr: {}}\n", "launcher.ladderr", "did you mean ladder"),
    ("model: a\nvllm: {host: 127.0.0.1, gpu-memory-utilization: 1.5}\n", "vllm.gpu-memory-utilization", "(0, 1]"),
    ("model: a\nvllm: {host: 127.0.0.1, gpu-memory-utilization: 0}\n", "vllm.gpu-memory-utilization", "(0, 1]"),
    ("model: a\nvllm: {host: 127.0.0.1, gpu_memory_utilization: high}\n", "vllm.gpu_memory_utilization", "fraction"),
    ("model: a\nvllm: {host: 127.0.0.1, kv-cache-dtype: fp9}\n", "vllm.kv-cache-dtype", "unknown kv-cache-dtype"),
    ("model: a\nvllm: {host: 127.0.0.1, max-model-len: lots}\n", "vllm.max-model-len", "token count"),
    ("model: a\nvllm: {host: 127.0.0.1, port: 70000}\n", "vllm.port", "TCP port"),
    ("model: a\nvllm: {host: 127.0.0.1, tensor-parallel-size: two}\n", "vllm.tensor-parallel-size", "whole number"),
    ("model: a\nvllm: {host: 127.0.0.1}\napi_key: hunter2hunter2\n", "api_key", "plain text"),
    ("model: a\nvllm: {host: 127.0.0.1, api-key: abc}\n", "vllm.api-key", "command line"),
    ("model: a\nvllm: {host: 127.0.0.1}\nenv: {VLLM_API_KEY: abc}\n", "env.VLLM_API_KEY", "plain text"),
    ("model: a\nvllm: {host: 127.0.0.1}\nenv: {HF_TOKEN: hf_abcdefghijklmnopqrstuvwx}\n", "env.HF_TOKEN", "plain text"),
    ("model: a\nvllm: {host: 127.0.0.1, served-model-name: sk-abcdefghijklmnopqrstuvwxyz}\n",
     "vllm.served-model-name", "plain text"),
    ("model: a\nvllm: {host: 0.0.0.0}\n", "vllm.host", "without an API key"),
    ("model: a\nvllm: {port: 8000}\n", "api_key", "all interfaces"),
    ("model: a\nvllm: {host: 127.0.0.1, model: b}\n", "vllm.model", "top level"),
    ("model: a\nvllm: {host: 127.0.0.1}\napi_key: {vault: x}\n", "api_key", "{env: NAME}"),
    ("model: a\nvllm: {host: 127.0.0.1}\nlauncher: {startup_timeout: soon}\n", "launcher.startup_timeout", "duration"),
    ("model: a\nvllm: {host: 127.0.0.1}\nlauncher: {ladder: {gpu_memory_utilization: [0.8, 0.9]}}\n",
     "launcher.ladder.gpu_memory_utilization", "descending"),
    ("model: a\nvllm: {host: 127.0.0.1, gpu-memory-utilization: 0.95}\n"
     "launcher: {ladder: {gpu_memory_utilization: [0.92, 0.88]}}\n", "vllm.gpu-memory-utilization", "rungs"),
    ("model: a\nvllm: {host: 127.0.0.1, max-model-len: 4096}\nlauncher: {ladder: {min_model_len: 8192}}\n",
     "launcher.ladder.min_model_len", "above max-model-len"),
    ("model: a\nvllm: {host: 127.0.0.1}\nlauncher: {device: tpu}\n", "launcher.device", "gpu or cpu"),
    ("model: a\nvllm: {host: 127.0.0.1}\nallow_unauthenticated: yes please\n", "allow_unauthenticated", "true or false"),
    ("model: a\nvllm: {host: 127.0.0.1}\nlauncher: {restart: {backoff: [5m, 5s]}}\n", "launcher.restart.backoff",
     "longest"),
]


class TestBadInput:
    @pytest.mark.parametrize(("text", "key", "words"), BAD_PROFILES)
    def test_one_line_names_file_key_and_fix(self, tmp_path: Path, text: str, key: str, words: str) -> None:
        """Every bad input is one line with the file, the key, the problem and the fix; exit 78."""
        path = tmp_path / "bad.yaml"
        path.write_text(text)
        with pytest.raises(ProfileError) as caught:
            load(path)
        message = str(caught.value)
        assert EX_CONFIG == caught.value.exit_code
        assert "\n" not in message
        assert message.startswith(str(path))
        assert key == caught.value.key
        assert words in message
        assert "; " in message  # the fix follows the problem

    def test_line_number_points_at_the_key(self, tmp_path: Path) -> None:
        """The error names the line where the bad key is written."""
        path = write_profile(tmp_path, "model: a\nvllm:\n  host: 127.0.0.1\n  gpu-memory-utilization: 2\n")
        with pytest.raises(ProfileError) as caught:
            load(path)
        assert 4 == caught.value.line
        assert str(caught.value).startswith(f"{path}:4: vllm.gpu-memory-utilization:")

    def test_bad_set_names_the_flag(self, tmp_path: Path) -> None:
        """A bad --set value is reported against --set, not the file."""
        with pytest.raises(ProfileError) as caught:
            load(write_profile(tmp_path, GOOD), sets=["vllm.gpu-memory-utilization=7"])
        assert str(caught.value).startswith("--set: vllm.gpu-memory-utilization:")

    def test_set_without_equals_is_refused(self, tmp_path: Path) -> None:
        with pytest.raises(ProfileError, match="KEY=VALUE"):
            load(write_profile(tmp_path, GOOD), sets=["vllm.port"])

    def test_missing_file(self, tmp_path: Path) -> None:
        with pytest.raises(ProfileError, match="no such profile"):
            load(tmp_path / "nope.yaml")

    def test_allow_unauthenticated_permits_open_host(self, tmp_path: Path) -> None:
        """An explicit allow_unauthenticated: true lets a public bind go without a key."""
        p = load(write_profile(tmp_path, "model: a\nvllm: {host: 0.0.0.0}\nallow_unauthenticated: true\n"))
        assert p.host == "0.0.0.0"
