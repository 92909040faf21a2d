"""`status PROFILE --watch`: a live view of one profile, refreshed every INTERVAL_S until Ctrl-C.

Each refresh reads state.json and /metrics once; the previous refresh's read is the window's start, so
token rates, TTFT/TPOT and the advice cover the last interval (the first refresh: cumulative).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.text import Text

from launcher.errors import EX_OK
from launcher.observe import advice, drift
from launcher.observe.status import daemon_running
from launcher.run import health
from launcher.runstate import Phase, State, read_state
from launcher.statedir import state_root

INTERVAL_S = 2.0


@dataclass(slots=True)
class Watch:
    """What one refresh needs from the last: the previous /metrics read and when it was taken."""

    directory: Path
    read_metrics: Callable[[str], str | None] = health.metrics_text
    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    before: advice.Figures | None = None
    before_at: float | None = None

    def refresh(self) -> str:
        """One refresh: the rendered view."""
        found = read_state(self.directory / "state.json")
        if found is None:
            return f"{self.directory.name}: no state in {self.directory}"
        running = daemon_running(self.directory, found)
        url, ignored = drift.metrics_url(found.raw, found.url) if running and found.phase is Phase.SERVING \
            else (None, None)
        text = self.read_metrics(url) if url else None
        now = advice.Figures.from_text(text) if text is not None else None
        at = self.clock()
        before, elapsed = self.before, (at - self.before_at if self.before_at is not None else None)
        self.before, self.before_at = now, at if now is not None else None
        rung = found.raw.get("rung")
        argv = drift.child_cmdline(found.raw.get("child")) if running else None
        advised = advice.advise(before, now, found.capacity, found.decisions, argv,
                                rung if isinstance(rung, dict) else {}, self.wall(), fp8_kv=found.fp8_kv,
                                restart_window_s=found.restart_window_s, parser_errors=found.tool_parser_errors)
        return render(found, running, before, now, elapsed, advised, note=ignored)


def render(found: State, running: bool, before: advice.Figures | None, now: advice.Figures | None,
           elapsed: float | None, advised: list[advice.Advice], note: str | None = None) -> str:
    phase = found.phase if running or found.phase is None else f"dead (last phase: {found.phase})"
    lines = [f"{found.profile}: {phase}  (vllm-launch PID {found.pid})"]
    cap = found.capacity
    if cap is not None and cap.kv_tokens is not None:
        lines.append(f"  capacity   {cap.kv_tokens:,} KV tokens, {cap.sessions if cap.sessions is not None else '?'} "
                     f"sessions of {cap.max_model_len or '?'}")
    if now is None:
        lines.append("  live       no /metrics (not serving)")
    else:
        usage = f"{now.kv_usage * 100:.1f} %" if now.kv_usage is not None else "?"
        lines.append(f"  live       KV usage {usage}, running {now.running:.0f}, waiting {now.waiting:.0f}")
        if before is not None and elapsed:
            # Rates over the interval between two refreshes (counters only grow while vLLM runs on).
            prompt = max(now.prompt_tokens - before.prompt_tokens, 0.0) / elapsed
            generated = max(now.generation_tokens - before.generation_tokens, 0.0) / elapsed
            lines.append(f"  tokens     prompt {prompt:,.1f}/s, generation {generated:,.1f}/s (last {elapsed:.1f} s)")
    lines += [f"  advice     {a.text}" for a in advised]
    if note:
        lines.append(f"  note       {note}")
    return "\n".join(lines)


def watch_command(profile: str, environ: Mapping[str, str] | None = None, console: Console | None = None,
                  sleep: Callable[[float], None] = time.sleep, watch: Watch | None = None) -> int:
    """Refresh until Ctrl-C, which ends it with 0."""
    view = watch or Watch(state_root(environ) / Path(profile).stem)
    try:
        with Live(Text(view.refresh()), console=console or Console(), auto_refresh=False) as live:
            while True:
                sleep(INTERVAL_S)
                live.update(Text(view.refresh()), refresh=True)
    except KeyboardInterrupt:
        return EX_OK
