"""Flags are checked against vLLM's own --help=all (cached per version) or the shipped list."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from launcher.config import flags
from launcher.config.load import loads
from launcher.errors import EX_CONFIG, ProfileError
from launcher.vllm import command, install
from tests.conftest import DATA
from tests.helpers.profiles import load_profile

HELP = (DATA / "help" / "serve_help_all-0.32.0.txt").read_text()


class TestCatalog:
    def test_shipped_list_is_the_parsed_help(self) -> None:
        """The shipped JSON is exactly what parsing vLLM 0.32's --help=all gives."""
        parsed = flags.parse_help(HELP, "0.32.0", "shipped")
        shipped = flags.shipped_catalog()
        assert dict(parsed.flags) == dict(shipped.flags)
        assert 300 < len(shipped.flags)

    def test_negatable_and_choices(self) -> None:
        catalog = flags.shipped_catalog()
        assert catalog.flags["enable-prefix-caching"].negatable
        assert not catalog.flags["disable-log-stats"].negatable
        assert "qwen3_coder" in (catalog.flags["tool-call-parser"].choices or ())
        assert "tensor-parallel-size" == catalog.aliases["tp"]


class TestCheck:
    @pytest.mark.parametrize(("extra", "words"), [
        ("  max-modle-len: 4096\n", "did you mean max-model-len"),
        ("  enable-prefix-cache: true\n", "did you mean enable-prefix-caching"),
        ("  swap-space: 4\n", "removed in vLLM 0.18.0"),
        ("  calculate-kv-scales: true\n", "removed in vLLM 0.28.0"),
        ("  disable-log-requests: true\n", "removed in vLLM 0.17.0"),
        ("  tool-call-parser: qwen3coder\n", "did you mean qwen3_coder"),
    ])
    def test_unknown_flags_name_the_closest(self, extra: str, words: str) -> None:
        """An unknown or removed flag is a one-line profile error with the closest name."""
        with pytest.raises(ProfileError) as caught:
            flags.check_profile_flags(load_profile(vllm=extra), flags.shipped_catalog())
        assert words in str(caught.value)
        assert str(caught.value).startswith("p.yaml:4: vllm.")

    def test_known_flags_pass(self) -> None:
        flags.check_profile_flags(load_profile(vllm="  enforce-eager: true\n  no-enable-prefix-caching: true\n"),
                                  flags.shipped_catalog())

    def test_tool_parser_plugin_allows_other_names(self) -> None:
        """With a parser plugin, vLLM accepts names outside its built-in list."""
        flags.check_profile_flags(load_profile(vllm="  tool-parser-plugin: /p.py\n  tool-call-parser: mine\n"),
                                  flags.shipped_catalog())


class TestInstalled:
    def test_help_is_run_once_per_version(self, tmp_path: Path) -> None:
        """The installed vLLM's help (10 s) is read once and cached by version."""
        calls: list[list[str]] = []

        def run(cmd: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
            calls.append(cmd)
            return subprocess.CompletedProcess(cmd, 0, HELP, "")

        first = install.installed_catalog(Path("/x/vllm"), "0.32.0+cpu", tmp_path, run)
        second = install.installed_catalog(Path("/x/vllm"), "0.32.0+cpu", tmp_path, run)
        assert first is not None and second is not None
        assert [["/x/vllm", "serve", "--help=all"]] == calls
        assert "installed" == second.source
        assert dict(first.flags) == dict(second.flags)

    def test_unreadable_help_falls_back_to_shipped(self, tmp_path: Path) -> None:
        def run(cmd: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
            return subprocess.CompletedProcess(cmd, 1, "", "boom")

        assert "shipped" == install.catalog_for(Path("/x/vllm"), "9.9.9", tmp_path, run).source

    def test_version_comes_from_the_executables_interpreter(self, tmp_path: Path) -> None:
        """A python-script `vllm` is asked through its own interpreter, not by importing torch."""
        exe = tmp_path / "vllm"
        exe.write_text("#!/usr/bin/python3\nprint('hi')\n")
        seen: list[list[str]] = []

        def run(cmd: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
            seen.append(cmd)
            return subprocess.CompletedProcess(cmd, 0, "0.32.0+cpu\n", "")

        assert "0.32.0+cpu" == install.installed_version(exe, run)
        assert "/usr/bin/python3" == seen[0][0]


class TestNothingBecomesAFlag:
    """A value vLLM's argparse would read as an option, or words the flag does not take, never reach argv."""

    @pytest.mark.parametrize(("text", "key"), [
        ('model: "--trust-remote-code"\nvllm: {host: 127.0.0.1}\n', "model"),
        ("model: /m\nvllm:\n  host: 127.0.0.1\n  served-model-name: [fake, --api-key, smuggled]\n",
         "vllm.served-model-name"),
        ("model: /m\nvllm:\n  host: 127.0.0.1\n  tokenizer: -x\n", "vllm.tokenizer"),
        ("model: /m\nvllm:\n  host: 127.0.0.1\n  api-key=smuggled: 1\n", "vllm.api-key=smuggled"),
        ("model: /m\nvllm:\n  host: 127.0.0.1\n  'enforce-eager --api-key': true\n", "vllm.enforce-eager --api-key"),
    ])
    def test_an_option_in_a_value_or_a_name_is_78_naming_the_key(self, text: str, key: str) -> None:
        with pytest.raises(ProfileError) as caught:
            loads(text, source="p.yaml")
        assert f" {key}: " in str(caught.value) and EX_CONFIG == caught.value.exit_code

    def test_negative_numbers_are_values(self) -> None:
        profile = load_profile(vllm="  seed: -1\n  tokenizer-revision: '-2.5'\n")
        argv = command.build_plan(profile, catalog=flags.shipped_catalog()).argv
        assert ["--seed", "-1"] == list(argv[argv.index("--seed"):][:2])

    @pytest.mark.parametrize(("extra", "words"), [
        ("  enable-prefix-caching: [a, b]\n", "--enable-prefix-caching is an on/off flag"),
        ("  enforce-eager: smuggled\n", "--enforce-eager is an on/off flag"),
        ("  enforce-eager: {a: 1}\n", "--enforce-eager is an on/off flag"),
        ("  tokenizer: [a, b]\n", "--tokenizer takes one value, not a list"),
    ])
    def test_words_the_flag_does_not_take_are_refused(self, extra: str, words: str) -> None:
        with pytest.raises(ProfileError, match=words):
            flags.check_profile_flags(load_profile(vllm=extra), flags.shipped_catalog())

    def test_a_list_becomes_the_values_of_a_flag_that_takes_several(self) -> None:
        profile = load_profile(vllm="  served-model-name: [tiny, tiny-alias]\n")
        catalog = flags.shipped_catalog()
        flags.check_profile_flags(profile, catalog)
        argv = list(command.build_plan(profile, catalog=catalog).argv)
        assert ["--served-model-name", "tiny", "tiny-alias"] == argv[argv.index("--served-model-name"):][:3]

    def test_the_catalog_knows_which_flags_take_several_values(self) -> None:
        catalog = flags.shipped_catalog()
        assert catalog.flags["served-model-name"].multiple and catalog.flags["lora-modules"].multiple
        assert not catalog.flags["tokenizer"].multiple and not catalog.flags["enforce-eager"].takes_value

    def test_a_cached_list_without_nargs_is_read_again(self, tmp_path: Path) -> None:
        """An older launcher's cache lacks "multiple": the help is parsed again (and the cache rewritten)."""
        old = flags.parse_help(HELP, "0.32.0", "installed").to_json().replace(', "multiple": false', "")
        (tmp_path / "vllm-flags-0.32.0.json").write_text(old.replace('"multiple": true', '"x": 1'))
        calls: list[list[str]] = []

        def run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
            calls.append(argv)
            return subprocess.CompletedProcess(argv, 0, HELP, "")

        catalog = install.installed_catalog(Path("/v/bin/vllm"), "0.32.0", tmp_path, run)
        assert catalog is not None and catalog.flags["served-model-name"].multiple and 1 == len(calls)


def _poisoned(text: str) -> Any:
    return lambda path: path.write_text(text)


def _good_with(change: Any) -> Any:
    """The real cache of vLLM 0.32 with one field changed by `change(data)`."""
    def write(path: Path) -> None:
        data = json.loads(flags.parse_help(HELP, "0.32.0", "installed").to_json())
        change(data)
        path.write_text(json.dumps(data))
    return write


@pytest.mark.timeout(60)  # a FIFO as the cache used to wait for a writer
@pytest.mark.parametrize("poison", [
    _poisoned('{"version": "0.32.0", "flags": [1, 2], "aliases": {}}'),
    _good_with(lambda d: d["flags"]["max-model-len"].update(choices=5)),
    _good_with(lambda d: d["flags"]["max-model-len"].update(choices=[1, 2])),
    _good_with(lambda d: d["flags"]["enforce-eager"].update(takes_value="no")),
    _good_with(lambda d: d["flags"].update({"max-model-len": 5})),
    _good_with(lambda d: d.update(aliases=[])),
    _good_with(lambda d: d["aliases"].update(tp=7)),
    _good_with(lambda d: d["aliases"].update(tp="no-such-flag")),
    _good_with(lambda d: d.update(version=["0.32.0"])),
    _good_with(lambda d: d.update(flags={"max-model-len": d["flags"]["max-model-len"]})),  # a list of one flag
    _poisoned('{"version": "0.32.0", "flags": ' + "[" * 100_000),
    _poisoned("[" * 200_000),
    _poisoned("null"),
    _poisoned("{"),
    os.mkfifo,
    lambda path: path.symlink_to("/dev/zero"),
], ids=["flags-a-list", "choices-5", "choices-numbers", "takes-value-a-string", "spec-a-number", "aliases-a-list",
        "alias-a-number", "alias-to-nothing", "version-a-list", "one-flag", "deep-flags", "deep", "null", "not-json",
        "fifo", "dev-zero"])
def test_a_poisoned_cache_is_ignored_with_a_warning_and_rebuilt(tmp_path: Path, poison: Any) -> None:
    """The cache directory is writable by the service user: whatever the cached list holds, it is checked field
    by field; one that fails is a warning, the help is read again and the cache rewritten."""
    cached = tmp_path / "vllm-flags-0.32.0.json"
    poison(cached)
    calls: list[list[str]] = []

    def run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 0, HELP, "")

    with capture_logs() as logs:
        catalog = install.installed_catalog(Path("/v/bin/vllm"), "0.32.0", tmp_path, run)
    assert catalog is not None and "installed" == catalog.source and 1 == len(calls)
    assert dict(flags.shipped_catalog().flags) == dict(catalog.flags)
    warned = [e for e in logs if e["event"] == "flag_catalog.cache_ignored"]
    assert 1 == len(warned) and str(cached) in warned[0]["error"], logs
    assert cached.is_file() and not cached.is_symlink()
    assert install.cached_catalog("0.32.0", tmp_path) is not None  # rebuilt: the next start reads it
