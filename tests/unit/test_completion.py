"""`vllm-launch completion bash|zsh`: scripts generated from the parser itself, so every verb completes."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.cli import COMMANDS, main

VERBS = sorted(COMMANDS)


def script(shell: str, capsys: pytest.CaptureFixture[str]) -> str:
    assert 0 == main(["completion", shell])
    return capsys.readouterr().out


def test_the_bash_script_lists_every_verb_and_each_kind_of_render(capsys: pytest.CaptureFixture[str]) -> None:
    text = script("bash", capsys)
    listed = re.search(r"^_shtab_vllm_launch_subparsers=\((.*)\)$", text, re.MULTILINE)
    assert listed and VERBS == sorted(listed.group(1).split())
    assert "_shtab_vllm_launch_render_subparsers=(lws systemd)" in text
    assert "_shtab_vllm_launch_up_pos_0_COMPGEN=_shtab_compgen_files" in text, "a PROFILE completes as a path"
    assert text.endswith("complete -o bashdefault -F _shtab_vllm_launch vllm-launch\n")


def test_the_zsh_script_describes_every_verb(capsys: pytest.CaptureFixture[str]) -> None:
    text = script("zsh", capsys)
    assert text.startswith("#compdef vllm-launch\n")
    for verb in VERBS:
        assert f"\n    {verb}:'" in text, verb


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_bash_completes_the_verbs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The script as bash runs it: `vllm-launch <TAB>` offers every verb, `vllm-launch render <TAB>` its kinds."""
    path = tmp_path / "vllm-launch.bash"
    path.write_text(script("bash", capsys))
    probe = (f"source {path}\n"
             'COMP_WORDS=(vllm-launch ""); COMP_CWORD=1; _shtab_vllm_launch; echo "${COMPREPLY[*]}"\n'
             'COMP_WORDS=(vllm-launch re); COMP_CWORD=1; _shtab_vllm_launch; echo "${COMPREPLY[*]}"\n'
             'COMP_WORDS=(vllm-launch render ""); COMP_CWORD=2; _shtab_vllm_launch; echo "${COMPREPLY[*]}"\n')
    done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    every, render, kinds = done.stdout.splitlines()
    assert (VERBS, "render", "lws systemd") == (sorted(every.split()), render, kinds)


def test_without_shtab_it_is_one_line_and_exit_2(monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "shtab", None)  # makes `import shtab` raise ImportError
    assert 2 == main(["completion", "bash"])
    captured = capsys.readouterr()
    assert ("", "vllm-launch: completion needs shtab: pip install 'vllm-launch[completion]'\n") == (
        captured.out, captured.err)


def test_an_unknown_shell_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert 2 == main(["completion", "fish"])
    assert "invalid choice: 'fish'" in capsys.readouterr().err
