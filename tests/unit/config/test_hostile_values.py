"""Values that would crash a spawn, turn into a flag, or leak a credential: refused when the profile is read,
one line naming the key and the fix, exit 78."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.config import flags, nodes, secrets
from launcher.config.load import loads, without_env_values
from launcher.config.spawnable import MAX_ARG_STRLEN
from launcher.errors import EX_CONFIG, ConfigError, ProfileError
from launcher.vllm import command
from tests.helpers.profiles import TWO_NODES as TWO

BASE = "model: a\nvllm:\n  host: 127.0.0.1\n"
LONG = "x" * MAX_ARG_STRLEN


def refused(text: str, sets: tuple[str, ...] = ()) -> ProfileError:
    with pytest.raises(ProfileError) as caught:
        loads(text, source="p.yaml", sets=sets)
    assert EX_CONFIG == caught.value.exit_code and "\n" not in str(caught.value)
    return caught.value


@pytest.mark.parametrize(("text", "key", "words"), [
    (BASE + '  served-model-name: "a\\0b"\n', "vllm.served-model-name", "NUL byte"),
    (BASE + 'env:\n  SOME_SETTING: "a\\0b"\n', "env.SOME_SETTING", "NUL byte"),
    ('model: "/m\\0odel"\nvllm: {host: 127.0.0.1}\n', "model", "NUL byte"),
    (BASE + 'launcher: {log_file: "/tmp/a\\0b"}\n', "launcher.log_file", "NUL byte"),
    (BASE + '  served-model-name: "a\\ud800"\n', "vllm.served-model-name", "surrogate"),
    (BASE + f"  chat-template: {LONG}\n", "vllm.chat-template", "MAX_ARG_STRLEN"),
    (BASE + f"env:\n  SOME_SETTING: {LONG[:-5]}\n", "env.SOME_SETTING", "MAX_ARG_STRLEN"),
    (BASE + "  hf-overrides: {" + ", ".join(f"k{n}: {'v' * 60}" for n in range(2000)) + "}\n",
     "vllm.hf-overrides", "MAX_ARG_STRLEN"),
    (BASE + "  hf-overrides:\n    1: x\n    a: y\n", "vllm.hf-overrides.1", "not text"),
    (BASE + "  hf-overrides: {when: 2024-01-01}\n", "vllm.hf-overrides", "JSON"),
    ("model: a\n1: x\nvllm: {host: 127.0.0.1}\n", "1", "not text"),
    (TWO.replace("nodes: {", "nodes: {1: x, "), "nodes.1", "not text"),
])
def test_what_no_exec_can_carry_is_refused_naming_the_key(text: str, key: str, words: str) -> None:
    """NUL bytes, lone surrogates, a word over Linux's 128 KiB (E2BIG), mapping keys that are numbers next
    to text (a TypeError in every sorted walk): refused at validation, not at spawn."""
    error = refused(text)
    assert (key, True) == (error.key, words in str(error)), str(error)


def test_a_set_with_a_nul_byte_is_refused_too() -> None:
    error = refused(BASE, sets=('vllm.served-model-name="a\\0b"',))
    assert error.source == "--set" and "NUL byte" in str(error)


@pytest.mark.parametrize("name", ["no-enable-prefix-caching", "no_enable_prefix_caching"])
def test_false_for_a_flag_spelt_no_is_refused_with_the_positive_spelling(name: str) -> None:
    """vLLM's BooleanOptionalAction makes --enable-prefix-caching and --no-enable-prefix-caching; there is no
    --no-no-enable-prefix-caching, and `false` of a store_true `no-…` flag is just leaving it out."""
    error = refused(BASE + f"  {name}: false\n")
    assert error.key == f"vllm.{name}" and "enable-prefix-caching: true" in str(error)


def test_true_for_a_flag_spelt_no_renders_as_written() -> None:
    profile = loads(BASE + "  no-enable-prefix-caching: true\n")
    plan = command.build_plan(profile, catalog=flags.shipped_catalog())
    assert "--no-enable-prefix-caching" in plan.argv and not any(w.startswith("--no-no-") for w in plan.argv)


@pytest.mark.parametrize("address", ["-x", "--help", "-10.0.0.1"])
def test_a_head_address_that_would_be_a_flag_is_refused(address: str) -> None:
    error = refused(TWO.replace("master_addr: 10.0.0.1", f"master_addr: '{address}'"))
    assert error.key == "nodes.master_addr" and "option" in str(error)


@pytest.mark.parametrize("address", ["--nnodes=9", "-x", "10.0.0.1 --headless", "a\0b"])
def test_a_head_address_from_the_environment_is_checked_too(address: str) -> None:
    profile = loads(TWO.replace("master_addr: 10.0.0.1", "master_addr: {env: HEAD}"))
    assert profile.nodes is not None
    with pytest.raises(ProfileError) as caught:
        nodes.placement(profile.nodes, profile.source, 0, {"HEAD": address})
    assert caught.value.key == "nodes.master_addr" and "HEAD" in str(caught.value)
    assert "\n" not in str(caught.value) and EX_CONFIG == caught.value.exit_code


@pytest.mark.parametrize("name", ["AWS_SECRET_ACCESS_KEY", "MY_SECRET_THING", "GITHUB_TOKEN", "GOOGLE_CREDENTIALS",
                                  "DB_PASSWORD", "OPENAI_API_KEY", "WANDB_APIKEY", "CLIENT_SECRET"])
def test_secret_looking_environment_names_are_refused_as_plain_values(name: str) -> None:
    error = refused(BASE + f"env:\n  {name}: abc123\n")
    assert error.key == f"env.{name}" and "plain text" in str(error) and "environment" in error.fix


@pytest.mark.parametrize("value", ["http://user:pa55@proxy:3128", "https://alice:s3cret@hub.example/x",
                                   "postgres://u:pw7q2x@db/x"])
def test_a_url_with_a_password_is_refused_wherever_it_is_written(value: str) -> None:
    for text, key in ((BASE + f"env:\n  HTTPS_PROXY: '{value}'\n", "env.HTTPS_PROXY"),
                      (BASE + f"  chat-template-url: '{value}'\n", "vllm.chat-template-url")):
        error = refused(text)
        assert error.key == key and "password" in str(error), str(error)
        password = value.split("@", maxsplit=1)[0].rsplit(":", maxsplit=1)[-1]
        assert password not in str(error), "the password itself is never repeated"


@pytest.mark.parametrize("value", ["http://proxy:3128", "https://user@hub.example/x", "git@github.com:a/b"])
def test_a_url_without_a_password_passes(value: str) -> None:
    assert loads(BASE + f"env:\n  HTTPS_PROXY: '{value}'\n").env["HTTPS_PROXY"] == value


@pytest.mark.parametrize(("sets", "replayed", "env_keys"), [
    (("env={A: s3cret}", "vllm.max-model-len=4096"), ["vllm.max-model-len=4096"], ["env"]),
    ((" env.A=s3cret", "env.B =also", "model=x"), ["model=x"], ["env.A", "env.B"]),
])
def test_sets_are_recorded_without_environment_values(sets: tuple[str, ...], replayed: list[str],
                                                      env_keys: list[str]) -> None:
    """What `up` keeps of its --set overrides in state.json (status renders the profile with them): the keys of
    env overrides only, whatever the spacing, since their values may be secrets and never reach vLLM's argv."""
    assert (replayed, env_keys) == without_env_values(sets)


def test_a_secret_file_holding_a_nul_byte_is_one_line_without_the_secret(tmp_path: Path) -> None:
    """The key file is read at launch: a NUL in it would be a ValueError traceback at spawn."""
    (tmp_path / "key").write_bytes(b"part-one\0part-two\n")
    profile = loads(BASE + f"api_key: {{file: {tmp_path / 'key'}}}\n")
    with pytest.raises(ConfigError) as caught:
        secrets.resolve(profile, {})
    message = str(caught.value)
    assert message.startswith("api_key:") and "NUL byte" in message and "part-" not in message
    assert "\n" not in message and EX_CONFIG == caught.value.exit_code
