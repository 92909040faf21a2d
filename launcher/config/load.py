"""Read a profile: YAML text with the line of every key, `--set KEY=VALUE` overrides, then validation.

Every bad input becomes one `ProfileError` line that names the file, the line,
the key and the fix (exit 78); the bytes and the YAML are read within bounds
(config/document.py). `--set` overrides are applied to the raw document before
validation, so they are checked exactly like the file.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from launcher.config import document
from launcher.config.profile import Profile
from launcher.config.validate import ProfileValidator
from launcher.errors import ProfileError


def load(path: str | Path, sets: Sequence[str] = ()) -> Profile:
    """Read, override and validate a profile file."""
    path = Path(path)
    return loads(document.read_text(path), source=str(path), name=path.stem, sets=sets)


def loads(text: str, source: str = "<profile>", name: str = "profile", sets: Sequence[str] = ()) -> Profile:
    """Validate a profile given as YAML text."""
    raw, lines = _parse_yaml(text, source)
    origins = {key: f"{source}:{line}" for key, line in lines.items()}
    for assignment in sets:
        apply_set(raw, assignment, origins)
    return ProfileValidator(source, lines, origins).profile(raw, name)


def _parse_yaml(text: str, source: str) -> tuple[dict[str, Any], dict[str, int]]:
    raw, node = document.parse(text, source)
    if raw is None:
        raise ProfileError(source, "model", "the profile is empty",
                           "write at least `model: <hub id or path>`", 1)
    if not isinstance(raw, dict) or node is None:
        raise ProfileError(source, "", "a profile must be a mapping of keys (model:, vllm:, launcher:)",
                           "start the file with `model: <hub id or path>`", 1)
    lines: dict[str, int] = {}
    _collect_lines(node, "", lines)
    return raw, lines


def _collect_lines(node: yaml.Node, prefix: str, lines: dict[str, int]) -> None:
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = f"{prefix}{key_node.value}"
            lines[key] = key_node.start_mark.line + 1
            _collect_lines(value_node, key + ".", lines)


def set_key(assignment: str) -> str:
    """The KEY of `--set KEY=VALUE`, as apply_set reads it (surrounding spaces dropped)."""
    return assignment.partition("=")[0].strip()


def without_env_values(sets: Sequence[str]) -> tuple[list[str], list[str]]:
    """The --set overrides that may be kept on record (in state.json, for status), and the keys of the env ones,
    whose values may be secrets (`env={...}`, ` env.X=...`): those keys only."""
    kept, env_keys = [], []
    for assignment in sets:
        key = set_key(assignment)
        if key.partition(".")[0] == "env":
            env_keys.append(key)
        else:
            kept.append(assignment)
    return kept, env_keys


def apply_set(raw: dict[str, Any], assignment: str, origins: dict[str, str]) -> None:
    """`--set KEY=VALUE` applied to a parsed profile (the value typed as YAML types it), as `up` applies it and
    `tune --write` writes it."""
    key, sep, text = assignment.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ProfileError("--set", assignment, "expected KEY=VALUE",
                           "write it as --set vllm.max-model-len=32768")
    try:
        value = document.parse(text, "--set")[0] if text.strip() else ""
    except ProfileError:
        value = text
    # `vllm.<flag>` and `env.<NAME>` keep the rest of the key whole: flag names may hold dots.
    head, _, rest = key.partition(".")
    path = [head, rest] if head in ("vllm", "env") and rest else key.split(".")
    if head == "vllm" and rest and isinstance(raw.get("vllm"), dict):
        # --set vllm.max-model-len replaces max_model_len as written in the file, whatever its spelling.
        wanted = rest.replace("_", "-")
        for existing in list(raw["vllm"]):
            if str(existing).replace("_", "-") == wanted:
                del raw["vllm"][existing]
    target = raw
    for part in path[:-1]:
        child = target.setdefault(part, {})
        if not isinstance(child, dict):
            raise ProfileError("--set", key, f"{part} is not a mapping", "set a key under a mapping section")
        target = child
    target[path[-1]] = value
    origins[key] = f"--set {assignment.split('=', 1)[0]}=…"
