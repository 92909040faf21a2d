"""Typed reads of a raw YAML document, each failure one line naming the file, the line, the key and the fix."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from launcher.config.profile import SecretRef
from launcher.config.setting_kinds import check
from launcher.config.settings import keys_of, setting
from launcher.errors import ProfileError
from launcher.units import BadValue, true_or_false


class KeyReader:
    """Reads typed values out of the raw document; every bad value is a ProfileError naming file:line and key."""

    def __init__(self, source: str, lines: Mapping[str, int], origins: Mapping[str, str]) -> None:
        self.source = source
        self.lines = dict(lines)
        self.origins = dict(origins)

    def fail(self, key: str, problem: str, fix: str) -> ProfileError:
        origin = self.origins.get(key, "")
        if origin.startswith("--set"):
            return ProfileError("--set", key, problem, fix)
        line = self.lines.get(key)
        if line is None and "." in key:  # fall back to the enclosing section's line
            line = self.lines.get(key.rsplit(".", 1)[0])
        return ProfileError(self.source, key, problem, fix, line)

    def setting(self, data: Mapping[str, Any], name: str) -> Any:
        """`launcher.<name>` read out of its section `data` as its table entry declares (config/settings.py)."""
        item = setting(name)
        try:
            return check(item, data.get(item.leaf, item.default))
        except BadValue as exc:
            raise self.fail(item.key, exc.problem, exc.fix or item.fix) from None

    def section(self, data: Mapping[str, Any], section: str) -> dict[str, Any]:
        """`launcher.<section>` as a mapping holding only its declared keys (empty when absent)."""
        key = f"launcher.{section}" if section else "launcher"
        found = self.mapping(data.get(section) if section else data, key)
        self.known_keys(found, keys_of(section), f"{key}.")
        return found

    def mapping(self, value: Any, key: str) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(key, f"expected a mapping, got {type_name(value)}",
                            f"write {key}: as indented `name: value` lines")
        return value

    def known_keys(self, data: Mapping[str, Any], allowed: Sequence[str], prefix: str) -> None:
        for key in data:
            if key not in allowed:
                close = closest(str(key), allowed)
                hint = f"did you mean {close}?" if close else f"allowed keys are {', '.join(allowed)}"
                raise self.fail(f"{prefix}{key}", "unknown key", hint)

    def boolean(self, data: Mapping[str, Any], name: str, key: str, default: bool) -> bool:
        try:
            return true_or_false(data.get(name, default))
        except BadValue as exc:
            raise self.fail(key, exc.problem, f"write {name}: true or {name}: false") from None

    def secret(self, value: Any, key: str, env_hint: str) -> SecretRef | None:
        if value is None:
            return None
        fix = (f"write {key}: {{env: {env_hint}}} or {key}: {{file: $CREDENTIALS_DIRECTORY/{key}}} (a systemd credential); "
               "the launcher hands it to vLLM through the environment, never on the command line")
        if isinstance(value, str):
            raise self.fail(key, "a secret is written in plain text", fix)
        if not isinstance(value, dict) or len(value) != 1:
            raise self.fail(key, "expected {env: NAME} or {file: PATH}", fix)
        (kind, ref), = value.items()
        if kind not in ("env", "file") or not isinstance(ref, str) or not ref:
            raise self.fail(key, "expected {env: NAME} or {file: PATH}", fix)
        return SecretRef(kind, ref)


def closest(word: str, options: Sequence[str]) -> str | None:
    import difflib

    match = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return match[0] if match else None


def type_name(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "text", bool: "true/false", int: "a number",
            float: "a number", type(None): "nothing"}.get(type(value), type(value).__name__)
