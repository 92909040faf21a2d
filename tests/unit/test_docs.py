"""The docs hold together: every relative link resolves (the file, and the heading an `#anchor` names),
and every verb of the CLI has its line in the README and its section in docs/commands.md."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from launcher.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", ROOT / "CONTRIBUTING.md", *(ROOT / "docs").rglob("*.md")])
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
CODE_SPAN = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)  # http:, https:, mailto:


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks: a link or heading inside a fence is only an example."""
    lines, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append((number, line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (backticks too), spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for _, line in prose_lines(page.read_text(encoding="utf-8")):
        match = HEADING.match(line)
        if match:
            base = slug(match.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(page: Path) -> list[str]:
    """Each relative link of `page` whose file, or heading, does not exist: 'page:line: target (why)'."""
    problems = []
    for number, line in prose_lines(page.read_text(encoding="utf-8")):
        for target in LINK.findall(CODE_SPAN.sub(lambda m: "x" * len(m.group()), line)):
            if EXTERNAL.match(target):
                continue
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(ROOT) if page.is_relative_to(ROOT) else page}:{number}: {target}"
            if not resolved.exists():
                problems.append(f"{where} (no such file)")
            elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                problems.append(f"{where} (no heading #{anchor} in {resolved.name})")
    return problems


def cli_verbs(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


VERBS = cli_verbs(build_parser())


def test_the_pages_and_verbs_are_found() -> None:
    """The checks below are only as good as what they walk over."""
    names = {page.relative_to(ROOT).as_posix() for page in PAGES}
    assert {"README.md", "CONTRIBUTING.md", "docs/commands.md", "docs/failures.md"} <= names
    assert {"up", "plan", "preflight", "diagnose", "status", "down", "render", "bench"} <= set(VERBS)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken_links(page) == []


def test_a_broken_link_or_anchor_is_reported(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other page\n\n## The `up` verb\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text("# Page\n\n[ok](other.md#the-up-verb) [self](#page) [web](https://example.com)\n"
                    "[gone](missing.md) [no heading](other.md#nowhere)\n\n```\n[in a fence](nowhere.md)\n```\n",
                    encoding="utf-8")
    problems = broken_links(page)
    assert [p.split(": ", 1)[1] for p in problems] == [
        "missing.md (no such file)", "other.md#nowhere (no heading #nowhere in other.md)"]


def test_slugs_are_githubs() -> None:
    assert slug("`up`") == "up"
    assert slug("Across nodes (vLLM's multi-node engine)") == "across-nodes-vllms-multi-node-engine"
    assert slug("State, locks, last-known-good") == "state-locks-last-known-good"


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_every_verb_has_its_section_in_commands_md(verb: str) -> None:
    text = (ROOT / "docs" / "commands.md").read_text(encoding="utf-8")
    sections = [line for _, line in prose_lines(text) if line.startswith("## ")]
    assert any(f"`{verb}`" in line for line in sections), f"docs/commands.md has no '## `{verb}`' section"
    for kind in cli_verbs(VERBS[verb]):  # render lws, render systemd
        assert f"vllm-launch {verb} {kind}" in text, f"docs/commands.md never shows `vllm-launch {verb} {kind}`"


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_every_verb_has_its_line_with_an_example_in_the_readme(verb: str) -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert any(f"`{verb}`" in line and f"vllm-launch {verb} " in line for line in lines), \
        f"README.md has no line for `{verb}` with an example (`vllm-launch {verb} …`)"
