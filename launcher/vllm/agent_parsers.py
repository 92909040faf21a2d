"""Which tool-call and reasoning parser each model family needs, and the parser names each vLLM has.

A coding agent works only when vLLM turns the model's tool-call markup into `tool_calls`: with the wrong
parser (or none) the calls come back as prose in `content`, and without a reasoning parser a thinking
model's reasoning lands in `content` too. The one table of families lives here; `docs/agent-parsers.md`
is generated from it (`scripts/agent_parsers_docs.py`) and the plan checks read it (plan/agentchecks.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from launcher.vllm.versions import parse_version

# The registries of vLLM 0.32.0, copied from its source: parser name → module.
#   vllm/tool_parsers/__init__.py  _TOOL_PARSERS_TO_REGISTER       (modules under vllm/tool_parsers/)
#   vllm/reasoning/__init__.py     _REASONING_PARSERS_TO_REGISTER  (modules under vllm/reasoning/)
_TOOL_PARSERS_0_32 = {
    "dots": "dots_tool_parser", "deepseek_v3": "deepseekv3_tool_parser", "deepseek_v31": "deepseekv31_tool_parser",
    "deepseek_v32": "deepseekv32_engine_tool_parser", "deepseek_v4": "deepseekv4_engine_tool_parser",
    "deepseek_v41": "deepseekv41_engine_tool_parser", "cohere_command3": "cohere_command_tool_parser",
    "cohere_command4": "cohere_command_tool_parser", "ernie45": "ernie45_tool_parser",
    "glm45": "glm47_moe_tool_parser", "glm47": "glm47_moe_tool_parser", "ling3": "ling3_tool_parser",
    "granite-20b-fc": "granite_20b_fc_tool_parser", "granite": "granite_engine_tool_parser",
    "granite4": "granite4_tool_parser", "hermes": "hermes_tool_parser", "hf": "response_template_tool_parser",
    "poolside_v1": "poolside_v1_tool_parser", "hunyuan_a13b": "hunyuan_a13b_tool_parser",
    "hy_v3": "hy_v3_tool_parser", "hy_v4": "hy_v4_tool_parser", "internlm": "internlm2_tool_parser",
    "jamba": "jamba_tool_parser", "lfm2": "lfm2_tool_parser", "kimi_k2": "kimi_k2_tool_parser",
    "kimi_k3": "kimi_k3_tool_parser", "k2_horizon": "k2_horizon_tool_parser", "llama3_json": "llama_tool_parser",
    "llama4_json": "llama_tool_parser", "llama4_pythonic": "llama4_pythonic_tool_parser",
    "longcat": "longcat_tool_parser", "mimo": "mimo_tool_parser", "minimax_m2": "minimax_m2_tool_parser",
    "minimax_m3": "minimax_m3_tool_parser", "minicpm5": "minicpm5xml_tool_parser", "mistral": "mistral_tool_parser",
    "olmo3": "olmo3_tool_parser", "plamo3": "plamo3_engine_tool_parser", "muse_glimmer": "muse_glimmer_tool_parser",
    "openai": "gptoss_tool_parser", "phi4_mini_json": "phi4mini_tool_parser", "pythonic": "pythonic_tool_parser",
    "qwen3_coder": "qwen3_engine_tool_parser", "qwen3_json": "hermes_tool_parser",
    "qwen3_xml": "qwen3_engine_tool_parser", "seed_oss": "seed_oss_engine_tool_parser", "step3": "step3_tool_parser",
    "step3p5": "step3p5_tool_parser", "inkling": "inkling_tool_parser", "xlam": "xlam_tool_parser",
    "gigachat3": "gigachat3_tool_parser", "functiongemma": "functiongemma_tool_parser",
    "gemma4": "gemma4_engine_tool_parser", "apertus": "apertus_tool_parser",
}
_REASONING_PARSERS_0_32 = {
    "deepseek_r1": "deepseek_r1_reasoning_parser", "deepseek_v3": "deepseek_v3_reasoning_parser",
    "deepseek_v4": "deepseek_v4_engine_reasoning_parser", "deepseek_v41": "deepseek_v41_engine_reasoning_parser",
    "poolside_v1": "poolside_v1_reasoning_parser", "cohere_command3": "cohere_command_reasoning_parser",
    "cohere_command4": "cohere_command_reasoning_parser", "ernie45": "ernie45_reasoning_parser",
    "gemma4": "gemma4_engine_reasoning_parser", "glm45": "glm47_moe_reasoning_parser",
    "glm47": "glm47_moe_reasoning_parser", "ling3": "ling3_reasoning_parser",
    "openai_gptoss": "gptoss_reasoning_parser", "granite": "granite_reasoning_parser",
    "granite_thinking_parser": "granite_thinking_engine_reasoning_parser",
    "hf": "response_template_reasoning_parser", "holo2": "deepseek_v3_reasoning_parser",
    "hunyuan_a13b": "hunyuan_a13b_reasoning_parser", "hy_v3": "hy_v3_reasoning_parser",
    "hy_v4": "hy_v4_reasoning_parser", "kimi_k2": "kimi_k2_reasoning_parser", "kimi_k3": "kimi_k3_reasoning_parser",
    "k2_horizon": "k2_horizon_reasoning_parser", "mimo": "mimo_engine_reasoning_parser",
    "minicpmv": "minicpmv_reasoning_parser", "minimax_m2": "minimax_m2_reasoning_parser",
    "minimax_m2_append_think": "minimax_m2_reasoning_parser", "minimax_m3": "minimax_m3_reasoning_parser",
    "mistral": "mistral_reasoning_parser", "nemotron_v3": "nemotron_v3_engine_reasoning_parser",
    "olmo3": "olmo3_reasoning_parser", "plamo3": "plamo3_engine_reasoning_parser",
    "muse_glimmer": "muse_glimmer_reasoning_parser", "qwen3": "qwen3_engine_reasoning_parser",
    "seed_oss": "seed_oss_engine_reasoning_parser", "step3": "step3_reasoning_parser",
    "step3p5": "step3p5_engine_reasoning_parser", "inkling": "inkling_reasoning_parser",
}


@dataclass(frozen=True, slots=True)
class Registry:
    """The parser names of one vLLM minor version, and where they were read."""

    version: str
    tool: Mapping[str, str]  # name → module under vllm/tool_parsers/
    reasoning: Mapping[str, str]  # name → module under vllm/reasoning/
    source: str


REGISTRIES: Mapping[tuple[int, int], Registry] = MappingProxyType({
    (0, 32): Registry("0.32.0", MappingProxyType(_TOOL_PARSERS_0_32), MappingProxyType(_REASONING_PARSERS_0_32),
                      "vllm/tool_parsers/__init__.py, vllm/reasoning/__init__.py (vLLM 0.32.0)"),
})


def registry(version: str) -> Registry | None:
    """The parser names of `version`'s minor release; None for a version whose source was not read."""
    try:
        major, minor, _ = parse_version(version)
    except ValueError:
        return None
    return REGISTRIES.get((major, minor))


@dataclass(frozen=True, slots=True)
class Family:
    """A model family and the parsers that read what it writes.

    It matches a model when `names` matches the model id, its path or config.json's `_name_or_path`; or when
    config.json's `model_type` or an `architectures` entry is in `config` (and, where `marker` is set, the chat
    template contains that text: Qwen3-Coder shares its config with Qwen3 but its template writes
    `<function=`)."""

    name: str
    names: str | None  # a regular expression, case-insensitive
    config: frozenset[str]
    tool_parser: str | None  # the one to set; None: no tool-call format vLLM reads
    markup: str  # what the model writes for a call
    same_markup: tuple[str, ...] = ()  # other names of a parser that reads the same markup
    reasoning_parser: str | None = None
    thinks: bool = False  # reasons by default (its first tokens are thinking unless the request turns it off)
    marker: str | None = None
    note: str = ""

    def tool_parsers(self) -> tuple[str, ...]:
        """Every parser name that reads this family's calls."""
        return ((self.tool_parser,) if self.tool_parser else ()) + self.same_markup


def _f(name: str, names: str | None, config: str, tool: str | None, markup: str, **rest: Any) -> Family:
    return Family(name, names, frozenset(config.split()), tool, markup, **rest)


_QWEN3 = "qwen3 qwen3_moe qwen3_next Qwen3ForCausalLM Qwen3MoeForCausalLM Qwen3NextForCausalLM"
_HERMES = "<tool_call>{\"name\": …, \"arguments\": {…}}</tool_call> (JSON)"
_QWEN_XML = "<tool_call><function=NAME><parameter=KEY>VALUE</parameter></function></tool_call> (XML)"
_THINK = "`<think>…</think>`"

# First match wins: the specific names come before the family they belong to.
FAMILIES: tuple[Family, ...] = (
    _f("Qwen3-Coder", r"qwen3[-_.]?coder", _QWEN3, "qwen3_coder", _QWEN_XML, same_markup=("qwen3_xml",),
       marker="<function=", note="no thinking mode"),
    _f("Qwen3 Thinking (2507)", r"qwen3\S*thinking", "", "hermes", _HERMES, same_markup=("qwen3_json",),
       reasoning_parser="qwen3", thinks=True, note=f"always thinks: {_THINK}"),
    _f("Qwen3 Instruct (2507, Next)", r"qwen3\S*instruct", "", "hermes", _HERMES, same_markup=("qwen3_json",),
       note="no thinking mode"),
    _f("Qwen3", r"qwen3", _QWEN3, "hermes", _HERMES, same_markup=("qwen3_json",), reasoning_parser="qwen3",
       thinks=True, note=f"thinks unless the request sets enable_thinking false: {_THINK}"),
    _f("QwQ", r"qwq", "", "hermes", _HERMES, same_markup=("qwen3_json",), reasoning_parser="deepseek_r1",
       thinks=True, note=_THINK),
    _f("DeepSeek-R1 distills", r"deepseek-r1-distill", "", None, "no tool-call format of its own",
       reasoning_parser="deepseek_r1", thinks=True, note=_THINK),
    _f("Qwen2.5 / Qwen2", r"qwen2", "qwen2 qwen2_moe Qwen2ForCausalLM Qwen2MoeForCausalLM", "hermes", _HERMES,
       same_markup=("qwen3_json",)),
    _f("Hermes (Nous)", r"hermes", "", "hermes", _HERMES, same_markup=("qwen3_json",)),
    _f("Kimi K2 Thinking", r"kimi[-_]?k2\S*thinking", "", "kimi_k2",
       "<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0<|tool_call_argument_begin|>{…}",
       reasoning_parser="kimi_k2", thinks=True),
    _f("Kimi K2", r"kimi[-_]?k2", "kimi_k2", "kimi_k2",
       "<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0<|tool_call_argument_begin|>{…}"),
    _f("DeepSeek-R1", r"deepseek-r1", "", "deepseek_v3", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>…",
       reasoning_parser="deepseek_r1", thinks=True, note=_THINK),
    _f("DeepSeek V3.2", r"deepseek-v3\.2", "", "deepseek_v32", "<｜DSML｜function_calls>…",
       reasoning_parser="deepseek_v3", note="thinking is opt-in per request"),
    _f("DeepSeek V3.1", r"deepseek-v3\.1", "", "deepseek_v31", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{…}",
       reasoning_parser="deepseek_v3", note="thinking is opt-in per request"),
    _f("DeepSeek V3", r"deepseek-v3", "deepseek_v3 DeepseekV3ForCausalLM", "deepseek_v3",
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME ```json {…}```"),
    _f("gpt-oss", r"gpt-oss", "gpt_oss GptOssForCausalLM", "openai",
       "harmony: <|channel|>commentary to=functions.NAME … <|call|>", reasoning_parser="openai_gptoss", thinks=True,
       note="always reasons in the analysis channel"),
    _f("GLM-4.5 / 4.6 / 4.7", r"glm-4\.[5-7]", "glm4_moe Glm4MoeForCausalLM", "glm45",
       "<tool_call>NAME<arg_key>KEY</arg_key><arg_value>VALUE</arg_value></tool_call>", same_markup=("glm47",),
       reasoning_parser="glm45", thinks=True, note=_THINK),
    _f("Llama 4", r"llama-?4", "llama4 Llama4ForConditionalGeneration", "llama4_pythonic",
       "[NAME(KEY=VALUE)] (pythonic)", note="llama4_json reads the JSON form the model can also be asked for"),
    _f("Llama 3.1 / 3.2 / 3.3", r"llama-?3", "", "llama3_json",
       "{\"name\": …, \"parameters\": {…}} (JSON, after <|python_tag|> or bare)"),
    _f("Magistral", r"magistral", "", "mistral", "[TOOL_CALLS]NAME[ARGS]{…}", reasoning_parser="mistral",
       thinks=True, note="`[THINK]…[/THINK]`"),
    _f("Mistral / Mixtral / Devstral", r"mistral|mixtral|devstral|codestral|ministral", "mistral mixtral",
       "mistral", "[TOOL_CALLS]NAME[ARGS]{…}"),
    _f("Granite 4", r"granite-4", "granitemoehybrid GraniteMoeHybridForCausalLM", "granite4",
       "<tool_call>{\"name\": …, \"arguments\": {…}}</tool_call>"),
    _f("Granite 3.x", r"granite", "granite GraniteForCausalLM", "granite",
       "<|tool_call|>[{\"name\": …, \"arguments\": {…}}] (3.0; <tool_call> in 3.1)", reasoning_parser="granite",
       note="thinking is opt-in per request (3.2+)"),
    _f("InternLM 2 / 2.5", r"internlm", "internlm2 InternLM2ForCausalLM", "internlm",
       "<|action_start|><|plugin|>{\"name\": …, \"parameters\": {…}}<|action_end|>"),
    _f("MiniMax-M2", r"minimax-m2", "minimax_m2 MiniMaxM2ForCausalLM", "minimax_m2",
       "<minimax:tool_call><invoke name=NAME><parameter name=KEY>VALUE</parameter></invoke></minimax:tool_call>",
       reasoning_parser="minimax_m2", thinks=True, note=_THINK),
    _f("Seed-OSS", r"seed-oss", "seed_oss SeedOssForCausalLM", "seed_oss",
       "<seed:tool_call><function=NAME><parameter=KEY>VALUE</parameter></function></seed:tool_call>",
       reasoning_parser="seed_oss", thinks=True, note="`<seed:think>…</seed:think>`"),
    _f("Phi-4-mini", r"phi-4-mini", "", "phi4_mini_json", "functools[{\"name\": …, \"arguments\": {…}}]"),
)


def family_for(model: str, config: Mapping[str, Any] | None = None, template: str | None = None) -> Family | None:
    """The family of `model` (its id or path) with its config.json and chat template where known; None when
    no row matches (nothing is then said about its parsers)."""
    names = [model, str(config.get("_name_or_path") or "")] if config else [model]
    ids: set[str] = set()
    if config:
        ids.add(str(config.get("model_type") or ""))
        archs = config.get("architectures")
        if isinstance(archs, list):
            ids.update(str(a) for a in archs)
    for family in FAMILIES:
        if family.names and any(re.search(family.names, name, re.IGNORECASE) for name in names if name):
            return family
        if family.config & ids and (family.marker is None or (template is not None and family.marker in template)):
            return family
    return None


def parser_module(kind: str, name: str, version: str) -> str | None:
    """The file of vLLM `version` that holds parser `name` (kind "tool" or "reasoning"), where known."""
    found = registry(version)
    if found is None:
        return None
    module = (found.tool if kind == "tool" else found.reasoning).get(name)
    folder = "tool_parsers" if kind == "tool" else "reasoning"
    return f"vllm/{folder}/{module}.py" if module else None
