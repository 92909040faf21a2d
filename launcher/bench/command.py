"""`vllm-launch bench PROFILE|URL`: resolve the target, check it can be benchmarked as asked, run, report.

With a PROFILE the server is the one the profile serves (its URL, served name and API key); with a URL,
the key comes from VLLM_API_KEY. `--compare prefix-caching` starts the profile twice through the
supervisor (`vllm-launch up`), with and without `enable-prefix-caching`, and runs the same seeded workload
against each.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

from launcher.bench import report, runner
from launcher.bench.client import Server, ServerError
from launcher.bench.stats import RequestResult, percentile
from launcher.bench.workload import Settings
from launcher.config import secrets
from launcher.config.load import load
from launcher.config.profile import Profile
from launcher.errors import EX_CONFIG, EX_OK, Outcome
from launcher.run import listener, processes
from launcher.run.parentwatch import PARENT_VARIABLE
from launcher.runstate import Phase, State, read_state
from launcher.statedir import state_root
from launcher.vllm import command as vllm_command

READY_TIMEOUT_S = 3600.0  # --compare: how long one start of the profile may take


@dataclass(frozen=True, slots=True)
class Target:
    label: str
    base_url: str
    api_key: str | None
    model: str | None
    profile: Profile | None
    ca_file: str | None = None  # https to a profile's server: its ssl-ca-certs (api.tls_context)


def resolve_target(spec: str, environ: Mapping[str, str]) -> Target:
    if spec.startswith(("http://", "https://")):
        return Target(spec, spec, environ.get("VLLM_API_KEY") or None, None, None)
    if not Path(spec).is_file():
        raise ServerError(f"{spec}: neither a profile file nor an http(s) URL; give PROFILE.yaml or "
                          "http://HOST:PORT", Outcome.USAGE)
    profile = load(spec)
    plan = vllm_command.build_plan(profile)
    key = secrets.resolve(profile, environ).get("VLLM_API_KEY")
    prove_served_by_us(profile, plan.base_url, environ)
    return Target(spec, plan.base_url, key, plan.served_model_name, profile, plan.ca_file)


def prove_served_by_us(profile: Profile, base_url: str, environ: Mapping[str, str]) -> None:
    """When a daemon of ours serves the profile here, the profile's key goes only to its vLLM: every listener on
    the port must be held by the processes its state records (same boot, PID and start time). A stranger
    listening beside it (vLLM 0.7.3–0.24 set SO_REUSEPORT) is refused, naming it. No such record: a server
    started some other way, benchmarked as before."""
    found = read_state(state_root(environ) / profile.name / "state.json")
    ours = {proc.pid for proc in processes.recorded_children(found.raw)} if found is not None else set()
    if not ours:
        return
    parts = urllib.parse.urlsplit(base_url)
    try:
        listener.verify_listeners(parts.port or 80, listener.resolve_host(parts.hostname or ""), ours)
    except listener.NotOurServer as exc:
        raise ServerError(f"{exc}; nothing was sent (the API key least of all): stop that process",
                          Outcome.CONFIG) from None


def check_settings(settings: Settings, context: int, max_model_len: int | None, tool_tokens: int = 0) -> None:
    """Refuses what cannot run, in one line with the fix; `tool_tokens`: what the agent tools add to every
    prompt, as the server counts them (runner.tool_tokens)."""
    if max_model_len is not None and context > max_model_len:
        raise ServerError(f"--context {context} is above the server's max-model-len {max_model_len}; "
                          f"pass --context {max_model_len} or less", Outcome.CONFIG)
    first = settings.shared_prefix + settings.turn_tokens + settings.max_tokens
    if first > context:
        raise ServerError(f"--shared-prefix {settings.shared_prefix} + --turn-tokens {settings.turn_tokens} + "
                          f"--max-tokens {settings.max_tokens} = {first} tokens do not fit --context {context}; "
                          "lower one of them", Outcome.USAGE)
    if first + tool_tokens > context:
        larger = "" if max_model_len is not None and first + tool_tokens > max_model_len else \
            f" or --context {first + tool_tokens}"
        raise ServerError(f"the agent tools ({tool_tokens} tokens as the server counts them) + --shared-prefix "
                          f"{settings.shared_prefix} + --turn-tokens {settings.turn_tokens} + --max-tokens "
                          f"{settings.max_tokens} = {first + tool_tokens} tokens do not fit --context {context}; "
                          f"pass --tools none{larger}", Outcome.USAGE)
    if settings.users < 1 or settings.turns < 1 or settings.max_tokens < 1:
        raise ServerError("--users, --turns and --max-tokens must be at least 1", Outcome.USAGE)


def bench(spec: str, settings: Settings, *, model: str | None = None, as_json: bool = False,
          plot_path: str | None = None, compare: str | None = None, environ: Mapping[str, str] | None = None) -> int:
    environ = dict(os.environ if environ is None else environ)
    if plot_path and not report.plotting_available():
        raise ServerError("--plot needs matplotlib: pip install 'vllm-launch[plot]'", Outcome.USAGE)
    if compare not in (None, "prefix-caching"):
        raise ServerError(f"--compare {compare}: only prefix-caching can be compared", Outcome.USAGE)
    target = resolve_target(spec, environ)
    if compare and target.profile is None:
        raise ServerError("--compare prefix-caching restarts the server with and without the flag: give a "
                          "PROFILE, not a URL (someone else's server cannot be restarted)", Outcome.USAGE)
    if compare and target.profile is not None:
        return _compare(target, target.profile, spec, settings, model, as_json, plot_path, environ)
    doc, run = measure(target, settings, model)
    _print(doc, as_json)
    if plot_path:
        report.plot([(target.label, run)], Path(plot_path))
    return EX_OK


def measure(target: Target, settings: Settings, model: str | None = None) -> tuple[dict[str, Any], runner.Run]:
    server = Server(target.base_url, target.api_key, ca_file=target.ca_file)
    served = server.served(model or target.model)
    context = settings.context or served.max_model_len or 4096
    check_settings(settings, context, served.max_model_len, runner.tool_tokens(server, served.model, settings))
    settings = replace(settings, context=context)
    prepared = runner.prepare(server, served.model, settings, context)
    live = LiveLine(settings)
    try:
        run = runner.run(server, prepared, settings, on_result=live.update)
    finally:
        live.close()
    doc = report.document(run, target=target.base_url, model=served.model, vllm_version=server.version(),
                          settings=settings)
    return doc, run


def _print(doc: Mapping[str, Any], as_json: bool) -> None:
    print(report.to_json(doc) if as_json else report.text(doc))


class LiveLine:
    """A progress bar with requests done, errors and the current TTFT p50 (rich, on a terminal only)."""

    def __init__(self, settings: Settings) -> None:
        self.progress: Any = None
        self.task: Any = None
        if not sys.stderr.isatty():
            return
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        total = None if settings.duration_s else settings.users * settings.turns
        self.progress = Progress(TextColumn("bench"), BarColumn(), TextColumn("{task.description}"),
                                 TimeElapsedColumn(), transient=True)
        self.progress.start()
        self.task = self.progress.add_task("starting", total=total)

    def update(self, results: list[RequestResult]) -> None:
        if self.progress is None:
            return
        done = [r.ttft_s * 1000 for r in results if r.ok]
        failed = len(results) - len(done)
        self.progress.update(self.task, completed=len(results), description=(
            f"{len(done)} done, {failed} errors, TTFT p50 {percentile(done, 50):.0f} ms"))

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()


def _compare(target: Target, profile: Profile, spec: str, settings: Settings, model: str | None, as_json: bool,
             plot_path: str | None, environ: dict[str, str]) -> int:
    docs: dict[str, dict[str, Any]] = {}
    runs: list[tuple[str, runner.Run]] = []
    for label, value in (("prefix caching on", "true"), ("prefix caching off", "false")):
        with supervised(spec, profile, f"vllm.enable-prefix-caching={value}", environ):
            doc, run = measure(target, settings, model)
        docs[label] = doc
        runs.append((label, run))
    table, ratios = report.compare(docs["prefix caching on"], docs["prefix caching off"])
    if as_json:
        print(report.to_json({"with_prefix_caching": docs["prefix caching on"],
                              "without_prefix_caching": docs["prefix caching off"], "ratios": ratios}))
    else:
        print(table)
    if plot_path:
        report.plot(runs, Path(plot_path))
    return EX_OK


class supervised:  # noqa: N801 - used as a context manager, like contextlib's
    """`vllm-launch up PROFILE --set FLAG ...` until its state says serving; SIGTERM and wait on exit.

    The child is the whole supervisor (preflight, ladder, readiness), in its own session so that a Ctrl-C
    at the terminal reaches only this process, which then stops it in order: vLLM's memory is given back
    before `__exit__` returns, and so before anything starts the next server. Should this process die
    without a word (SIGKILL), the child sees it gone and stops by itself (run/parentwatch.py)."""

    def __init__(self, spec: str, profile: Profile, sets: str | Sequence[str], environ: dict[str, str],
                 ready_timeout_s: float = READY_TIMEOUT_S) -> None:
        words = [spec, *(a for s in ((sets,) if isinstance(sets, str) else sets) for a in ("--set", s))]
        self.argv = [sys.executable, "-m", "launcher", "up", *words, "--log-format", "json"]
        self.label = " ".join(["vllm-launch up", *words])
        self.state = state_root(environ) / profile.name / "state.json"
        self.environ = environ
        self.ready_timeout_s = ready_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.errors: IO[bytes] | None = None
        self.ready: State | None = None

    def __enter__(self) -> supervised:
        # Its stderr goes to a file, not a pipe: nobody reads a pipe while it serves, and one that fills blocks it.
        self.errors = tempfile.TemporaryFile()
        # Its own session keeps a Ctrl-C ours alone; PARENT_VARIABLE makes it stop should we die unannounced.
        self.proc = subprocess.Popen(self.argv, env={**self.environ, PARENT_VARIABLE: str(os.getpid())},
                                     stdout=subprocess.DEVNULL, stderr=self.errors, start_new_session=True)
        deadline = time.monotonic() + self.ready_timeout_s
        try:
            while time.monotonic() < deadline:
                code = self.proc.poll()
                if code is not None:
                    raise ServerError(f"{self.label} exited {code} before serving: {self._why()}",
                                      Outcome.CONFIG if code == EX_CONFIG else Outcome.TEMPFAIL,
                                      settled=self._ladder_exhausted())
                found = read_state(self.state)
                if found is not None and found.pid == self.proc.pid and found.phase is Phase.SERVING:
                    self.ready = found
                    return self
                time.sleep(0.5)
        except BaseException:
            self.__exit__()
            raise
        self.__exit__()
        raise ServerError(f"the profile did not become ready within {self.ready_timeout_s:.0f}s", Outcome.TEMPFAIL)

    def lost(self) -> str | None:
        """None while the server that became ready still serves; else what happened to it (the engine died
        and the supervisor restarted it, or the supervisor ended)."""
        if self.proc is None or self.ready is None:
            return "not started"
        code = self.proc.poll()
        if code is not None:
            return f"{self.label} exited {code}: {self._why()}"
        now = read_state(self.state)
        if now is None or now.pid != self.proc.pid:
            return "its state.json is gone or names another process"
        before, after = _restarts(self.ready), _restarts(now)
        if after > before or now.phase is not Phase.SERVING:
            last = now.decisions[-1] if now.decisions else None
            return f"the server stopped serving ({now.phase or 'unknown phase'}, {after} restarts)" + (
                f": {last.reason}" if last is not None and after > before else "")
        return None

    def _ladder_exhausted(self) -> bool:
        """Whether the run's own state says it stopped because every rung the profile allows failed."""
        found = read_state(self.state)
        return (found is not None and self.proc is not None and found.pid == self.proc.pid
                and found.raw.get("ladder_exhausted") is True)

    def _why(self) -> str:
        """The run's own error from state.json when it wrote one, else the last line it printed."""
        found = read_state(self.state)
        if found is not None and self.proc is not None and found.pid == self.proc.pid and found.error:
            return found.error[:500]
        tail = b""
        if self.errors is not None:
            size = self.errors.seek(0, os.SEEK_END)
            self.errors.seek(max(0, size - 65536))
            tail = self.errors.read()
        lines = tail.decode(errors="replace").strip().splitlines()
        return lines[-1][:500] if lines else "no output"

    def __exit__(self, *_: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if self.errors is not None:
            self.errors.close()
            self.errors = None


def _restarts(state: State) -> int:
    return sum(state.counts.get("restarts", {}).values())
