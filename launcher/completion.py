"""`vllm-launch completion SHELL`: a completion script for bash or zsh, written by shtab from the parser."""

from __future__ import annotations

import argparse
import sys

from launcher.errors import EX_ARGPARSE_USAGE, EX_OK

# Arguments that name a file: completed as paths (shtab's own FILE, spelt out so the parser needs no shtab).
_FILE_METAVARS = {"PROFILE", "PROFILE|URL", "LOGFILE", "FILE", "FILE.png"}
_COMPLETE_FILES = {"bash": "_shtab_compgen_files", "zsh": "_files"}


def script(parser: argparse.ArgumentParser, shell: str) -> int:
    """Print the script; without shtab installed, one line saying how to get it."""
    try:
        import shtab
    except ImportError:
        print("vllm-launch: completion needs shtab: pip install 'vllm-launch[completion]'", file=sys.stderr)
        return EX_ARGPARSE_USAGE
    _complete_files(parser)
    print(shtab.complete(parser, shell=shell).rstrip("\n"))
    return EX_OK


def _complete_files(parser: argparse.ArgumentParser) -> None:
    for action in parser._actions:
        if action.metavar in _FILE_METAVARS:
            action.complete = _COMPLETE_FILES  # type: ignore[attr-defined]  # shtab reads this attribute
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _complete_files(child)
