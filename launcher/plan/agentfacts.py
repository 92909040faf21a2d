"""What the agent checks stand on: the model's config and the chat template vLLM would use, read from files.

The template is found where vLLM finds it when a request carries tools: the `--chat-template` flag (a file,
or the template itself), else the tokenizer's files in the model directory or the Hugging Face cache
(`chat_template.jinja`, else `tokenizer_config.json`'s `chat_template`, a string or a list of
{name, template} of which "tool_use" is taken, else "default"). Nothing is downloaded: a model that is not
here has no known template, and nothing is said about it. Whether the template renders `tools` is read with
jinja2 when it is importable (it comes with vLLM's transformers; the launcher does not depend on it), else
from its text.
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.config.profile import Profile
from launcher.plan.modelinfo import model_directory

_TOOLS_WORD = re.compile(r"\btools\b")
_JINJA_CHARS = "{}\n"  # vLLM's test for a --chat-template value that is the template itself (chat_utils.py)


@dataclass(frozen=True, slots=True)
class ChatTemplate:
    """The template vLLM would render a request with tools through, and where it was read."""

    source: str
    text: str
    renders_tools: bool


@dataclass(frozen=True, slots=True)
class AgentFacts:
    """The model's config, its chat template where its files are here, and the parser names of the vLLM."""

    config: Mapping[str, Any] | None  # config.json (or the shipped copy); None when none was found
    template: ChatTemplate | None  # None: not found here (nothing is then said about it)
    vllm_version: str  # the version whose parser names apply (the flag list's)
    tool_choices: tuple[str, ...] | None = None  # --tool-call-parser's choices in that flag list
    template_note: str | None = None  # why a template that should be there could not be read


def renders_tools(text: str) -> bool:
    """Does the template read the `tools` variable? A reference in jinja2's syntax tree when jinja2 is here
    and parses it (comments and strings do not count), else the word `tools` anywhere in it."""
    try:
        jinja2: Any = importlib.import_module("jinja2")
    except ImportError:
        return _TOOLS_WORD.search(text) is not None
    try:
        tree = jinja2.Environment(extensions=["jinja2.ext.loopcontrols"]).parse(text)
    except jinja2.TemplateSyntaxError:  # tags of transformers' own ({% generation %}): judge by the text
        return _TOOLS_WORD.search(text) is not None
    return any(node.name == "tools" and node.ctx == "load" for node in tree.find_all(jinja2.nodes.Name))


def agent_facts(profile: Profile, *, config: Mapping[str, Any] | None, environ: Mapping[str, str],
                vllm_version: str, tool_choices: tuple[str, ...] | None = None) -> AgentFacts:
    """The facts for `profile`'s model; `config` is its config.json as plan already found it (or None)."""
    env = {**environ, **profile.env}  # the model is looked up where vLLM will look: with the profile's HF_HOME
    tokenizer = profile.flag("tokenizer")
    directory = model_directory(str(tokenizer) if isinstance(tokenizer, str) else profile.model, env)
    try:
        template = _flag_template(profile.flag("chat-template"), directory) or _model_template(directory)
    except _Unreadable as exc:
        return AgentFacts(config, None, vllm_version, tool_choices, str(exc))
    return AgentFacts(config, template, vllm_version, tool_choices)


class _Unreadable(Exception):
    pass


def _template(source: str, text: str) -> ChatTemplate:
    return ChatTemplate(source, text, renders_tools(text))


def _flag_template(value: object, directory: Path | None) -> ChatTemplate | None:
    if not isinstance(value, str) or not value:
        return None
    path = Path(value)
    if path.is_file():
        try:
            return _template(f"--chat-template {value}", path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise _Unreadable(f"--chat-template {value}: cannot read it ({exc})") from None
    if any(c in value for c in _JINJA_CHARS):
        return _template("--chat-template (inline)", value)
    named = _named_templates(directory)
    if value in named:  # a name of the tokenizer's own templates (vLLM 0.32 resolves these)
        return _template(f"--chat-template {value}", named[value])
    return None  # a built-in template of vLLM's or a path on another machine: not checked here


def _model_template(directory: Path | None) -> ChatTemplate | None:
    if directory is None:
        return None
    jinja = directory / "chat_template.jinja"
    if jinja.is_file():
        try:
            return _template(str(jinja), jinja.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise _Unreadable(f"{jinja}: cannot read it ({exc})") from None
    found = _tokenizer_template(directory)
    if found is None:
        return None
    source = str(directory / "tokenizer_config.json")
    if isinstance(found, str):
        return _template(source, found)
    named = _by_name(found)
    for name in ("tool_use", "default"):  # transformers' choice when the request carries tools
        if name in named:
            return _template(f"{source} ({name})", named[name])
    return None


def _tokenizer_template(directory: Path) -> str | list[Any] | None:
    path = directory / "tokenizer_config.json"
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise _Unreadable(f"{path}: cannot read it as JSON ({exc}); the chat template was not checked") from None
    template = data.get("chat_template") if isinstance(data, dict) else None
    return template if isinstance(template, str | list) else None


def _named_templates(directory: Path | None) -> dict[str, str]:
    try:
        found = _tokenizer_template(directory) if directory is not None else None
    except _Unreadable:
        return {}
    return _by_name(found) if isinstance(found, list) else {}


def _by_name(templates: list[Any]) -> dict[str, str]:
    return {str(t.get("name")): str(t.get("template")) for t in templates if isinstance(t, Mapping)}
