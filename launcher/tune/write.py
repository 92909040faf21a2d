"""`tune --write FILE`: the winning profile, a copy of the original with the winning flags set (as `--set` would
set them) and a comment block saying what evidence chose them. It is validated as a profile before it is
left in place, written atomically, and never over an existing file: nothing the operator had is lost."""

from __future__ import annotations

import datetime
import os
from collections.abc import Sequence
from pathlib import Path

import yaml

from launcher.config import document
from launcher.config.load import apply_set, loads
from launcher.errors import LauncherError, UsageError
from launcher.statedir import write_text_atomic


def tuned_text(original: str, source: str, sets: Sequence[str], evidence: Sequence[str]) -> str:
    raw = document.parse_mapping(original, source)
    for assignment in sets:
        apply_set(raw, assignment, {})
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    header = [f"# Tuned by vllm-launch tune on {stamp}, from {source}.", *(f"# {line}" for line in evidence)]
    body = yaml.safe_dump(raw, sort_keys=False, allow_unicode=True, default_flow_style=False, width=120)
    return "\n".join(header) + "\n" + body


def refuse_existing(path: str) -> None:
    """UsageError when `path` names anything already (a link too): tune never writes over a file."""
    if Path(path).exists() or Path(path).is_symlink():
        raise _exists(path)


def _exists(path: str) -> UsageError:
    return UsageError(f"--write {path}: the file exists; tune never writes over a file: give a new name")


def write_profile(path: str, original_path: str, sets: Sequence[str], evidence: Sequence[str]) -> Path:
    target = Path(path)
    refuse_existing(path)
    original = document.read_text(original_path)
    text = tuned_text(original, original_path, sets, evidence)
    try:  # what is written must be a profile `up` accepts, or nothing is written
        loads(text, source=path, name=target.stem)
    except LauncherError as exc:
        raise UsageError(f"--write {path}: the tuned profile would not load ({exc}); nothing was written") from None
    mode = Path(original_path).stat().st_mode & 0o644 or 0o600
    staged = target.with_name(f".{target.name}.tune")
    write_text_atomic(staged, text, mode=mode)
    try:  # link(2) fails if the name exists: a file made since the check above is not written over either
        os.link(staged, target)
    except FileExistsError:
        raise _exists(path) from None
    except OSError as exc:
        raise UsageError(f"--write {path}: cannot write it ({exc.strerror or exc})") from None
    finally:
        staged.unlink(missing_ok=True)
    return target
