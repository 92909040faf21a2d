"""The failure ladder: for each failure class, the next change to try, within the profile's bounds.

Pure: `next_step` takes the profile, the overrides applied so far and a diagnosis,
and returns the next overrides with the reason, or raises `Stop` (never retried,
exit 78) or `Exhausted` (nothing left to try, exit 75). tenacity in the daemon
decides *when* the next attempt starts; this module decides *what* it changes.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from launcher.config.profile import FP8_KV_DTYPES, FlagValue, Profile, parse_max_model_len
from launcher.errors import ConfigError, LadderExhausted
from launcher.plan.preflight import FREE_MARGIN, lower_rung_that_fits
from launcher.units import GIB
from launcher.vllm.command import Overrides, effective_flags
from launcher.vllm.config_reasons import config_fix
from launcher.vllm.diagnosis import Diagnosis
from launcher.vllm.signatures import (
    COMPILE_CACHE,
    CONFIG,
    DISTRIBUTED_INIT,
    ENGINE_DEAD,
    FP8_UNSUPPORTED,
    KV_INSUFFICIENT,
    NO_CACHE_BLOCKS,
    OK,
    STARTUP_MEMORY,
    UNKNOWN,
)
from launcher.vllm.versions import DEFAULT_BLOCK_SIZE, VersionSemantics

# startup_memory's reason when the kernel's OOM killer ended the start-up (launcher/run/oomkill.py): host RAM.
HOST_OOM = "host_oom_killer"
# The smallest max-num-batched-tokens the no_cache_blocks rung shrinks the profiling batch to.
SMALL_BATCH_TOKENS = 1024
# Every flag a rung (or the GPU preflight) changes: what a last-known-good record may hold, and nothing else.
TUNED_FLAGS = frozenset({"gpu-memory-utilization", "kv-cache-dtype", "max-model-len", "enforce-eager",
                         "max-num-batched-tokens"})
# Steps a run takes at most once (`Step.once`; the daemon keeps the ones taken): a second failure of the same
# class after it stops with 75 and says why. The first is also an action the daemon carries out before the relaunch.
MOVE_COMPILE_CACHE = "move_compile_cache"  # launcher/run/compilecache.py
RETRY_DISTRIBUTED = "retry_distributed"


@dataclass(frozen=True, slots=True)
class Step:
    """The next attempt: its overrides and, for logs and state, what changed and why."""

    overrides: Mapping[str, FlagValue | None]
    change: str
    reason: str
    once: str | None = None  # a step a run takes at most once (MOVE_COMPILE_CACHE, RETRY_DISTRIBUTED)


class Stop(ConfigError):
    """This failure cannot be fixed by another attempt: the profile must change (exit 78, never retried)."""


class Exhausted(LadderExhausted):
    """Every rung the profile allows for this failure has been tried: a later start may still work (exit 75)."""


def block_size(flags: Mapping[str, FlagValue]) -> int:
    value = flags.get("block-size")
    return int(value) if isinstance(value, int) else DEFAULT_BLOCK_SIZE


def round_to_block(tokens: int, block: int) -> int:
    return tokens // block * block


def next_step(profile: Profile, overrides: Overrides, diagnosis: Diagnosis, *, version: VersionSemantics,
              free_fraction: float | None = None, tried: Sequence[Mapping[str, FlagValue | None]] = (),
              done: Collection[str] = ()) -> Step:
    """The change that answers `diagnosis`, or Stop/Exhausted with the arithmetic and the options. `done`: the
    once-per-run steps (`Step.once`) this run has already taken."""
    flags = effective_flags(profile, overrides)
    handler = _HANDLERS.get(diagnosis.cls, _retry_same)
    step = handler(profile, dict(overrides), flags, diagnosis, version, free_fraction)
    if step.once is not None:
        if step.once in done:
            raise Exhausted(_AGAIN[step.once](diagnosis))
        return step  # its change is the action, not the flags: the flags may well have been tried before
    # A death, an unknown failure or a stall with a clean log (ok) is retried as it is, up to max_attempts.
    if diagnosis.cls not in (ENGINE_DEAD, UNKNOWN, OK) and any(dict(step.overrides) == dict(t) for t in tried):
        raise Exhausted(f"{diagnosis.cls}: the next change ({step.change}) was already tried and failed")
    return step


def _compile_cache(profile: Profile, overrides: dict[str, FlagValue | None], flags: Mapping[str, FlagValue],
                   d: Diagnosis, version: VersionSemantics, free_fraction: float | None) -> Step:
    return Step(MappingProxyType(overrides), "torch.compile cache moved aside",
                "compile_cache: an earlier compilation left a corrupted artifact in vLLM's torch.compile cache; the "
                "cache is moved aside (never deleted) once and vLLM compiles afresh", once=MOVE_COMPILE_CACHE)


def _compile_cache_again(d: Diagnosis) -> str:
    return ("compile_cache again after vLLM's torch.compile cache was moved aside: no stale artifact is the cause, "
            "the real error stands earlier in vLLM's log (TORCHINDUCTOR_FORCE_DISABLE_CACHES, a compiler bug, "
            "another vLLM compiling into the same cache); start without the cache (env: VLLM_DISABLE_COMPILE_CACHE: "
            "'1') or without compiling (vllm.enforce-eager: true)")


def _distributed_init(profile: Profile, overrides: dict[str, FlagValue | None], flags: Mapping[str, FlagValue],
                      d: Diagnosis, version: VersionSemantics, free_fraction: float | None) -> Step:
    return Step(MappingProxyType(overrides), "same flags",
                f"distributed_init: {d.root_cause or 'the process group did not form'}; retrying once (a peer that "
                "was not up yet, a port still held)", once=RETRY_DISTRIBUTED)


def distributed_message(d: Diagnosis) -> str:
    """The fix for a group that could not form: the network, the master's address, the same vLLM everywhere."""
    return (f"NCCL/torch.distributed could not form the group before READY ({d.root_cause}); check that NCCL and "
            "gloo use the interface the nodes share (env: NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME; NCCL_DEBUG: INFO "
            "says which), that every rank reaches the master address and port (the head's IP, MASTER_ADDR/"
            "MASTER_PORT or data-parallel-address/-rpc-port, firewalls), and that every node runs the same vLLM, "
            "torch and NCCL")


def _distributed_again(d: Diagnosis) -> str:
    return f"distributed_init again after one retry: {distributed_message(d)}"


_AGAIN: dict[str, Callable[[Diagnosis], str]] = {MOVE_COMPILE_CACHE: _compile_cache_again,
                                                  RETRY_DISTRIBUTED: _distributed_again}


def _config(profile: Profile, overrides: dict[str, FlagValue | None], flags: Mapping[str, FlagValue],
            d: Diagnosis, version: VersionSemantics, free_fraction: float | None) -> Step:
    raise Stop(config_fix(d))  # the reason's row in launcher/vllm/config_reasons.py


def _startup_memory(profile: Profile, overrides: dict[str, FlagValue | None], flags: Mapping[str, FlagValue],
                    d: Diagnosis, version: VersionSemantics, free_fraction: float | None) -> Step:
    current = _utilization(flags, version)
    if d.reason == HOST_OOM and profile.launcher.device != "cpu":
        # GPU memory is not what ran out: a lower gpu-memory-utilization leaves host memory as it was.
        raise Exhausted(f"startup_memory: {d.root_cause}; a lower gpu-memory-utilization does not shrink host memory. "
                        "Free host RAM (other processes, a second vLLM), raise the memory limit of vLLM's cgroup "
                        "(systemd MemoryMax, the container's memory limit), or lower what vLLM keeps in host RAM "
                        "(vllm.swap-space, vllm.cpu-offload-gb, fewer api-server processes)")
    rungs = profile.launcher.ladder.utilization_rungs
    fits = _fitting_utilization(d, free_fraction)
    nxt = lower_rung_that_fits(rungs, current, fits)
    if d.reason == "memory_changed" and current in rungs:
        return Step(MappingProxyType(overrides), "same flags",
                    "startup_memory: memory use changed while vLLM profiled it; retrying once memory settles")
    if nxt is None:
        why = (f"a utilization of at most {fits:.2f} fits the free memory ({_free_text(d)})" if fits is not None
               else "vLLM could not get the memory it asked for")
        allowed = f"the profile's rungs are {list(rungs)}" if rungs else "the profile allows no other utilization"
        raise Exhausted(f"startup_memory at gpu-memory-utilization {current}: {why}; {allowed}. Free the device "
                        "(see `vllm-launch preflight`) or add a lower rung to launcher.ladder.gpu_memory_utilization")
    overrides["gpu-memory-utilization"] = nxt
    return Step(MappingProxyType(overrides), f"gpu-memory-utilization {current} → {nxt}",
                f"startup_memory: {_free_text(d) or d.root_cause}")


def _fitting_utilization(d: Diagnosis, free_fraction: float | None) -> float | None:
    free, total = d.numbers.get("free_gib"), d.numbers.get("total_gib")
    if isinstance(free, float) and isinstance(total, float) and total > 0:
        return max(0.0, (free - FREE_MARGIN / GIB) / total)
    return free_fraction


def _free_text(d: Diagnosis) -> str:
    n = d.numbers
    if "free_gib" in n and "total_gib" in n:
        asked = f", {n['requested_gib']} GiB requested" if "requested_gib" in n else ""
        return f"{n['free_gib']} of {n['total_gib']} GiB free{asked}"
    return ""


def _fp8_unsupported(profile: Profile, overrides: dict[str, FlagValue | None], flags: Mapping[str, FlagValue],
                     d: Diagnosis, version: VersionSemantics, free_fraction: float | None) -> Step:
    dtype = str(flags.get("kv-cache-dtype", "auto"))
    if dtype not in FP8_KV_DTYPES:
        raise Stop(f"fp8_unsupported although kv-cache-dtype is {dtype}: {d.root_cause}")
    if not profile.launcher.ladder.drop_fp8_kv_if_unsupported:
        raise Stop("this GPU cannot hold an FP8 KV cache (needs compute capability ≥ 8.9); remove "
                   "vllm.kv-cache-dtype or set launcher.ladder.drop_fp8_kv_if_unsupported: true")
    overrides["kv-cache-dtype"] = "auto"
    return Step(MappingProxyType(overrides), f"kv-cache-dtype {dtype} → auto",
                "fp8_unsupported: this GPU or attention backend has no FP8 KV cache (KV capacity halves)")


def _kv_insufficient(profile: Profile, overrides: dict[str, FlagValue | None], flags: Mapping[str, FlagValue],
                     d: Diagnosis, version: VersionSemantics, free_fraction: float | None) -> Step:
    n = d.numbers
    block = block_size(flags)
    current = parse_max_model_len(flags.get("max-model-len")) or n.get("max_model_len")
    if d.reason == "below_min_kv_tokens":
        raise Stop(f"kv_insufficient: {n.get('kv_tokens', 0):,} KV tokens, below launcher.require.min_kv_tokens "
                   f"{profile.launcher.require.min_kv_tokens:,}; a shorter context cannot add tokens: kv-cache-dtype fp8 "
                   "(CC ≥ 8.9), a higher gpu-memory-utilization or more GPUs can")
    if isinstance(n.get("mamba_cache_blocks"), int):
        raise Stop(f"kv_insufficient: max-num-seqs {n.get('max_num_seqs')} is above the {n['mamba_cache_blocks']} "
                   "Mamba state blocks that fit (one per running sequence); a shorter context frees none: set "
                   f"max-num-seqs to at most {n['mamba_cache_blocks']}, or a higher gpu-memory-utilization")
    if d.reason == "below_min_sessions":
        sessions = profile.launcher.require.min_sessions or 1.0
        estimate: int | None = int(n["kv_tokens"] / sessions)
        why = (f"{n['kv_tokens']:,} KV tokens hold {n['kv_tokens'] / current:.2f} sessions of {current:,}, "
               f"below require.min_sessions {sessions:g}") if current else "below require.min_sessions"
    else:
        estimate = n.get("estimated_max_model_len")
        why = (f"max-model-len {current} needs {n.get('needed_gib')} GiB of KV cache, "
               f"{n.get('available_kv_gib')} GiB available; vLLM estimates {estimate} fits")
    options = ("options: kv-cache-dtype fp8 (CC ≥ 8.9), a higher gpu-memory-utilization, more GPUs "
               "(tensor-parallel-size), or a shorter max-model-len")
    if not isinstance(estimate, int) or estimate <= 0:
        raise Stop(f"kv_insufficient: {why}; {options}")
    new = round_to_block(estimate, block)
    floor = profile.launcher.ladder.min_model_len
    if d.reason == "auto_fit_edge" and new > 0:
        overrides["max-model-len"] = new  # what `auto` meant, one block lower: no floor to ask for
        return Step(MappingProxyType(overrides), f"max-model-len auto ({current}) → {new}",
                    f"kv_insufficient: {d.root_cause} (one block of {block} lower)")
    if floor is None:
        raise Stop(f"kv_insufficient: {why}; the profile does not allow cutting the context "
                   f"(set launcher.ladder.min_model_len), or {options}")
    if new < floor:
        raise Stop(f"kv_insufficient: {why}; {new} is below launcher.ladder.min_model_len {floor}; {options}")
    if current is not None and new >= current:
        raise Stop(f"kv_insufficient: {why}, which is not below the current {current}; {options}")
    overrides["max-model-len"] = new
    return Step(MappingProxyType(overrides), f"max-model-len {current} → {new}",
                f"kv_insufficient: {why} (rounded down to the block size {block})")


def _no_cache_blocks(profile: Profile, overrides: dict[str, FlagValue | None], flags: Mapping[str, FlagValue],
                     d: Diagnosis, version: VersionSemantics, free_fraction: float | None) -> Step:
    # Weights and activations fill the budget: a lower utilization would make it worse.
    current = _utilization(flags, version)
    higher = [r for r in profile.launcher.ladder.utilization_rungs if r > current + 1e-9]
    if higher and (free_fraction is None or free_fraction >= min(higher)):
        nxt = min(higher) if free_fraction is None else max(r for r in higher if r <= free_fraction)
        overrides["gpu-memory-utilization"] = nxt
        return Step(MappingProxyType(overrides), f"gpu-memory-utilization {current} → {nxt}",
                    "no_cache_blocks: nothing is left for the KV cache; a higher rung gives it room")
    if version.cudagraphs_in_budget and flags.get("enforce-eager") is not True:
        overrides["enforce-eager"] = True
        return Step(MappingProxyType(overrides), "enforce-eager → true",
                    f"no_cache_blocks: vLLM {version.version} reserves CUDA-graph memory inside the budget; "
                    "eager mode returns it to the KV cache")
    batched = flags.get("max-num-batched-tokens")
    if version.engine == "v1" and (not isinstance(batched, int) or batched > SMALL_BATCH_TOKENS):
        overrides["max-num-batched-tokens"] = SMALL_BATCH_TOKENS
        return Step(MappingProxyType(overrides), f"max-num-batched-tokens {batched or 'default'} → "
                    f"{SMALL_BATCH_TOKENS}", "no_cache_blocks: a smaller profiling batch lowers the activation peak")
    raise Stop(f"no_cache_blocks at gpu-memory-utilization {current}: weights and activations leave no memory for "
               "the KV cache; options: quantized weights, more GPUs (tensor-parallel-size), a GPU with more "
               "memory, or a higher utilization rung if the device has free memory (see `vllm-launch plan`)")


def _retry_same(profile: Profile, overrides: dict[str, FlagValue | None], flags: Mapping[str, FlagValue],
                d: Diagnosis, version: VersionSemantics, free_fraction: float | None) -> Step:
    return Step(MappingProxyType(overrides), "same flags",
                f"{d.cls}: {d.root_cause or 'vLLM exited'}; retrying the same flags")


def _utilization(flags: Mapping[str, FlagValue], version: VersionSemantics) -> float:
    value = flags.get("gpu-memory-utilization")
    return version.utilization(float(value) if isinstance(value, int | float) else None)


_HANDLERS = {
    CONFIG: _config,
    COMPILE_CACHE: _compile_cache,
    DISTRIBUTED_INIT: _distributed_init,
    STARTUP_MEMORY: _startup_memory,
    FP8_UNSUPPORTED: _fp8_unsupported,
    KV_INSUFFICIENT: _kv_insufficient,
    NO_CACHE_BLOCKS: _no_cache_blocks,
}


def describe_remedy(d: Diagnosis, profile: Profile | None = None, version: VersionSemantics | None = None) -> str:
    """What the ladder would do for this diagnosis, in one line (for `diagnose`)."""
    from launcher.vllm.versions import semantics

    if d.cls == OK and d.state == "starting":
        # A log cut while vLLM starts and a start-up that hung read the same: no line tells them apart, time does.
        return ("none: no failure in this log, which ends before the server answered; if vLLM stopped there, it "
                "hung: `up` ends such an attempt after launcher.startup_stall without output or progress, or at "
                "launcher.startup_timeout")
    if d.cls == OK:
        return "none: no failure in this log"
    if d.cls == ENGINE_DEAD:
        return "restart the engine with the same flags, with backoff (launcher.restart)"
    if d.cls == UNKNOWN:
        return "retry the same flags once; if it fails the same way, stop with exit 75 and the root cause"
    if profile is None:
        return _generic_remedy(d)
    try:
        step = next_step(profile, {}, d, version=version or semantics(d.numbers.get("vllm_version")))
    except (Stop, Exhausted) as stop:
        return f"stop (exit {stop.exit_code}): {stop}"
    return f"{step.change} ({step.reason})"


def _generic_remedy(d: Diagnosis) -> str:
    n = d.numbers
    if d.cls == CONFIG:
        return f"stop (exit 78), never retried: {config_fix(d)}"  # the same row as the ladder's Stop
    if d.cls == STARTUP_MEMORY and d.reason == HOST_OOM:
        return ("the kernel's OOM killer ended it (host RAM, not GPU memory): stop with exit 75 naming the fix (free host "
                "RAM, raise the cgroup's memory limit); on the CPU backend, the next lower utilization rung")
    if d.cls == STARTUP_MEMORY:
        fits = _fitting_utilization(d, None)
        extra = f"; a utilization of at most {fits:.2f} fits what was free" if fits is not None else ""
        return ("kill our own leftover processes and wait for memory, then the next lower "
                f"launcher.ladder.gpu_memory_utilization rung{extra}")
    if d.cls == FP8_UNSUPPORTED:
        return "kv-cache-dtype → auto (launcher.ladder.drop_fp8_kv_if_unsupported); KV capacity halves"
    if d.cls == KV_INSUFFICIENT and isinstance(n.get("mamba_cache_blocks"), int):
        return (f"stop (exit 78): max-num-seqs at most {n['mamba_cache_blocks']} (the Mamba state blocks that fit), or "
                "a higher gpu-memory-utilization; a shorter context frees no state block")
    if d.cls == KV_INSUFFICIENT:
        est = n.get("estimated_max_model_len")
        if isinstance(est, int):
            return (f"max-model-len → {round_to_block(est, DEFAULT_BLOCK_SIZE)} (vLLM's estimate rounded down to the "
                    "block size), if launcher.ladder.min_model_len allows it; else stop (exit 78)")
        return "a shorter max-model-len, fp8 KV cache, a higher utilization or more GPUs"
    if d.cls == COMPILE_CACHE:
        return ("move vLLM's torch.compile cache aside to <dir>.corrupt-<time> (never deleted) and start again, once "
                "per run; if it fails the same way, stop with exit 75")
    if d.cls == DISTRIBUTED_INIT:
        return f"retry the same flags once; if the group fails to form again, stop with exit 75: {distributed_message(d)}"
    if d.cls == NO_CACHE_BLOCKS:
        return ("never a lower utilization: a higher rung if the GPU has free memory, else enforce-eager (vLLM ≥ 0.20) "
                f"or max-num-batched-tokens {SMALL_BATCH_TOKENS}; else stop (exit 78)")
    return "retry the same flags"
