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
