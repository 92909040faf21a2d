"""What a log says happened, as data the ladder can act on: the failure class, its reason, the root-cause line, the
numbers (the fold that makes one is launcher/vllm/diagnose.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from launcher.vllm.signature_kit import OK, FailureClass


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """What a log says happened, as data the ladder can act on."""

    cls: FailureClass
    reason: str | None = None  # config reasons (tool_parser, port_in_use, …) and sub-kinds
    root_cause: str | None = None
    numbers: Mapping[str, Any] = field(default_factory=dict)
    state: str = "starting"  # how far the server got: starting, serving, stopped
    line_number: int | None = None
    warnings: tuple[str, ...] = ()  # failure lines that progress afterwards acquitted
    evidence: str | None = None  # what convicted the failure: traceback, engine_start_failed, same_class, …

    @property
    def failed(self) -> bool:
        return self.cls != OK

    def to_dict(self) -> dict[str, Any]:
        return {"class": self.cls, "reason": self.reason, "root_cause": self.root_cause,
                "numbers": dict(self.numbers), "state": self.state, "line": self.line_number,
                "evidence": self.evidence, "warnings": list(self.warnings)}


# The numbers a diagnosis reports (documented in docs/commands.md); other captured values stay internal.
REPORTED_NUMBERS = (
    "kv_tokens", "max_concurrency", "concurrency_len", "estimated_max_model_len", "available_kv_gib",
    "model_loading_gib", "free_gib", "total_gib", "requested_gib", "utilization", "needed_gib", "max_model_len",
    "derived_max_model_len", "vllm_version", "valid_tool_parsers", "tool_parser", "kv_cache_memory_fit",
    "kv_cache_memory_full", "gpu_blocks", "kv_tokens_from_blocks", "estimate_derived_by_launcher", "world_size",
    "gpus", "tried", "arguments", "argument", "package", "weights_gib", "activation_gib", "non_torch_gib", "cudagraph_gib",
    "attention_heads", "tensor_parallel_size", "gpu_name", "compute_capability", "max_num_batched_tokens", "dtype",
    "quantization", "supported", "import_refused", "max_num_seqs", "mamba_cache_blocks",
)


def reported_numbers(numbers: dict[str, Any], block_size: int, kv_insufficient: bool = False) -> dict[str, Any]:
    """The numbers a diagnosis reports, from what the log printed: units and tokens derived where a version left
    them out (`numbers` is changed in place)."""
    if "model_loading_gb" in numbers:  # 0.6–0.7 print GiB labelled "GB"
        numbers.setdefault("model_loading_gib", numbers.pop("model_loading_gb"))
    if "kv_tokens" not in numbers and "gpu_blocks" in numbers:
        numbers["kv_tokens"] = numbers["gpu_blocks"] * block_size
        numbers["kv_tokens_from_blocks"] = True
    if "estimated_max_model_len" not in numbers and kv_insufficient and numbers.get("needed_gib"):
        # 0.8.4–0.8.5 lost the estimate from the message: derive it from the two sizes.
        ratio = numbers["available_kv_gib"] / numbers["needed_gib"]
        tokens = int(ratio * numbers["max_model_len"])
        numbers["estimated_max_model_len"] = tokens // block_size * block_size
        numbers["estimate_derived_by_launcher"] = True
    if "valid_tool_parsers" in numbers:
        numbers["valid_tool_parsers"] = list(numbers["valid_tool_parsers"])
    return {key: numbers[key] for key in REPORTED_NUMBERS if key in numbers}
