"""Two `vllm serve` command lines compared flag by flag: what the running server was started with against
what the profile renders now.

Pure: argv in, differences out. Whatever comes before `serve` (the interpreter of vLLM's entry script, a
container runtime's own flags) is not compared; after it, the model and every `--flag` with its values.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

MODEL = "model"  # the positional after `serve`, compared like a flag
SWITCH = "on"  # how a flag given without a value reads


@dataclass(frozen=True, slots=True)
class FlagDrift:
    """One flag whose value differs; None on a side that does not pass the flag at all."""

    flag: str
    running: str | None
    profile: str | None

    def to_dict(self) -> dict[str, str | None]:
        return {"flag": self.flag, "running": self.running, "profile": self.profile}


def serve_flags(argv: Sequence[str]) -> dict[str, str] | None:
    """flag → its value as written (several words joined by a space, a repeated flag's values too); None when
    `argv` holds no `serve`, so there is nothing to compare."""
    try:
        start = list(argv).index("serve") + 1
    except ValueError:
        return None
    words = list(argv[start:])
    flags: dict[str, list[str]] = {}
    current: str | None = None
    if words and not words[0].startswith("--"):
        flags[MODEL] = [words.pop(0)]
    for word in words:
        if word.startswith("--") and len(word) > 2:
            name, eq, value = word[2:].partition("=")
            current = name
            values = flags.setdefault(name, [])
            if eq:
                values.append(value)
        elif current is not None:
            flags[current].append(word)
    return {name: " ".join(values) if values else SWITCH for name, values in flags.items()}


def argv_drift(running: Sequence[str], profile: Sequence[str], ignore: Iterable[str] = ()) -> list[FlagDrift] | None:
    """Each flag that differs between the two command lines (the profile's order, then flags only the running
    one has); None when either is not a `vllm serve` command line. `ignore`: flags not to compare."""
    ran, wanted = serve_flags(running), serve_flags(profile)
    if ran is None or wanted is None:
        return None
    skip = set(ignore)
    names = [*wanted, *(name for name in ran if name not in wanted)]
    return [FlagDrift(name, ran.get(name), wanted.get(name)) for name in names
            if name not in skip and ran.get(name) != wanted.get(name)]
