"""A state store as a served run leaves it: a ladder step, two restarts, the capacity and the agent check."""

from __future__ import annotations

from pathlib import Path

from launcher.run.state import StateStore
from launcher.runstate import Decision


def served_state(tmp_path: Path) -> StateStore:
    """Serving on attempt 2 at gpu-memory-utilization 0.88, after one ladder step and two engine restarts."""
    store = StateStore(tmp_path)
    store.update(phase="starting", attempt=1, vllm_version="0.32.0", rung={"gpu-memory-utilization": 0.88})
    store.record_decision(Decision(1, "no_cache_blocks", "gpu-memory-utilization 0.92 → 0.88", "no cache blocks"),
                          counter="ladder_steps")
    store.update(phase="serving", attempt=2, time_to_ready_s=41.5,
                 capacity={"kv_tokens": 229632, "sessions": 3.5, "max_model_len": 65536},
                 agent={"verdict": "pass", "detail": "tool call parsed (qwen3_coder)"}, tool_parser_errors=3)
    for _ in range(2):
        store.record_decision(Decision(2, "engine_dead", "restart with the same flags", "engine_dead: exit -9"),
                              counter="restarts")
    return store
