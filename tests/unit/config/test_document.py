"""Any bytes as a profile: a Profile or one ProfileError line (exit 78), never a traceback or a hang."""

from __future__ import annotations

import io
import os
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from launcher import cli
from launcher.config.load import load, loads
from launcher.errors import EX_CONFIG, ProfileError
from tests.helpers.profiles import bomb, write_profile

HEAD = b"model: Org/Model\nvllm:\n  host: 127.0.0.1\n"


class TestBytes:
    def test_a_latin1_byte_names_the_file_line_and_offset(self, tmp_path: Path) -> None:
        path = write_profile(tmp_path, HEAD + b"# r\xe9sum\xe9\n")
        with pytest.raises(ProfileError) as caught:
            load(path)
        offset = len(HEAD) + 3
        assert f"{path}:4: byte 0xe9 at offset {offset} is not UTF-8; save the file as UTF-8" in str(caught.value)

    def test_a_bom_is_not_an_error(self, tmp_path: Path) -> None:
        assert "Org/Model" == load(write_profile(tmp_path, b"\xef\xbb\xbf" + HEAD)).model

    def test_a_file_over_the_size_limit_is_refused_unread(self, tmp_path: Path) -> None:
        path = write_profile(tmp_path, HEAD + b"#" * 1024 * 1024)
        with pytest.raises(ProfileError, match="larger than 1024 KiB"):
            load(path)

    def test_a_directory_is_one_line(self, tmp_path: Path) -> None:
        with pytest.raises(ProfileError, match="is a directory"):
            load(tmp_path)

    @pytest.mark.timeout(60)  # before: opening a FIFO waited for a writer forever (a SIGHUP wedged the daemon)
    def test_a_fifo_is_one_line_at_once(self, tmp_path: Path) -> None:
        path = tmp_path / "p.yaml"
        os.mkfifo(path)
        with pytest.raises(ProfileError) as caught:
            load(path)
        assert f"{path}: is a FIFO (named pipe), not a regular file; " in str(caught.value)

    @pytest.mark.timeout(60)
    def test_a_link_to_a_device_is_one_line(self, tmp_path: Path) -> None:
        """A profile may be a link (a ConfigMap is made of them); what it points to must still be a file."""
        (tmp_path / "p.yaml").symlink_to("/dev/zero")
        with pytest.raises(ProfileError, match="is a character device, not a regular file"):
            load(tmp_path / "p.yaml")
        (tmp_path / "real.yaml").write_bytes(HEAD)
        (tmp_path / "q.yaml").symlink_to(tmp_path / "real.yaml")
        assert "Org/Model" == load(tmp_path / "q.yaml").model

    def test_random_binary_is_exit_78_with_one_line(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        rng = random.Random(7)  # noqa: S311 - reproducible test bytes, not a secret
        for n in range(40):
            path = tmp_path / f"r{n}.yaml"
            path.write_bytes(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 600))))
            assert EX_CONFIG == cli.main(["plan", str(path), "--gpu", "l40s"])
            err = capsys.readouterr().err
            assert err.startswith(f"vllm-launch: {path}") and 1 == len(err.strip().splitlines()), err


@pytest.mark.parametrize("command", [["plan", "--gpu", "l40s"], ["preflight"], ["up"], ["render", "lws"],
                                     ["render", "systemd", "--node-rank", "0"], ["diagnose", "-", "--profile"]])
def test_every_command_that_reads_a_profile_says_78_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, command: list[str]) -> None:
    """The same guarded read behind plan, preflight, up, render and diagnose (container mode: test_container)."""
    path = write_profile(tmp_path, HEAD + b"# r\xe9sum\xe9\n")
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    where = {"render": 2, "diagnose": 3}.get(command[0], 1)
    argv = [*command[:where], str(path), *command[where:]]
    assert EX_CONFIG == cli.main(argv)
    err = capsys.readouterr().err
    assert f"{path}:4: byte 0xe9 at offset" in err and 1 == len(err.strip().splitlines()), err


class TestStructure:
    def test_nesting_5000_deep_is_one_line(self) -> None:
        with pytest.raises(ProfileError) as caught:
            loads("model: " + "[" * 5000, source="p.yaml")
        assert str(caught.value).startswith("p.yaml:1: malformed YAML (nesting deeper than 32 levels)")

    def test_nesting_as_deep_as_a_profile_needs_loads(self) -> None:
        text = "model: Org/Model\nvllm:\n  host: 127.0.0.1\n  override-generation-config: {a: {b: {c: [1]}}}\n"
        assert "override-generation-config" in loads(text).vllm

    def test_an_alias_bomb_is_refused_while_composing(self) -> None:
        """9**6 values from about 300 bytes: refused at the line of the anchor that passes the bound."""
        text = bomb(6)
        assert len(text) < 400
        with pytest.raises(ProfileError) as caught:
            loads(text, source="p.yaml")
        assert "more than 20,000 values once its aliases are expanded" in str(caught.value)
        assert str(caught.value).startswith("p.yaml:8: ")

    def test_a_self_referencing_alias_is_refused(self) -> None:
        with pytest.raises(ProfileError, match="refers to the node that holds it"):
            loads("model: Org/Model\nvllm: {host: 127.0.0.1}\nnodes: &n {count: *n}\n")

    def test_a_few_aliases_still_work(self) -> None:
        text = "model: Org/Model\nvllm:\n  host: &h 127.0.0.1\n  served-model-name: [a, b]\nenv: {HOST_COPY: *h}\n"
        assert "127.0.0.1" == loads(text).env["HOST_COPY"]

    def test_a_bomb_in_a_set_value_is_text(self) -> None:
        value = "[" * 5000
        assert value == loads(HEAD.decode(), sets=[f"env.X={value}"]).env["X"]


WORDS = ["model", "vllm", "launcher", "env", "nodes", "ladder", "host", "port", "served-model-name", "api_key",
         "!!binary", "!!set", "!!timestamp", "!!float", "2020-01-01", "null", "true", "1e9", "-1", "<<", "restart"]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(WORDS), st.sampled_from(list("-:[]{}&*!|>'\"#%@,?\n \t"))), max_size=40))
def test_any_text_is_a_profile_or_one_profile_error(parts: list[str]) -> None:
    """YAML words and punctuation in any order, alone or after a valid head: a Profile or one ProfileError line."""
    text = "".join(parts)
    for candidate in (text, HEAD.decode() + text):
        try:
            loads(candidate, source="p.yaml")
        except ProfileError as exc:
            assert "\n" not in str(exc)


def test_an_explicit_tag_pyyaml_cannot_build_is_one_line() -> None:
    with pytest.raises(ProfileError, match="remove the explicit !!tag"):
        loads("model: !!timestamp nope\n", source="p.yaml")
