"""CONTRIBUTING.md's Layout is the package's map: it names every module under launcher/ (and none that is gone), and
its layering sentence names every stage folder of the architecture test."""

from __future__ import annotations

import re

from tests.conftest import ROOT
from tests.helpers.layers import LAYERS, PACKAGE

NAME = re.compile(r"^(\w+\.py|\w+/)$")


def layout() -> str:
    """The Layout section of CONTRIBUTING.md, up to the next section."""
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    return text.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]


def mapped_modules() -> set[str]:
    """The modules the block under `launcher/` names, as paths inside the package (`cli.py`, `run/state.py`): the
    leading words of a line that end in .py (or / for a folder, whose lines follow one level deeper)."""
    lines = layout().split("```\n", 2)[1].splitlines()
    assert lines[0] == "launcher/", "the Layout block starts with launcher/"
    found: set[str] = set()
    folder = ""
    for line in lines[1:]:
        if not line.startswith("  "):
            break  # configs/, scripts/, tests/: the package's part ends
        deep = line.startswith("    ")
        for word in line.split():
            if not NAME.match(word):
                break  # the description begins
            if word.endswith("/"):
                folder = word
            else:
                found.add(f"{folder}{word}" if deep else word)
    return found


def test_the_layout_names_every_module() -> None:
    modules = {p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py") if p.name != "__init__.py"}
    mapped = mapped_modules()
    assert (set(), set()) == (modules - mapped, mapped - modules), \
        "CONTRIBUTING.md's Layout: (modules it does not name, names of modules that do not exist)"


def test_the_layering_sentence_names_every_stage() -> None:
    sentence = next(line for line in layout().splitlines() if line.startswith("ground floor ←"))
    missing = [stage for stage in LAYERS if stage != "ground" and f"`{stage}`" not in sentence]
    assert not missing, f"CONTRIBUTING.md's layering sentence misses {missing}"
