"""`vllm-launch tune PROFILE --slo ...`: candidates from the grid, pruned by `plan`, each measured through the
supervisor, the winner reported (and written with --write).

The box must be free: a daemon already serving the profile is never stopped to make room (tune refuses and
says how to stop it). SIGTERM and Ctrl-C stop the server being measured, keep every level measured so
far in the cache, print what was found, and exit 130; the budget ending is not an error (exit 0, the
candidates not reached are listed as not run). A rerun with the same profile, workload, SLO, vLLM and GPU
measures only what is missing.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from types import FrameType
from typing import Any

from launcher.bench import agent_tools
from launcher.bench.command import resolve_target
from launcher.bench.report import plotting_available, to_json
from launcher.bench.workload import Settings
from launcher.config import document
from launcher.config.load import loads
from launcher.errors import EX_INTERRUPTED, EX_OK, TransientFailure, UsageError
from launcher.plan.report import PlanReport, PlanRequest, run_plan
from launcher.run.locks import lock_holder
from launcher.statedir import ensure_state_dirs, state_root
from launcher.tune import candidates as grid_
from launcher.tune import report
from launcher.tune.cache import Level, Record, Store, key_of
from launcher.tune.candidates import Candidate
from launcher.tune.measure import CandidateRun, Measured, MeasureSetup
from launcher.tune.slo import Slo, requests_needed
from launcher.tune.write import refuse_existing, write_profile

WORKLOADS = ("agent", "random")


@dataclass(frozen=True, slots=True)
class Request:
    profile: str
    slo: Slo
    grids: tuple[str, ...] = ()
    workload: str = "agent"
    settings: Settings = field(default_factory=Settings)  # the workload's sizes (prefix, turn, output, context)
    budget_s: float | None = None
    rounds: int = 2
    most_users: int = 256
    fresh: bool = False  # measure again what the cache holds
    as_json: bool = False
    plot: str | None = None
    write: str | None = None
    gpu_inventory: str | None = None


def workload_settings(name: str, settings: Settings) -> Settings:
    """agent: bench's multi-turn chats over one shared system prompt, with the agent tools in every request
    unless --tools none. random: one-turn prompts that share nothing (no system prompt, no tools), the shape
    of `vllm bench serve --dataset-name random`."""
    if name == "agent":
        return replace(settings, ignore_eos=True)
    return replace(settings, shared_prefix=0, conversation_turns=1, ignore_eos=True, tools="none")


def workload_key_of(request: Request, settings: Settings) -> dict[str, Any]:
    """What a cached level's workload is: bench's settings (--tools among them), the tool set itself (another
    set is another workload), the rounds and the most users."""
    return {**asdict(settings), "workload": request.workload, "rounds": request.rounds,
            "most_users": request.most_users, "tool_set": agent_tools.DIGEST if settings.tools != "none" else None}


def tune(request: Request, environ: Mapping[str, str] | None = None) -> int:
    environ = dict(os.environ if environ is None else environ)
    started = time.monotonic()
    _check_request(request)
    text = document.read_text(request.profile)  # read once: the profile measured is the profile keyed
    profile = loads(text, source=request.profile, name=Path(request.profile).stem)
    directory = ensure_state_dirs(state_root(environ), profile.name)
    holder = lock_holder(directory / "lock")
    if holder is not None:
        raise TransientFailure(f"{profile.name} is being served (daemon PID {holder}); tune starts and stops the "
                               f"server itself and never stops one it did not start: `vllm-launch down "
                               f"{request.profile}` first (or tune a copy with another name and port)")

    @functools.cache
    def plan_for(sets: tuple[str, ...]) -> PlanReport:  # once per candidate: pruning and ordering share it
        return run_plan(PlanRequest(request.profile, sets=sets, gpu_inventory=request.gpu_inventory), environ)

    base = plan_for(())
    shared_prefix = request.workload == "agent" and (request.settings.shared_prefix > 0
                                                     or request.settings.tools != "none")  # the tools are one
    grid = grid_.parse_grid(request.grids, base.catalog) if request.grids else \
        grid_.default_grid(profile, base, shared_prefix=shared_prefix)
    everyone = grid_.expand(grid, baseline=grid_.baseline_values(base))
    kept, pruned = grid_.prune(request.profile, everyone, plan_for=plan_for)
    ordered = grid_.order(kept, {c: plan_for(c.sets()) for c in kept})
    settings = workload_settings(request.workload, request.settings)
    gpu = _box(profile.launcher.device, base)
    setup = MeasureSetup(spec=request.profile, profile=profile, target=resolve_target(request.profile, environ),
                         slo=request.slo, workload=settings, rounds=request.rounds, most_users=request.most_users,
                         deadline=None if request.budget_s is None else started + request.budget_s, environ=environ)
    store = Store.private(directory / "tune")
    profile_bytes = text.encode()
    workload_key = workload_key_of(request, settings)
    progress = Progress(len(ordered), enabled=not request.as_json and sys.stderr.isatty())
    results: list[tuple[Measured, dict[tuple[int, int], Level]]] = []
    interrupted = False
    with _sigterm_interrupts(), progress:
        for candidate in ordered:
            key = key_of(profile_bytes=profile_bytes, overrides=candidate.overrides, workload=workload_key,
                         slo=request.slo.canonical(), vllm_version=base.version.version, gpu=gpu)
            record = Record(key) if request.fresh else store.load(key)
            progress.candidate(candidate)
            run = CandidateRun(setup, candidate, record, store, on_level=progress.level)
            try:
                results.append((run.run(), record.levels))
            except KeyboardInterrupt:
                results.append((run.measured, record.levels))
                interrupted = True
                break
            progress.done()
            if candidate.baseline and run.measured.status in ("infeasible", "transient"):
                # Every candidate is the baseline plus a flag: what stops the profile as written (a port, the
                # GPU, the model) would stop them all, and would be recorded against each one.
                raise TransientFailure(f"the profile as written did not start ({run.measured.reason}); tune "
                                       f"measures every candidate against it: fix that first (`vllm-launch up "
                                       f"{request.profile}` shows why)")
    doc = _document(request, base, gpu, settings, results, pruned, ordered, time.monotonic() - started, interrupted)
    _finish(request, doc, results)
    return EX_INTERRUPTED if interrupted else EX_OK


def _box(device: str, base: PlanReport) -> str:
    """What the figures were measured on (part of the cache key): the GPU and its count, or the CPU backend
    and the memory it sized the KV cache from."""
    if base.gpu is None:
        return "cpu" if device == "cpu" else "unknown GPU"
    if device == "cpu":
        return f"CPU backend ({base.gpu.model.nvml_mib / 1024:.1f} GiB of host memory)"
    return base.gpu.describe()


def _check_request(request: Request) -> None:
    if request.workload not in WORKLOADS:
        raise UsageError(f"--workload {request.workload}: use agent or random")
    if request.rounds < 1 or request.rounds > 10:
        raise UsageError(f"--rounds {request.rounds}: give 1 to 10 (2 measures the spread between rounds)")
    if request.most_users < 1 or request.most_users > 4096:
        raise UsageError(f"--max-users {request.most_users}: give 1 to 4096")
    if request.budget_s is not None and request.budget_s <= 0:
        raise UsageError("--budget: give a positive duration such as 45m")
    if request.plot and not plotting_available():
        raise UsageError("--plot needs matplotlib: pip install 'vllm-launch[plot]'")
    if request.write:
        refuse_existing(request.write)  # now, not after an hour of measuring


def _document(request: Request, base: PlanReport, gpu: str, settings: Settings,
              results: list[tuple[Measured, dict[tuple[int, int], Level]]], pruned: list[tuple[Candidate, str]],
              ordered: list[Candidate], wall_s: float, interrupted: bool) -> dict[str, Any]:
    scored = [report.score(m, levels) for m, levels in results]
    verdict = report.decide(scored)
    reached = {m.candidate for m, _ in results}
    why_not = "interrupted before it ran" if interrupted else "the --budget ran out before it ran"
    candidates = [report.candidate_doc(s) for s in scored]
    candidates += [report.not_run_doc(c, why_not) for c in ordered if c not in reached]
    candidates += [report.pruned_doc(c, reason) for c, reason in pruned]
    best = verdict.best if verdict.kind == "winner" else None
    return {
        "profile": request.profile, "model": base.profile.model, "vllm_version": base.version.version, "gpu": gpu,
        "slo": str(request.slo), "slo_canonical": request.slo.canonical(), "workload_name": request.workload,
        "workload": asdict(settings), "requests_per_level": requests_needed(request.slo), "rounds": request.rounds,
        "most_users": request.most_users, "candidates": candidates, "verdict": verdict.kind,
        "winner": None if best is None else {**report.candidate_doc(best), "gains": verdict.gains()},
        "summary": verdict.summary, "interrupted": interrupted,
        "budget_exhausted": any(c["status"] in ("budget", "not_run") for c in candidates) and not interrupted,
        "wall_s": round(wall_s, 1), "written": None,
    }


def _finish(request: Request, doc: dict[str, Any], results: list[tuple[Measured, dict[tuple[int, int], Level]]]
            ) -> None:
    winner = doc["winner"]
    if request.write and winner is not None and not doc["interrupted"]:
        gains = winner["gains"]
        evidence = [f"SLO {doc['slo']} ({doc['workload_name']} workload, {doc['rounds']} round(s), "
                    f"{doc['requests_per_level']} requests a level)",
                    f"{winner['label']}: {winner['users_at_slo']} users at the SLO, "
                    f"{winner['output_tokens_per_s']} output tokens/s; gain over the profile as written: users "
                    f"x{gains['users']}, output tokens/s x{gains['output_tokens_per_s']}",
                    f"vLLM {doc['vllm_version']}, {doc['gpu']}"]
        sets = tuple(f"vllm.{flag}={value}" for flag, value in winner["overrides"].items())
        doc["written"] = str(write_profile(request.write, request.profile, sets, evidence))
    elif request.write:
        doc["summary"] += f"; {request.write} not written (no winner over the profile as written)"
    if request.plot:
        report.plot([(m.candidate.label, list(levels.values())) for m, levels in results], Path(request.plot))
    print(to_json(doc) if request.as_json else report.text(doc))


@contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM does what Ctrl-C does: the server is stopped in order, what was measured is kept."""
    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class Progress:
    """A rich progress bar on a terminal: candidates done, the one being measured, its last level, an ETA."""

    def __init__(self, total: int, *, enabled: bool) -> None:
        self.total, self.enabled = total, enabled
        self.bar: Any = None
        self.task: Any = None

    def __enter__(self) -> Progress:
        if self.enabled:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

            self.bar = Progress(TextColumn("tune"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                                TextColumn("{task.description}"), TimeElapsedColumn(), TimeRemainingColumn(),
                                transient=True)
            self.bar.start()
            self.task = self.bar.add_task("planning", total=self.total)
        return self

    def candidate(self, candidate: Candidate) -> None:
        if self.bar is not None:
            self.bar.update(self.task, description=f"{candidate.label}: starting")

    def level(self, level: Level) -> None:
        if self.bar is not None:
            verdict = "met" if level.met else "missed"
            self.bar.update(self.task, description=f"round {level.round + 1}, {level.users} users: {verdict}")

    def done(self) -> None:
        if self.bar is not None:
            self.bar.advance(self.task)

    def __exit__(self, *_: object) -> None:
        if self.bar is not None:
            self.bar.stop()
