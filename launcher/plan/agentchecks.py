"""Will a coding agent work? The tool-call and reasoning flags against the model family, its chat template and
the parser names of this vLLM.

Pure: the model's config and chat template are read by plan/agentfacts.py. Without
`--enable-auto-tool-choice` and the parser that reads the model's markup, an agent's tool calls come back as
prose in `content`; without a reasoning parser a thinking model's reasoning lands there too. Only what stops
vLLM from starting is an error (exit 78); the rest starts but fails the agent, and is a warning.
"""

from __future__ import annotations

from collections.abc import Iterable

from launcher.config.profile import Profile
from launcher.plan.agentfacts import AgentFacts
from launcher.plan.problems import ERROR, WARNING, Findings, Problem
from launcher.vllm.agent_parsers import Family, family_for, registry


def _names(names: Iterable[str]) -> str:
    return ", ".join(sorted(names))


def agent_problems(profile: Profile, facts: AgentFacts) -> tuple[Problem, ...]:
    """Every agent problem of `profile` given what is known of its model (`facts`)."""
    out = Findings()
    add = out.add
    tool = profile.flag("tool-call-parser")
    tool = str(tool) if isinstance(tool, str) and tool else None
    auto = profile.flag("enable-auto-tool-choice") is True
    reasoning = profile.flag("reasoning-parser")
    reasoning = str(reasoning) if isinstance(reasoning, str) and reasoning else None
    template = facts.template.text if facts.template is not None else None
    family = family_for(profile.model, facts.config, template)
    known = registry(facts.vllm_version)
    what = f"{profile.model} ({family.name})" if family else profile.model
    suggestion = f"vllm.tool-call-parser: {family.tool_parser}" if family and family.tool_parser else \
        "vllm.tool-call-parser (the one for the model's family: docs/agent-parsers.md)"

    # Parser names this vLLM does not have: vLLM exits at start (launcher.py validate_api_server_args).
    valid_tools = facts.tool_choices or (tuple(known.tool) if known else None)
    tool_known = tool is None or "tool-parser-plugin" in profile.vllm or valid_tools is None or tool in valid_tools
    if not tool_known:
        fits = family.tool_parser if family and family.tool_parser in (valid_tools or ()) else None
        add(ERROR, "tool_parser_unknown", f"vLLM {facts.vllm_version} has no tool-call-parser {tool!r}: it refuses "
            "to start", (f"set vllm.tool-call-parser: {fits}; valid: " if fits else
                         "set vllm.tool-call-parser to one of: ") + _names(valid_tools or ()))
    if reasoning and "reasoning-parser-plugin" not in profile.vllm and known and reasoning not in known.reasoning:
        hint = f"vllm.reasoning-parser: {family.reasoning_parser}; valid: " if family and family.reasoning_parser \
            else "vllm.reasoning-parser to one of: "
        add(ERROR, "reasoning_parser_unknown", f"vLLM {facts.vllm_version} has no reasoning-parser {reasoning!r}: "
            "it refuses to start", f"set {hint}{_names(known.reasoning)}")

    if auto and tool is None:
        add(ERROR, "tool_parser_missing", "enable-auto-tool-choice without tool-call-parser: vLLM refuses to start "
            "(\"--enable-auto-tool-choice requires --tool-call-parser\")", f"set {suggestion}")
    if tool is not None and not auto:
        add(WARNING, "auto_tool_choice_off", f"tool-call-parser {tool} without enable-auto-tool-choice: the parser "
            "is never used, and every request with tool_choice \"auto\" (what coding agents send) is refused with "
            "HTTP 400 (\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set)",
            "set vllm.enable-auto-tool-choice: true")
    if tool is not None and tool_known and "tool-parser-plugin" not in profile.vllm:
        _mismatch(tool, family, what, out)
    if auto and tool is not None and facts.template is not None and not facts.template.renders_tools:
        add(WARNING, "chat_template_no_tools", f"the chat template ({facts.template.source}) never renders `tools`: "
            "the model is never shown the tool definitions an agent sends, so it cannot call them",
            "set vllm.chat-template to a template that renders tools (the model card's, or one of vLLM's "
            "examples/tool_chat_template_*.jinja)")
    if family and family.thinks and family.reasoning_parser and reasoning is None \
            and (known is None or family.reasoning_parser in known.reasoning):
        add(WARNING, "reasoning_parser_missing", f"{what} thinks before it answers: without reasoning-parser its "
            "thinking text lands in `content`, the text agents act on",
            f"set vllm.reasoning-parser: {family.reasoning_parser}")
    return tuple(out.problems)


def _mismatch(tool: str, family: Family | None, what: str, out: Findings) -> None:
    """A parser that does not read what the model writes: every tool call comes back as text."""
    if family is None or not family.tool_parsers() or tool in family.tool_parsers():
        return
    out.add(WARNING, "tool_parser_mismatch", f"tool-call-parser {tool} does not read what {what} writes "
        f"({family.markup}): its tool calls would come back as plain text in `content`",
        f"set vllm.tool-call-parser: {family.tool_parser}")
