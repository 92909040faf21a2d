"""A profile's bytes to a YAML document, with a bound on everything a hostile file could make expensive.

A profile may come from anyone who can write /etc/vllm-launch, a ConfigMap or a pod's volume, and the
daemon re-reads it on every SIGHUP while it serves. So: at most MAX_BYTES, strict UTF-8 (the byte
offset of the first bad byte in the message), nesting at most MAX_DEPTH deep, and at most MAX_NODES
values once every alias is expanded (a "billion laughs" of anchors costs nothing to write and an
exponential walk to check). The bounds are checked while the document is composed, before anything
is built from it, so a bomb is refused in microseconds. Every failure is one `ProfileError` line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from launcher import safefile
from launcher.errors import ProfileError

MAX_BYTES = 1024 * 1024  # the largest shipped profile is about 2 KiB
MAX_DEPTH = 32  # a profile nests 4 deep (launcher.ladder.rungs: [...])
MAX_NODES = 20_000  # values after alias expansion


def read_text(path: str | Path) -> str:
    """The profile file's text: a regular file (a link to one is followed: a ConfigMap is made of links),
    opened without waiting (a FIFO there would wedge a reload), at most MAX_BYTES, strict UTF-8."""
    path = Path(path)
    try:
        data = safefile.read_bytes(path, MAX_BYTES, follow=True)
    except safefile.Missing:
        raise ProfileError(str(path), "", "no such profile", "check the path (profiles usually live in configs/ "
                           "or /etc/vllm-launch/)") from None
    except safefile.TooLarge:
        raise ProfileError(str(path), "", f"the profile is larger than {MAX_BYTES // 1024} KiB",
                           "a profile is a few dozen lines of YAML: check that this is the right file") from None
    except safefile.Unreadable as exc:
        if path.is_dir():
            raise ProfileError(str(path), "", "is a directory, not a profile", "name the .yaml file") from None
        fix = "check the file's permissions" if exc.problem.startswith("cannot") else \
            "point at the profile's YAML file itself"
        raise ProfileError(str(path), "", exc.problem, fix) from None
    return decode(data, str(path))


def decode(data: bytes, source: str) -> str:
    """Strict UTF-8 (a leading BOM allowed); the first bad byte named by its offset and line."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ProfileError(source, "", f"byte 0x{data[exc.start]:02x} at offset {exc.start} is not UTF-8",
                           "save the file as UTF-8 (e.g. iconv -f latin1 -t utf-8)", line) from None


class _GuardedLoader(yaml.SafeLoader):
    """SafeLoader that counts depth and expanded size while composing (the C loader cannot be hooked)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._sizes: dict[int, int] = {}  # id(node) → values in it with aliases expanded

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
        alias = self.check_event(yaml.AliasEvent)
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise yaml.composer.ComposerError(None, None, f"nesting deeper than {MAX_DEPTH} levels", mark)
        node = super().compose_node(parent, index)
        self._depth -= 1
        if node is None:  # never, for a well-formed event stream; nothing to count
            return node
        if alias:
            if id(node) not in self._sizes:
                raise yaml.composer.ComposerError(None, None, "an alias refers to the node that holds it", mark)
            size = self._sizes[id(node)]
        else:
            size = 1 + sum(self._sizes.get(id(child), 1) for child in _children(node))
            self._sizes[id(node)] = size
        if size > MAX_NODES:
            raise yaml.composer.ComposerError(None, None, f"more than {MAX_NODES:,} values once its aliases "
                                              "are expanded", mark)
        return node


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def parse(text: str, source: str) -> tuple[Any, yaml.Node | None]:
    """The document built from `text` and its node tree (the lines of its keys), within the bounds."""
    loader = _GuardedLoader(text)
    try:
        node = loader.get_single_node()
        return (loader.construct_document(node) if node is not None else None), node
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        fix = ("write the values out instead of nesting or repeating them" if exc.problem and
               ("nesting" in exc.problem or "alias" in exc.problem) else "fix the indentation or quoting on that line")
        raise ProfileError(source, "", f"malformed YAML ({exc.problem})", fix, line) from None
    except yaml.YAMLError as exc:
        raise ProfileError(source, "", f"malformed YAML ({' '.join(str(exc).split())})", "fix the YAML syntax") from None
    except (ValueError, TypeError, AttributeError, LookupError, ArithmeticError) as exc:
        # PyYAML's constructors fail like this on some explicit tags (`!!timestamp` on a non-date).
        raise ProfileError(source, "", f"a value cannot be built ({type(exc).__name__}: {' '.join(str(exc).split())})",
                           "remove the explicit !!tag, or write the value as plain text") from None
    finally:
        loader.dispose()


def parse_mapping(text: str, source: str) -> dict[str, Any]:
    """A document that must be a mapping (what the installer and `render` rewrite)."""
    data, _ = parse(text, source)
    if not isinstance(data, dict):
        raise ProfileError(source, "", "a profile must be a mapping of keys (model:, vllm:, launcher:)",
                           "start the file with `model: <hub id or path>`", 1)
    return data
