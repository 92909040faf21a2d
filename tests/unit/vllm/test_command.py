"""From profile to the exact `vllm serve` command: the two guide commands, flag for flag."""

from __future__ import annotations

import shlex

import pytest

from launcher.config.flags import shipped_catalog
from launcher.config.load import load, loads
from launcher.vllm import command
from tests.conftest import CONFIGS
from tests.helpers.profiles import load_profile, yaml_lines

GUIDE_QWEN3 = """vllm serve Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8 \
  --served-model-name qwen3-coder-30b \
  --max-model-len 65536 \
  --gpu-memory-utilization 0.92 \
  --kv-cache-dtype fp8 \
  --enable-prefix-caching \
  --enable-auto-tool-choice --tool-call-parser qwen3_coder \
  --api-key $VLLM_API_KEY \
  --host 0.0.0.0 --port 8000"""

GUIDE_LLAMA = """vllm serve meta-llama/Llama-3.1-8B-Instruct --host 0.0.0.0 --port 8000 --tensor-parallel-size 2 \
  --gpu-memory-utilization 0.90 --max-model-len 8192 --max-num-seqs 256 --dtype bfloat16 \
  --served-model-name llama3-8b --api-key $env:VLLM_API_KEY"""


# vLLM's own drain, added where the version has the flag: 30 s of stop_grace, 7.5 s of it kept for teardown.
DRAIN = ["--shutdown-timeout", "22"]


def without_api_key(words: list[str]) -> list[str]:
    i = words.index("--api-key")
    return words[:i] + words[i + 2:]


class TestGuideCommands:
    def test_qwen3_is_the_l40s_guide_command_without_api_key(self) -> None:
        """configs/qwen3.yaml renders the Qwen3-Coder L40S guide command, flag for flag, minus --api-key."""
        plan = command.build_plan(load(CONFIGS / "qwen3.yaml"), catalog=shipped_catalog())
        assert [*without_api_key(shlex.split(GUIDE_QWEN3)), *DRAIN] == list(plan.argv)

    def test_llama_is_the_tp2_guide_command_without_api_key(self) -> None:
        """configs/llama3-8b-tp2.yaml renders the Llama-3.1 TP2 guide command (0.90 is written as 0.9)."""
        plan = command.build_plan(load(CONFIGS / "llama3-8b-tp2.yaml"), catalog=shipped_catalog())
        expected = [w if w != "0.90" else "0.9" for w in without_api_key(shlex.split(GUIDE_LLAMA))]
        assert [*expected, *DRAIN] == list(plan.argv)

    def test_secrets_travel_as_environment_names_only(self) -> None:
        """The plan names VLLM_API_KEY and HF_TOKEN but holds no secret value and no --api-key."""
        plan = command.build_plan(load(CONFIGS / "llama3-8b-tp2.yaml"))
        assert ("VLLM_API_KEY", "HF_TOKEN") == plan.secret_env_keys
        assert "--api-key" not in plan.argv
        assert "VLLM_API_KEY" not in plan.env


class TestRendering:
    @pytest.mark.parametrize(("flags", "expected"), [
        ({"enable-prefix-caching": "true"}, ["--enable-prefix-caching"]),
        ({"enable-prefix-caching": "false"}, ["--no-enable-prefix-caching"]),
        ({"disable-log-stats": "false"}, []),  # store_true only: false means leaving it out
        ({"served-model-name": "[a, b]"}, ["--served-model-name", "a", "b"]),
        ({"compilation-config": "{level: 0}"}, ["--compilation-config", '{"level":0}']),
        ({"max-model-len": "64K"}, ["--max-model-len", "64K"]),
    ])
    def test_values_become_words(self, flags: dict[str, str], expected: list[str]) -> None:
        """true → --flag, false → --no-flag (when vLLM has it), lists → values after the flag, maps → JSON."""
        plan = command.build_plan(load_profile(vllm=yaml_lines(flags)), catalog=shipped_catalog())
        assert ["vllm", "serve", "/m", "--host", "127.0.0.1", *expected, *DRAIN] == list(plan.argv)

    def test_overrides_replace_in_place_and_remove(self) -> None:
        """Ladder overrides keep the flag's position; None removes a flag; new flags go last."""
        p = load_profile(vllm=yaml_lines({"max-model-len": 4096, "kv-cache-dtype": "fp8", "port": 8123}))
        plan = command.build_plan(p, {"max-model-len": 2048, "kv-cache-dtype": None, "enforce-eager": True})
        assert ["vllm", "serve", "/m", "--host", "127.0.0.1", "--max-model-len", "2048", "--port", "8123",
                "--enforce-eager"] == list(plan.argv)
        assert "max-model-len=2048, kv-cache-dtype=None, enforce-eager=True" == plan.describe_overrides()

    @pytest.mark.parametrize(("host", "url"), [
        ("0.0.0.0", "http://127.0.0.1:8000/health"), ("127.0.0.1", "http://127.0.0.1:8000/health"),
        ("::", "http://[::1]:8000/health"), ("::1", "http://[::1]:8000/health"),
    ])
    def test_health_url_reaches_the_bind_address(self, host: str, url: str) -> None:
        """A wildcard bind is probed over loopback."""
        assert url == command.base_url({"host": host, "port": 8000}) + "/health"

    def test_child_env_adds_unbuffered_and_profile_env(self) -> None:
        p = loads("model: /m\nvllm: {host: 127.0.0.1}\nenv: {VLLM_CPU_KVCACHE_SPACE: 1}\n")
        plan = command.build_plan(p)
        assert {"PYTHONUNBUFFERED": "1", "VLLM_CPU_KVCACHE_SPACE": "1"} == dict(plan.env)
        assert "NOTIFY_SOCKET" in command.CHILD_ENV.strip


class TestDrain:
    def test_the_drain_fits_inside_stop_grace_and_needs_the_flag(self) -> None:
        profile = load(CONFIGS / "qwen3.yaml")
        assert "--shutdown-timeout" not in command.build_plan(profile).argv, "no catalog: the flag may not exist"
        assert [command.drain_seconds(g) for g in (0, 4, 30, 120)] == [0, 3, 22, 110]

    def test_a_drain_the_profile_sets_is_kept(self) -> None:
        profile = load(CONFIGS / "qwen3.yaml", ("vllm.shutdown-timeout=5",))
        argv = list(command.build_plan(profile, catalog=shipped_catalog()).argv)
        assert argv.count("--shutdown-timeout") == 1 and argv[argv.index("--shutdown-timeout") + 1] == "5"


@pytest.mark.parametrize(("text", "word"), [("yes", "true"), ("off", "false"), ("true", "true")])
def test_a_yes_or_off_given_to_a_flag_that_takes_a_value_never_leaves_it_bare(text: str, word: str) -> None:
    """YAML reads `yes`/`off` as booleans. Rendered as a bare `--max-num-batched-tokens`, the next flag would
    become its value (or, for false, the flag would silently vanish); it goes out with its value for vLLM to judge."""
    prof = load_profile(vllm=yaml_lines({"max-num-batched-tokens": text}))
    argv = list(command.build_plan(prof, catalog=shipped_catalog()).argv)
    at = argv.index("--max-num-batched-tokens")
    assert argv[at + 1] == word
