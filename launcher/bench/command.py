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
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from launcher.bench import report, runner
from launcher.bench.client import Server, ServerError
from launcher.bench.stats import RequestResult, percentile
from launcher.bench.workload import Settings
from launcher.config import secrets
from launcher.config.load import load
from launcher.config.profile import Profile
from launcher.errors import EX_CONFIG, EX_OK, Outcome
from launcher.runstate import Phase, read_state
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


def resolve_target(spec: str, environ: Mapping[str, str]) -> Target:
    if spec.startswith(("http://", "https://")):
        return Target(spec, spec, environ.get("VLLM_API_KEY") or None, None, None)
    if not Path(spec).is_file():
        raise ServerError(f"{spec}: neither a profile file nor an http(s) URL; give PROFILE.yaml or "
                          "http://HOST:PORT", Outcome.USAGE)
    profile = load(spec)
    plan = vllm_command.build_plan(profile)
    key = secrets.resolve(profile, environ).get("VLLM_API_KEY")
    return Target(spec, plan.base_url, key, plan.served_model_name, profile)


def check_settings(settings: Settings, context: int, max_model_len: int | None) -> None:
    if max_model_len is not None and context > max_model_len:
        raise ServerError(f"--context {context} is above the server's max-model-len {max_model_len}; "
                          f"pass --context {max_model_len} or less", Outcome.CONFIG)
    first = settings.shared_prefix + settings.turn_tokens + settings.max_tokens
    if first > context:
        raise ServerError(f"--shared-prefix {settings.shared_prefix} + --turn-tokens {settings.turn_tokens} + "
                          f"--max-tokens {settings.max_tokens} = {first} tokens do not fit --context {context}; "
                          "lower one of them", Outcome.USAGE)
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
    server = Server(target.base_url, target.api_key)
    served = server.served(model or target.model)
    context = settings.context or served.max_model_len or 4096
    check_settings(settings, context, served.max_model_len)
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
    """`vllm-launch up PROFILE --set FLAG` until its state says serving; SIGTERM and wait on exit."""

    def __init__(self, spec: str, profile: Profile, setting: str, environ: dict[str, str]) -> None:
        self.argv = [sys.executable, "-m", "launcher", "up", spec, "--set", setting, "--log-format", "json"]
        self.state = state_root(environ) / profile.name / "state.json"
        self.environ = environ
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> supervised:
        self.proc = subprocess.Popen(self.argv, env=self.environ, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     start_new_session=True)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            code = self.proc.poll()
            if code is not None:
                tail = (self.proc.stderr.read() if self.proc.stderr else b"").decode(errors="replace").strip()
                raise ServerError(f"vllm-launch up {' '.join(self.argv[4:7])} exited {code} before serving"
                                  + (f": {tail.splitlines()[-1]}" if tail else ""),
                                  Outcome.CONFIG if code == EX_CONFIG else Outcome.TEMPFAIL)
            found = read_state(self.state)
            if found is not None and found.pid == self.proc.pid and found.phase is Phase.SERVING:
                return self
            time.sleep(0.5)
        self.__exit__()
        raise ServerError(f"the profile did not become ready within {READY_TIMEOUT_S:.0f}s", Outcome.TEMPFAIL)

    def __exit__(self, *_: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
