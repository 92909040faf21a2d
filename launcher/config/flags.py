"""What `vllm serve` accepts: its flags, which are negatable, and their choices.

The truth is the installed vLLM's own `vllm serve --help=all` (about 10 s, so
cached per vLLM version). Without an installed vLLM, the launcher uses the list
it ships, parsed from the help of the newest vLLM we have captured.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from types import MappingProxyType
from typing import TYPE_CHECKING

from launcher import safefile

if TYPE_CHECKING:
    from launcher.config.profile import FlagValue, Profile

SHIPPED_VERSION = "0.32.0"

# Flags that old command lines still carry: the version that removed them, and what to do.
REMOVED_FLAGS: Mapping[str, tuple[str, str]] = MappingProxyType({
    "swap-space": ("0.18.0", "delete it: the V1 engine never used CPU swap space"),
    "calculate-kv-scales": ("0.28.0", "delete it: fp8 KV scales come from the checkpoint or default to 1.0"),
    "disable-log-requests": ("0.17.0", "delete it: request logging is off by default (enable-log-requests: true turns it on)"),
})

MIN_FLAGS = 20  # fewer is not vLLM's help (an error message, a truncated cache); vLLM 0.32 has 300+
_FLAG_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_OPTION_LINE = re.compile(r"^  (-[^\s].*)$")
_CHOICES = re.compile(r"^\{([^}]*)\}")


@dataclass(frozen=True, slots=True)
class FlagSpec:
    """One `vllm serve` option as its help describes it."""

    name: str  # canonical long name without dashes, e.g. "max-model-len"
    takes_value: bool
    negatable: bool  # `--no-<name>` exists
    choices: tuple[str, ...] | None = None
    multiple: bool = False  # nargs: `--flag A [A ...]`, the only kind a list value may become


@dataclass(frozen=True, slots=True)
class FlagCatalog:
    """The flags of one vLLM version, and where that knowledge came from."""

    version: str
    source: str  # "installed" or "shipped"
    flags: Mapping[str, FlagSpec]
    aliases: Mapping[str, str] = field(default_factory=dict)  # other spellings → canonical name

    def lookup(self, name: str) -> FlagSpec | None:
        if name.startswith("no-") and name[3:] in self.flags and self.flags[name[3:]].negatable:
            return self.flags[name[3:]]
        canonical = self.aliases.get(name, name)
        return self.flags.get(canonical)

    def closest(self, name: str) -> str | None:
        candidates = list(self.flags) + list(self.aliases)
        match = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
        return match[0] if match else None

    def to_json(self) -> str:
        return json.dumps({
            "version": self.version,
            "flags": {n: {"takes_value": s.takes_value, "negatable": s.negatable, "choices": s.choices,
                          "multiple": s.multiple}
                      for n, s in self.flags.items()},
            "aliases": dict(self.aliases),
        }, indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str, source: str, origin: str = "the flag list") -> FlagCatalog:
        """The list to_json wrote, checked field by field (a cache is in a directory others may write): anything
        else is Unreadable, naming `origin` and the first field that is wrong."""
        data = safefile.loads_json(text, origin, max_depth=4)
        flag_items, aliases, version = data.get("flags"), data.get("aliases"), data.get("version")
        if not isinstance(version, str) or not isinstance(flag_items, dict) or not isinstance(aliases, dict):
            raise safefile.Unreadable(origin, "needs a version (text), flags and aliases (objects)")
        if len(flag_items) < MIN_FLAGS:
            raise safefile.Unreadable(origin, f"lists {len(flag_items)} flags; vLLM has hundreds")
        found = {name: _spec(name, spec, origin) for name, spec in flag_items.items()}
        for alias, canonical in aliases.items():
            if not isinstance(canonical, str) or canonical not in found or not _FLAG_NAME.fullmatch(alias):
                raise safefile.Unreadable(origin, f"alias {str(alias)[:80]!r} names no flag of the list")
        return cls(version, source, MappingProxyType(found), MappingProxyType(dict(aliases)))


def _spec(name: str, spec: object, origin: str) -> FlagSpec:
    """One flag of a list to_json wrote; a field of another type is Unreadable (an older launcher's list
    without "multiple" too: the help is read again)."""
    if not _FLAG_NAME.fullmatch(name) or not isinstance(spec, dict):
        raise safefile.Unreadable(origin, f"flag {name[:80]!r} is not a flag name with an object")
    takes_value, negatable, multiple, choices = (spec.get(k) for k in ("takes_value", "negatable", "multiple",
                                                                       "choices"))
    if not all(isinstance(v, bool) for v in (takes_value, negatable, multiple)):
        raise safefile.Unreadable(origin, f"flag {name!r}: takes_value, negatable and multiple must be true or false")
    if choices is not None and not (isinstance(choices, list) and all(isinstance(c, str) for c in choices)):
        raise safefile.Unreadable(origin, f"flag {name!r}: choices must be a list of text or null")
    return FlagSpec(name, takes_value is True, negatable is True, tuple(choices) if choices else None, multiple is True)


def parse_help(text: str, version: str, source: str) -> FlagCatalog:
    """Read the option lines of `vllm serve --help=all` (argparse format)."""
    flags: dict[str, FlagSpec] = {}
    aliases: dict[str, str] = {}
    for raw in text.splitlines():
        match = _OPTION_LINE.match(raw)
        if not match:
            continue
        # The description may follow on the same line after two or more spaces.
        head = re.split(r"\s{2,}", match.group(1), maxsplit=1)[0]
        parts = re.split(r", (?=-)", head)
        names: list[str] = []
        takes_value = multiple = False
        choices: tuple[str, ...] | None = None
        for part in parts:
            token, _, rest = part.partition(" ")
            names.append(token)
            if rest:
                takes_value = True
                multiple = multiple or "..." in rest
                found = _CHOICES.match(rest)
                if found:
                    choices = tuple(c for c in found.group(1).split(",") if c)
        longs = [n[2:] for n in names if n.startswith("--")]
        if not longs or longs[0] == "help":
            continue
        canonical = longs[0]
        negatable = f"no-{canonical}" in longs
        flags[canonical] = FlagSpec(canonical, takes_value, negatable, choices, multiple)
        for other in names:
            other_name = other.lstrip("-")
            if other_name not in (canonical, f"no-{canonical}"):
                aliases[other_name] = canonical
    return FlagCatalog(version, source, MappingProxyType(flags), MappingProxyType(aliases))


def shipped_catalog() -> FlagCatalog:
    """The flag list of vLLM SHIPPED_VERSION that ships with the launcher."""
    text = resources.files("launcher").joinpath("data", f"vllm-flags-{SHIPPED_VERSION}.json").read_text()
    return FlagCatalog.from_json(text, source="shipped", origin=f"the shipped vllm-flags-{SHIPPED_VERSION}.json")


def check_profile_flags(profile: Profile, catalog: FlagCatalog) -> None:
    """Refuse flags this vLLM does not know, naming the closest one, and bad choices."""
    for name, value in profile.vllm.items():
        key = f"vllm.{name}"
        if name in REMOVED_FLAGS and catalog.lookup(name) is None:
            since, fix = REMOVED_FLAGS[name]
            raise profile.error(key, f"{name} was removed in vLLM {since} (this vLLM is {catalog.version})", fix)
        check_flag(name, value, catalog, _failing(profile.error, key),
                   any_choice=name == "tool-call-parser" and "tool-parser-plugin" in profile.vllm)


def _failing(error: Callable[[str, str, str], Exception], key: str) -> Callable[[str, str], Exception]:
    return lambda problem, fix: error(key, problem, fix)


def check_flag(name: str, value: FlagValue, catalog: FlagCatalog, fail: Callable[[str, str], Exception],
               any_choice: bool = False) -> None:
    """One flag and its value as this vLLM parses them: a known flag, an on/off flag given true or false,
    a list only where vLLM takes several values, a valid choice. `fail(problem, fix)` makes the error."""
    spec = catalog.lookup(name)
    if spec is None:
        close = catalog.closest(name)
        hint = f"did you mean {close}?" if close else "see `vllm serve --help=all` for the flags"
        raise fail(f"unknown vllm serve flag --{name} (vLLM {catalog.version}, {catalog.source} flag list)", hint)
    if not spec.takes_value and not isinstance(value, bool):
        raise fail(f"--{name} is an on/off flag, got {value!r}", f"write {name}: true (or false)")
    if isinstance(value, tuple) and not spec.multiple:
        raise fail(f"--{name} takes one value, not a list", f"write {name}: <value>")
    if spec.choices and not any_choice:
        for item in value if isinstance(value, tuple) else (value,):
            if isinstance(item, str) and item not in spec.choices:
                closest = difflib.get_close_matches(item, spec.choices, n=1, cutoff=0.6)
                hint = f"did you mean {closest[0]}? " if closest else ""
                raise fail(f"{item!r} is not a valid --{name} for vLLM {catalog.version}",
                           f"{hint}valid: {', '.join(spec.choices)}")
