"""The profile as the launcher uses it: frozen, typed settings, and the few helpers that read its values.

`config.load` turns a YAML file (plus `--set` overrides) into a `Profile`; nothing changes it afterwards.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from launcher.config.nodes import NodesSettings
from launcher.config.settings import default_seconds
from launcher.errors import ProfileError

FlagValue = bool | int | float | str | tuple[Any, ...] | Mapping[str, Any]


# Every value vLLM has accepted for --kv-cache-dtype, 0.6.6 → 0.34.0 (read from vLLM's `CacheDType` in each release).
KV_CACHE_DTYPES = frozenset({
    "auto", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "bfloat16", "float16", "fp8_ds_mla",
    "turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc",
    "int8_per_token_head", "fp8_per_token_head", "nvfp4", "int4_per_token_head", "nvfp4_4over6",
    "nvfp4_ds_mla", "octave_k3v4", "octave_k3v3", "octave_k3v3_compact", "ultraquant_4bit",
})
DEFAULT_PORT = 8000  # vLLM's own, when the profile sets no vllm.port
FP8_KV_DTYPES = frozenset({"fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla", "fp8_per_token_head"})


_LOOPBACK = re.compile(r"^(127\.\d+\.\d+\.\d+|localhost|::1|\[::1\])$")
_HUMAN_INT = re.compile(r"^(\d+(?:\.\d+)?)([kmgtKMGT]?)$")
TOKEN_COUNT_PATTERN = _HUMAN_INT.pattern  # 65536, 64K, 64k: for the profile's JSON Schema


@dataclass(frozen=True, slots=True)
class SecretRef:
    """Where a secret lives: an environment variable or a file (e.g. a systemd credential)."""

    kind: Literal["env", "file"]
    ref: str

    def describe(self) -> str:
        return f"{self.kind} {self.ref}"


@dataclass(frozen=True, slots=True)
class LadderBounds:
    """How far the failure ladder may move a profile away from what it says."""

    utilization_rungs: tuple[float, ...]  # descending; empty = the launcher never changes it
    drop_fp8_kv_if_unsupported: bool
    min_model_len: int | None  # None = never cut the context


@dataclass(frozen=True, slots=True)
class Requirements:
    """A capacity gate on readiness: below it, the attempt fails as kv_insufficient."""

    min_sessions: float | None
    min_kv_tokens: int | None


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    """Restarts of a dead engine after READY: at most `max_restarts` per `window_s`."""

    max_restarts: int
    window_s: float
    backoff_min_s: float
    backoff_max_s: float


@dataclass(frozen=True, slots=True)
class HealthPolicy:
    interval_s: float
    failures: int
    timeout_s: float
    completion_probe: bool  # also a 1-token completion before READY
    # While serving, a 1-token completion this often (0: never): /health answers 200 while the engine is
    # wedged; a completion that fails or outlasts completion_timeout counts as a failed probe.
    completion_interval_s: float = default_seconds("health.completion_interval")
    completion_timeout_s: float = default_seconds("health.completion_timeout")


@dataclass(frozen=True, slots=True)
class MetricsSettings:
    """The launcher's own Prometheus metrics: served on address:port, or written to a node_exporter textfile."""

    port: int | None
    address: str
    textfile: Path | None


@dataclass(frozen=True, slots=True)
class LauncherSettings:
    device: Literal["gpu", "cpu"]
    vllm_bin: str | None
    log_file: Path | None
    log_max_bytes: int
    log_backups: int
    startup_timeout_s: float
    startup_stall_s: float
    stop_grace_s: float
    max_attempts: int
    ladder: LadderBounds
    require: Requirements
    restart: RestartPolicy
    health: HealthPolicy
    metrics: MetricsSettings | None = None  # None: off (the default)
    # How long a relaunch waits for the last attempt's GPU memory to be given back (run/gpurelease.py).
    gpu_release_timeout_s: float = default_seconds("gpu_release_timeout")
    # How long a failure line waits for the process to confirm it (exit, or no progress) before the attempt
    # ends on it; progress in this window acquits the line (run/readiness.py).
    confirm_window_s: float = default_seconds("confirm_window")
    # Before READY, a chat and a tool round trip through the server (run/agentprobe.py): auto, required or off.
    agent_probe: Literal["auto", "required", "off"] = "auto"


class FlagViews:
    """Typed views of the vLLM flags the launcher reasons about, shared by Profile and Plan."""

    __slots__ = ()

    def _flags(self) -> Mapping[str, FlagValue]:
        raise NotImplementedError

    @property
    def utilization(self) -> float | None:
        value = self._flags().get("gpu-memory-utilization")
        return float(value) if isinstance(value, int | float) else None

    @property
    def kv_cache_dtype(self) -> str:
        return str(self._flags().get("kv-cache-dtype", "auto"))

    @property
    def max_model_len(self) -> int | None:
        """The requested context; None when unset or `auto` (vLLM then derives it)."""
        return parse_max_model_len(self._flags().get("max-model-len"))

    @property
    def tensor_parallel_size(self) -> int:
        value = self._flags().get("tensor-parallel-size", 1)
        return value if isinstance(value, int) else 1

    @property
    def pipeline_parallel_size(self) -> int:
        value = self._flags().get("pipeline-parallel-size", 1)
        return value if isinstance(value, int) else 1


@dataclass(frozen=True, slots=True)
class Profile(FlagViews):
    """One served model: the `vllm serve` flags as written plus the launcher's own settings."""

    source: str
    name: str
    model: str
    vllm: Mapping[str, FlagValue]  # kebab-case flag names, in the order written
    api_key: SecretRef | None
    hf_token: SecretRef | None
    allow_unauthenticated: bool
    env: Mapping[str, str]
    launcher: LauncherSettings
    digest: str  # sha256 of the validated content: keys last-known-good and state
    origins: Mapping[str, str]  # dotted key → "file:line" or "--set key=value"
    nodes: NodesSettings | None = None  # served across nodes (config/nodes.py); None: one node

    def error(self, key: str, problem: str, fix: str) -> ProfileError:
        """A ProfileError that points at where `key` was written (file:line or --set)."""
        origin = self.origins.get(key, "")
        if origin.startswith("--set"):
            return ProfileError("--set", key, problem, fix)
        source, _, line = origin.rpartition(":")
        if source and line.isdigit():
            return ProfileError(source, key, problem, fix, int(line))
        return ProfileError(self.source, key, problem, fix)

    def flag(self, name: str, default: Any = None) -> Any:
        return self.vllm.get(name, default)

    @property
    def host(self) -> str | None:
        value = self.vllm.get("host")
        return str(value) if value is not None else None

    @property
    def port(self) -> int:
        return int(self.vllm.get("port", DEFAULT_PORT))  # type: ignore[arg-type]

    @property
    def served_model_name(self) -> str:
        value = self.vllm.get("served-model-name")
        if isinstance(value, tuple):
            return str(value[0])
        return str(value) if value is not None else self.model

    def _flags(self) -> Mapping[str, FlagValue]:
        return self.vllm

    @property
    def gpus_needed(self) -> int:
        """GPUs on this node: TP × PP × DP, shared out over `nodes.count` nodes."""
        dp = int(self.vllm.get("data-parallel-size", 1))  # type: ignore[arg-type]
        total = self.tensor_parallel_size * self.pipeline_parallel_size * dp
        return total // self.nodes.count if self.nodes is not None else total


def parse_max_model_len(value: object) -> int | None:
    """vLLM's human-readable ints: `64k` = 64000, `64K` = 65536; `auto`/-1 → None."""
    if value is None or value in ("auto", -1, "-1"):
        return None
    if isinstance(value, bool):
        raise ValueError("expected a token count such as 65536 or 64K")
    if isinstance(value, int):
        if value <= 0:
            raise ValueError("expected a positive token count")
        return value
    if isinstance(value, str):
        match = _HUMAN_INT.match(value.strip())
        if match:
            number, suffix = match.groups()
            if suffix in "kmgt" and suffix:
                return int(float(number) * int(1000 ** ("kmgt".index(suffix) + 1)))
            if suffix:
                if "." in number:
                    raise ValueError("binary suffixes (K, M, G) take whole numbers")
                return int(number) * int(1024 ** ("KMGT".index(suffix) + 1))
            return int(float(number))
    raise ValueError("expected a token count such as 65536, 64K (65,536) or 64k (64,000), or auto")


def is_loopback(host: str | None) -> bool:
    return host is not None and bool(_LOOPBACK.match(host))


