"""One candidate, measured: its server started through the supervisor when a level is first missing from the
cache, each level a run of bench's workload, the server stopped (and its GPU memory back) at the end.

Evidence before verdict: a level whose requests failed because the server went away is not a slow level.
Before and after every run the supervisor's state is read; a server that stopped serving (the engine died
and was restarted, or `up` ended) makes the candidate `died`, with the supervisor's own reason, and the
run that overlapped it is thrown away, not scored.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from launcher.bench import runner
from launcher.bench.client import Server, ServerError
from launcher.bench.command import Target, check_settings, supervised
from launcher.bench.stats import Totals, totals
from launcher.bench.workload import Settings, TextMaker
from launcher.config.profile import Profile
from launcher.errors import Outcome
from launcher.tune import slo as slo_
from launcher.tune.cache import Level, Record, Store
from launcher.tune.candidates import Candidate
from launcher.tune.search import Answer, users_at_slo

DEATH_GRACE_S = 30.0  # how long a failed run waits for the supervisor's verdict on the server


class CandidateStopped(Exception):
    """The candidate cannot be measured further; `status` says why (infeasible, died, failed, budget)."""

    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True, slots=True)
class MeasureSetup:
    """How every candidate is measured: the same workload, target and bounds for all of them (not a
    `launcher.vllm.command.Plan`, which is the argv and env of one launch)."""

    spec: str  # the profile's path, as `up` takes it
    profile: Profile
    target: Target
    slo: slo_.Slo
    workload: Settings  # users, turns, warmup and seed are set per level
    rounds: int
    most_users: int
    deadline: float | None  # time.monotonic() at which the budget ends
    environ: dict[str, str]
    ready_timeout_s: float = 3600.0


@dataclass
class Measured:
    """What measuring one candidate produced."""

    candidate: Candidate
    status: str  # measured, infeasible, transient, died, failed, budget, interrupted
    reason: str | None = None
    answer: Answer | None = None
    levels_measured: int = 0
    levels_reused: int = 0
    rung: dict[str, object] = field(default_factory=dict)  # what the supervisor's ladder changed, if anything


def level_settings(setup: MeasureSetup, round_: int, users: int) -> Settings:
    """The workload of one level: enough requests to fill the SLO's highest percentile, spread over `users`,
    with a seed of its own so that no level replays another's prompts into the prefix cache (every candidate
    gets the same seeds, so they all see the same prompts). The server was warmed before the first level."""
    needed = slo_.requests_needed(setup.slo)
    return replace(setup.workload, users=users, turns=max(1, math.ceil(needed / users)), duration_s=None,
                   warmup=0, seed=setup.workload.seed + 100_003 * round_ + users)


WARMUP_USERS = 4
WARMUP_TURNS = 2


def warmup_settings(setup: MeasureSetup) -> Settings:
    """The unscored run a fresh server gets before its first level. A server's first requests are slow (kernels
    compiled or tuned per batch shape, caches cold), and without this whichever level comes first, the
    baseline's 1 user, would pay for it and lose to candidates measured on a warm server. A few users at
    once, so more than one batch shape is warm; a seed no level uses, so nothing it caches helps a level."""
    return replace(setup.workload, users=min(WARMUP_USERS, setup.most_users), turns=WARMUP_TURNS, duration_s=None,
                   warmup=0, seed=setup.workload.seed - 1_000_003)


def figures_of(t: Totals) -> dict[str, float]:
    return {"ttft_p95_ms": t.ttft_ms["p95"], "tpot_p95_ms": t.tpot_ms["p95"],
            "output_tokens_per_s": t.output_tokens_per_s,
            "output_tokens_per_s_per_user": t.output_tokens_per_s_per_user, "requests": float(t.completed),
            "failed": float(t.failed)}


class CandidateRun:
    """The server of one candidate (started on the first level the cache does not hold) and its levels."""

    def __init__(self, setup: MeasureSetup, candidate: Candidate, record: Record, store: Store,
                 on_level: Callable[[Level], None]) -> None:
        self.setup, self.candidate, self.record, self.store = setup, candidate, record, store
        self.on_level = on_level
        self.server: supervised | None = None
        self.measured = Measured(candidate, "measured")
        # Of the server once it serves: how to reach it, the model it serves, the context, the word costs.
        self.client: Server | None = None
        self.model = ""
        self.context: int | None = None
        self.maker: TextMaker | None = None

    def run(self) -> Measured:
        if self.record.verdict is not None:  # cached: it could not start, or it died, on this same setup
            self.measured.status, self.measured.reason = self.record.verdict, self.record.diagnosis
            return self.measured
        try:
            self.measured.answer = users_at_slo(self.meets, most=self.setup.most_users, rounds=self.setup.rounds)
        except CandidateStopped as stop:
            self.measured.status, self.measured.reason = stop.status, stop.reason
            # The baseline's failure to start is not cached: it stops the tune, and is to be fixed, not remembered.
            # Nor is a transient one (a port or lock held, memory not back yet): the next run tries again.
            if stop.status == "died" or (stop.status == "infeasible" and not self.candidate.baseline):
                self.record.verdict, self.record.diagnosis = stop.status, stop.reason
                self.store.save(self.record)
        except KeyboardInterrupt:
            self.measured.status, self.measured.reason = "interrupted", "stopped by the operator"
            raise
        finally:
            self.stop()
        return self.measured

    def meets(self, round_: int, users: int) -> bool:
        cached = self.record.levels.get((round_, users))
        if cached is not None:
            self.measured.levels_reused += 1
            return cached.met
        if self.setup.deadline is not None and time.monotonic() >= self.setup.deadline:
            raise CandidateStopped("budget", "the --budget ran out before this candidate was fully measured")
        try:
            if self.server is None:
                self.start()  # and its warm-up run
            self.check_serving()
            level = self.measure(round_, users)
        except ServerError as exc:  # the benchmark itself failed (a void run, /tokenize refused)
            if self.server is None:
                raise CandidateStopped("infeasible", str(exc)) from None
            self.check_serving(wait=True)
            raise CandidateStopped("failed", str(exc)) from None
        # A death during the run voids it: raise before it is recorded. Failed requests accuse the server; the
        # supervisor's state convicts it, so give it the time it takes to see a dead engine.
        self.check_serving(wait=level.figures.get("failed", 0.0) > 0)
        self.record.levels[(round_, users)] = level
        self.store.save(self.record)
        self.measured.levels_measured += 1
        self.on_level(level)
        return level.met

    def start(self) -> None:
        server = supervised(self.setup.spec, self.setup.profile, self.candidate.sets(), self.setup.environ,
                            ready_timeout_s=self.setup.ready_timeout_s)
        try:
            server.__enter__()
        except ServerError as exc:
            if exc.settled:  # exit 78, or the ladder tried every rung: the profile and flags decided it
                raise CandidateStopped("infeasible", str(exc)) from None
            if exc.outcome is Outcome.TEMPFAIL:
                raise CandidateStopped("transient", f"{exc} (a failure a later try may not meet: not cached)") \
                    from None
            raise
        self.server = server
        if server.ready is not None:
            self.measured.rung = dict(server.ready.rung)
        target = self.setup.target
        client = self.client = Server(target.base_url, target.api_key, ca_file=target.ca_file)
        served = client.served(self.setup.target.model)
        self.model = served.model
        self.context = self.setup.workload.context or served.max_model_len or 4096
        check_settings(replace(self.setup.workload, users=1), self.context, served.max_model_len,
                       runner.tool_tokens(client, served.model, self.setup.workload))
        self.maker = TextMaker(lambda text: client.count_tokens(served.model, text=text))
        self.run_workload(replace(warmup_settings(self.setup), context=self.context))

    def check_serving(self, wait: bool = False) -> None:
        """CandidateStopped("died") when the server no longer serves; with `wait`, after watching the
        supervisor's state for up to DEATH_GRACE_S (it needs a moment to see an engine die)."""
        deadline = time.monotonic() + (DEATH_GRACE_S if wait else 0.0)
        while True:
            lost = self.server.lost() if self.server is not None else "not started"
            if lost is not None:
                raise CandidateStopped("died", lost)
            if time.monotonic() >= deadline:
                return
            time.sleep(0.5)

    def run_workload(self, settings: Settings) -> runner.Run:
        if self.client is None:
            raise RuntimeError("run_workload before start")
        prepared = runner.prepare(self.client, self.model, settings, settings.context or 4096, maker=self.maker)
        run = runner.run(self.client, prepared, settings)
        if run.interrupted:
            raise KeyboardInterrupt  # the operator stopped it: the partial run is not scored
        return run

    def measure(self, round_: int, users: int) -> Level:
        run = self.run_workload(replace(level_settings(self.setup, round_, users), context=self.context))
        level_totals = totals(run.results, run.duration_s, users)
        broken = tuple(self.setup.slo.violations(level_totals))
        return Level(round_, users, not broken, figures_of(level_totals), broken)

    def stop(self) -> None:
        if self.server is not None:
            self.server.__exit__()
            self.server = None
