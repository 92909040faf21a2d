"""The configuration failures by reason, each with its fix: one row per reason, the cause and the fix in one line.

A configuration failure can never work as set, so it is never retried (exit 78): the ladder stops with its
row's line, and `diagnose` prints the same line as the remedy. The log signatures
(`launcher.vllm.config_signatures`) and the agent probe (`launcher/run/agentprobe.py`) name their reasons
from `ConfigReason`; tests/unit/vllm/test_config_reasons.py fails when a reason has no row in `FIXES`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Protocol


class ConfigReason(enum.StrEnum):
    """Why a configuration cannot work (diagnose JSON `reason`). A StrEnum: logs and JSON keep the same strings."""

    TOOL_PARSER = "tool_parser"  # no such tool-call parser, or auto tool choice without one
    REASONING_PARSER = "reasoning_parser"  # no such reasoning parser
    UNKNOWN_FLAG = "unknown_flag"  # vLLM's argument parser does not know a flag
    BAD_ARGUMENT = "bad_argument"  # a flag's value, or a combination of flags, that vLLM refuses
    MAX_MODEL_LEN_ABOVE_MODEL = "max_model_len_above_model"
    MODEL_NOT_FOUND = "model_not_found"
    GATED_REPO = "gated_repo"
    UNSUPPORTED_MODEL = "unsupported_model"  # an architecture or quantization this vLLM cannot run
    MISSING_DEPENDENCY = "missing_dependency"  # a Python package the model imports is not installed
    NOT_ENOUGH_GPUS = "not_enough_gpus"
    PORT_IN_USE = "port_in_use"
    # Refusals vLLM states precisely enough for a precise fix (its own numbers in the message).
    HEADS_NOT_DIVISIBLE = "heads_not_divisible"  # tensor-parallel-size does not divide the attention heads
    DTYPE_UNSUPPORTED = "dtype_unsupported"  # bfloat16 on a GPU below compute capability 8.0
    BATCH_BELOW_CONTEXT = "batch_below_context"  # max-num-batched-tokens below max-model-len
    # The agent probe's (launcher/run/agentprobe.py): the server answers, but a coding agent cannot work with it.
    TOOL_CALLS_AS_TEXT = "tool_calls_as_text"
    TOOL_CALL_ARGUMENTS = "tool_call_arguments"
    AUTO_TOOL_CHOICE_OFF = "auto_tool_choice_off"
    CHAT_TEMPLATE = "chat_template"
    REASONING_IN_CONTENT = "reasoning_in_content"


# The agent probe's reasons: its root cause already says what the model wrote and the fix.
AGENT_REASONS = frozenset({ConfigReason.TOOL_CALLS_AS_TEXT, ConfigReason.TOOL_CALL_ARGUMENTS,
                           ConfigReason.AUTO_TOOL_CHOICE_OFF, ConfigReason.CHAT_TEMPLATE,
                           ConfigReason.REASONING_IN_CONTENT})


class Failed(Protocol):
    """What a fix reads of a diagnosis (`launcher.vllm.diagnosis.Diagnosis`; a Protocol keeps this table free of the fold)."""

    @property
    def reason(self) -> str | None: ...

    @property
    def root_cause(self) -> str | None: ...

    @property
    def numbers(self) -> Mapping[str, Any]: ...


# A row's fix: (the diagnosis's root cause, its numbers) → one line, the cause and the fix.
Fix = Callable[[str | None, Mapping[str, Any]], str]


def _rejected(cause: str | None, n: Mapping[str, Any]) -> str:
    """What any configuration failure without a more precise row gets."""
    return f"vLLM rejects the configuration: {cause}; fix the profile"


def _tool_parser(cause: str | None, n: Mapping[str, Any]) -> str:
    valid = n.get("valid_tool_parsers")
    if n.get("tool_parser") and valid:
        return (f"vLLM has no tool-call-parser {n['tool_parser']!r}; set vllm.tool-call-parser to one of: "
                f"{', '.join(valid)}")
    return "enable-auto-tool-choice needs a tool-call-parser; set vllm.tool-call-parser (e.g. hermes, qwen3_coder)"


def _port_in_use(cause: str | None, n: Mapping[str, Any]) -> str:
    holder = n.get("holder")  # the launcher's own port probe names who holds it; vLLM's log does not
    where = f"the port is held by {holder}" if isinstance(holder, str) else "the port is already in use"
    return f"{where}; stop what listens there or set vllm.port to a free port"


def _max_model_len_above_model(cause: str | None, n: Mapping[str, Any]) -> str:
    if n.get("derived_max_model_len") is None:  # a platform's own limit, worded its own way
        return (f"max-model-len {n.get('max_model_len')} is above what this model, device or platform allows "
                f"({cause}); set vllm.max-model-len to the limit it names")
    return (f"max-model-len {n.get('max_model_len')} is above the model's own limit {n.get('derived_max_model_len')}; "
            "set vllm.max-model-len to at most that")


def _missing_dependency(cause: str | None, n: Mapping[str, Any]) -> str:
    package = n.get("package") or "the package it names"
    if n.get("import_refused"):  # installed, but it refuses to load beside what else is installed
        return (f"the Python package {package} refuses to load in vLLM's environment ({cause}); install the versions "
                "it asks for where vLLM runs (the venv or image of launcher.vllm_bin)")
    if package == "nvcc":
        return (f"a kernel vLLM compiles at start-up needs the CUDA toolkit's compiler ({cause}); install the CUDA "
                "toolkit where vLLM runs and set CUDA_HOME (env:) to it, or turn that kernel off (FlashInfer's "
                "sampler: VLLM_USE_FLASHINFER_SAMPLER=0)")
    if package == "cc":
        return (f"Triton compiles its launcher with the host's C compiler on the first kernel launch ({cause}); install "
                "one where vLLM runs (apt install build-essential, or gcc in the image), or point CC (env:) at it")
    if package == "vllm":
        return (f"the Python that runs vLLM has no vllm package ({cause}); point launcher.vllm_bin at the venv or image "
                "vLLM is installed in, or install it there: pip install vllm")
    return (f"the model needs the Python package {package}, which vLLM's environment lacks ({cause}); "
            f"install it where vLLM runs (the venv or image of launcher.vllm_bin): pip install {package}")


def _not_enough_gpus(cause: str | None, n: Mapping[str, Any]) -> str:
    world, gpus = n.get("world_size"), n.get("gpus")
    if world is not None and gpus is not None:
        need = f"tensor × pipeline parallel size {world} needs more GPUs than the {gpus} visible"
    else:  # vLLM named no numbers (a rank found no device of its index): its own words say what is missing
        need = f"a rank found no GPU for it ({cause})"
    return f"{need}; lower tensor-parallel-size or expose more GPUs (CUDA_VISIBLE_DEVICES)"


def _heads_not_divisible(cause: str | None, n: Mapping[str, Any]) -> str:
    heads, tp = n.get("attention_heads"), n.get("tensor_parallel_size")
    if not isinstance(heads, int) or not isinstance(tp, int) or heads <= 0:
        return (f"tensor-parallel-size must divide the model's attention heads ({cause}); set "
                "vllm.tensor-parallel-size to a divisor of them")
    divisors = [d for d in range(1, min(heads, 64) + 1) if heads % d == 0]
    return (f"tensor-parallel-size {tp} does not divide the model's {heads} attention heads; set "
            f"vllm.tensor-parallel-size to one of {', '.join(map(str, divisors))} (pipeline-parallel-size can use the "
            "GPUs left over)")


def _dtype_unsupported(cause: str | None, n: Mapping[str, Any]) -> str:
    if n.get("quantization"):  # the quantization's kernels, not the GPU, refuse the dtype
        supported = str(n.get("supported") or "another dtype").replace("torch.", "")  # the list keeps torch.'s prefix
        return (f"the {n['quantization']} quantization's kernels do not take {n.get('dtype')} "
                f"(they take {supported}); set vllm.dtype to {supported.split(',')[0].strip()}")
    gpu, capability = n.get("gpu_name"), n.get("compute_capability")
    which = f"the {gpu} (compute capability {capability})" if gpu and capability else "this GPU"
    return (f"bfloat16 needs compute capability 8.0 or newer and {which} has less; set vllm.dtype: half "
            "(float16), or serve on an Ampere or newer GPU")


def _batch_below_context(cause: str | None, n: Mapping[str, Any]) -> str:
    batched, length = n.get("max_num_batched_tokens"), n.get("max_model_len")
    if not isinstance(batched, int) or not isinstance(length, int):
        return f"max-num-batched-tokens is below max-model-len ({cause}); raise it or lower max-model-len"
    return (f"max-num-batched-tokens {batched} is below max-model-len {length}: no prompt longer than {batched} "
            f"tokens could be scheduled; set vllm.max-num-batched-tokens to at least {length}, enable chunked "
            f"prefill (vllm.enable-chunked-prefill: true), or lower vllm.max-model-len to {batched}")


def _agent(cause: str | None, n: Mapping[str, Any]) -> str:
    return str(cause)  # the agent probe's verdict: what the model wrote and the fix


FIXES: Mapping[ConfigReason, Fix] = MappingProxyType({
    ConfigReason.TOOL_PARSER: _tool_parser,
    ConfigReason.REASONING_PARSER: lambda cause, n: (
        f"vLLM has no such reasoning parser ({cause}); set vllm.reasoning-parser to one it lists"),
    ConfigReason.UNKNOWN_FLAG: lambda cause, n: (
        f"vLLM rejects the arguments {n.get('arguments', '')}; remove or rename them in vllm: "
        "(see `vllm serve --help=all`)"),
    ConfigReason.BAD_ARGUMENT: _rejected,  # vLLM's own message names the flag and what it wants
    ConfigReason.MAX_MODEL_LEN_ABOVE_MODEL: _max_model_len_above_model,
    ConfigReason.MODEL_NOT_FOUND: lambda cause, n: (
        f"vLLM cannot find the model ({cause}); check `model:` (hub id Org/Name or a local path "
        "with config.json), the network, or HF_HUB_OFFLINE"),
    ConfigReason.GATED_REPO: lambda cause, n: (
        "the model is gated or private (401/403); accept its licence on huggingface.co and give a token: "
        "hf_token: {env: HF_TOKEN}"),
    ConfigReason.UNSUPPORTED_MODEL: lambda cause, n: (
        f"this vLLM cannot run the model's architecture ({cause}); upgrade vLLM (a newer release, or "
        "transformers for a new model type) or serve a supported model"),
    ConfigReason.MISSING_DEPENDENCY: _missing_dependency,
    ConfigReason.NOT_ENOUGH_GPUS: _not_enough_gpus,
    ConfigReason.PORT_IN_USE: _port_in_use,
    ConfigReason.HEADS_NOT_DIVISIBLE: _heads_not_divisible,
    ConfigReason.DTYPE_UNSUPPORTED: _dtype_unsupported,
    ConfigReason.BATCH_BELOW_CONTEXT: _batch_below_context,
    **{reason: _agent for reason in AGENT_REASONS},
})


def fix_for(reason: str | None) -> Fix:
    """The fix of a reason's row; a reason without one (None, a stranger's string) gets the generic line."""
    if reason is None:
        return _rejected
    try:
        return FIXES.get(ConfigReason(reason), _rejected)
    except ValueError:  # not a configuration reason
        return _rejected


def config_fix(d: Failed) -> str:
    """One line for a configuration failure: the cause and the fix."""
    return fix_for(d.reason)(d.root_cause, d.numbers)
