"""What changes between vLLM versions that a launcher must know (docs/vllm-logs.md, "Versions").

Memory-budget semantics, defaults and log formats moved several times between
0.6 and 0.33; capacity plans and the ladder pick their rules from here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

NEWEST_KNOWN = "0.33.0"
DEFAULT_BLOCK_SIZE = 16  # tokens per KV-cache block when the profile sets no block-size

_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?")


def parse_version(text: str) -> tuple[int, int, int]:
    """`0.32.0+cpu` → (0, 32, 0); raises ValueError for anything else."""
    match = _VERSION.match(text.strip())
    if not match:
        raise ValueError(f"not a vLLM version: {text!r} (expected e.g. 0.11.0)")
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


@dataclass(frozen=True, slots=True)
class VersionSemantics:
    """The rules of one vLLM version that capacity planning and the ladder depend on."""

    version: str
    key: tuple[int, int, int]

    def at_least(self, text: str) -> bool:
        return self.key >= parse_version(text)

    @property
    def engine(self) -> str:
        """V0 was the default before 0.8.0 (VLLM_USE_V1 defaulted to 0)."""
        return "v1" if self.at_least("0.8.0") else "v0"

    @property
    def default_utilization(self) -> float:
        return 0.92 if self.at_least("0.20.0") else 0.9

    def utilization(self, written: float | None) -> float:
        """The gpu-memory-utilization vLLM runs with: the one the profile (or a rung) wrote, else its default."""
        return written or self.default_utilization

    @property
    def checks_free_memory_at_start(self) -> bool:
        return self.at_least("0.9.0")

    @property
    def cudagraphs_in_budget(self) -> bool:
        """From 0.20 the CUDA-graph estimate is subtracted from the KV budget (enforce-eager frees it)."""
        return self.at_least("0.20.0")

    @property
    def bounds_profiling_splits(self) -> bool:
        """From 0.22 the profiling pass caps the allocator's block splits, so a freed MoE workspace is
        not pinned and counted against the KV cache (gpu_worker.py _scoped_allocator_max_split)."""
        return self.at_least("0.22.0")

    @property
    def reserves_null_block(self) -> bool:
        return self.at_least("0.29.0")

    def default_batching(self, total_gib: float, gpu_name: str) -> tuple[int, int]:
        """(max_num_seqs, max_num_batched_tokens) vLLM picks when the profile does not."""
        if self.engine == "v0":
            return 256, 2048
        big = total_gib >= 70 and (not self.at_least("0.9.0") or "a100" not in gpu_name.lower())
        if self.at_least("0.33.0") and total_gib >= 160:
            return 1024, 16384
        return (1024, 8192) if big else (256, 2048)


def semantics(version: str | None) -> VersionSemantics:
    """Rules for `version`, or for the newest vLLM we know when it is unknown."""
    text = version or NEWEST_KNOWN
    return VersionSemantics(text, parse_version(text))
