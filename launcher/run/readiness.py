"""The gates a ready server must still pass: the capacity vLLM logged against `launcher.require` (and an
`auto` context that leaves the block vLLM keeps back), and the word that it could not be checked."""

from __future__ import annotations

from launcher.config.profile import Requirements, parse_max_model_len
from launcher.run.supervisor import Ending, EndKind
from launcher.vllm.command import Plan
from launcher.vllm.diagnosis import Diagnosis
from launcher.vllm.signatures import KV_INSUFFICIENT
from launcher.vllm.versions import DEFAULT_BLOCK_SIZE


def capacity_gate(require: Requirements, outcome: Ending, plan: Plan, block_size: int = DEFAULT_BLOCK_SIZE) -> Ending | None:
    """READY only when the capacity the log reports meets launcher.require (and an `auto` context leaves
    the block vLLM keeps back); else the failed outcome."""
    numbers = dict(outcome.diagnosis.numbers)
    length = numbers.get("served_max_model_len") or plan.max_model_len
    tokens = numbers.get("kv_tokens")
    if not isinstance(tokens, int) or not length:
        return None
    written = plan.flags.get("max-model-len")
    auto = written is not None and parse_max_model_len(written) is None  # `auto` or -1: vLLM fits it
    if auto and length > tokens - block_size:
        # vLLM keeps one null block out of the pool: a request of exactly the fitted length never gets
        # its last block and waits forever. One block lower is the longest context that is served.
        numbers.update(max_model_len=length, estimated_max_model_len=tokens - block_size)
        root = (f"max-model-len auto fitted {length:,} tokens to a pool of {tokens:,}, which leaves no room for "
                f"the null block vLLM keeps; a request that long would never be scheduled")
        return Ending(EndKind.FAILED, outcome.attempt, Diagnosis(KV_INSUFFICIENT, "auto_fit_edge", root, numbers,
                                                            "serving"), None, outcome.tail, root)
    reason = None
    if require.min_sessions is not None and tokens / length < require.min_sessions:
        reason = "below_min_sessions"
    elif require.min_kv_tokens is not None and tokens < require.min_kv_tokens:
        reason = "below_min_kv_tokens"
    if reason is None:
        return None
    numbers["max_model_len"] = length
    root = (f"{tokens:,} KV tokens = {tokens / length:.2f} sessions of {length:,} (launcher.require: "
            f"min_sessions {require.min_sessions}, min_kv_tokens {require.min_kv_tokens})")
    diagnosis = Diagnosis(KV_INSUFFICIENT, reason, root, numbers, "serving")
    return Ending(EndKind.FAILED, outcome.attempt, diagnosis, None, outcome.tail, root)


def unchecked_requirement(require: Requirements, outcome: Ending) -> str | None:
    """Why launcher.require could not be checked for a ready server (vLLM logged no KV figure), or None.
    Such a server is READY, and this is said in the log, the state and systemd's STATUS, never silently."""
    if require.min_sessions is None and require.min_kv_tokens is None:
        return None
    if isinstance(outcome.diagnosis.numbers.get("kv_tokens"), int):
        return None
    return ("launcher.require was not checked: vLLM logged no KV cache size (is VLLM_LOGGING_LEVEL above INFO?); "
            "the server is ready without that proof")
