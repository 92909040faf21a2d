"""The `vllm-launch` command line: the only place where errors become exit codes."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from launcher import __version__
from launcher.errors import (
    EX_ARGPARSE_USAGE,
    EX_BROKEN_PIPE,
    EX_CONFIG,
    EX_INTERRUPTED,
    EX_OK,
    EXIT_CODES,
    LauncherError,
    UsageError,
)

if TYPE_CHECKING:
    from launcher.bench.workload import Settings

EPILOG = """exit codes: 0 clean stop · 2 usage · 75 start-up failed in a way a later try may fix (ladder or
restart budget exhausted) · 78 the profile, a flag, the model or the GPU can never work as configured"""


def _add_set(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                        help="override a profile key, e.g. --set vllm.max-model-len=32768 (repeatable)")


def _add_gpu_inventory(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--gpu-inventory", metavar="FILE",
                        help="read the GPUs from an inventory file (YAML/JSON) instead of NVML")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vllm-launch", description="Turn a YAML profile into a running, healthy `vllm serve`.",
        epilog=EPILOG)
    parser.add_argument("--version", action="version", version=f"vllm-launch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    up = sub.add_parser("up", help="preflight, plan, launch, recover, serve until SIGTERM", epilog=EPILOG)
    up.add_argument("profile", metavar="PROFILE", nargs="?",
                    help="the profile (in a container: else $VLLM_LAUNCH_PROFILE)")
    _add_set(up)
    _add_gpu_inventory(up)
    _add_node_rank(up)
    up.add_argument("--container", action="store_true",
                    help="container mode (automatic with RUNPOD_POD_ID or as PID 1): a failure keeps the pod up "
                         "with a page saying why, instead of a crash loop")
    up.add_argument("-v", "--verbose", action="store_true",
                    help="vLLM's raw output on the console too when launcher.log_file keeps it (without a "
                         "log_file it is always shown)")
    up.add_argument("--log-format", choices=("auto", "json", "console"), default="auto",
                    help="the launcher's own log lines: JSON when stdout is not a terminal (auto)")

    plan = sub.add_parser("plan", help="capacity plan, exact argv and ladder; launches nothing", epilog=EPILOG)
    plan.add_argument("profile", metavar="PROFILE", nargs="?")
    plan.add_argument("--gpu", metavar="SPEC", help='simulate a GPU: l40s, "a100-80gb x2", "mem=79.2GiB,cc=8.0,count=2"')
    _add_gpu_inventory(plan)
    plan.add_argument("--model-config", metavar="FILE", help="the model's config.json (else: local dir, HF cache, "
                      "shipped configs)")
    plan.add_argument("--weights-gib", type=float, metavar="X", help="weights per instance in GiB, e.g. from a "
                      "previous run's \"Model loading took X GiB\"")
    plan.add_argument("--vllm-version", metavar="V", help="plan for this vLLM version (default: installed, else "
                      "the newest known)")
    plan.add_argument("--from-log", metavar="FILE", help="calibrate from an existing vLLM log of this setup (its "
                      "logged KV memory), e.g. /workspace/vllm.log")
    _add_set(plan)
    _add_node_rank(plan)
    plan.add_argument("--json", action="store_true", help="machine-readable output (stable keys)")

    preflight = sub.add_parser("preflight", help="GPU inventory and the checks that prevent doomed launches",
                               epilog=EPILOG)
    preflight.add_argument("profile", metavar="PROFILE", nargs="?")
    _add_gpu_inventory(preflight)
    _add_set(preflight)
    preflight.add_argument("--json", action="store_true")

    diagnose = sub.add_parser("diagnose", help="classify a vLLM log: failure class, numbers, remedy", epilog=EPILOG)
    diagnose.add_argument("logfile", metavar="LOGFILE", help="a vLLM log file, or - for standard input")
    diagnose.add_argument("--profile", metavar="PROFILE", help="say what this profile's ladder would do")
    diagnose.add_argument("--json", action="store_true")

    status = sub.add_parser("status", help="phase, pid, attempt, rung, KV capacity of a running profile")
    status.add_argument("profile", metavar="PROFILE", nargs="?")
    status.add_argument("--json", action="store_true")
    status.add_argument("--watch", action="store_true",
                        help="a live view of PROFILE, refreshed every 2 s, until Ctrl-C")

    down = sub.add_parser("down", help="stop the daemon that serves PROFILE and wait for a clean exit")
    down.add_argument("profile", metavar="PROFILE")
    down.add_argument("--timeout", type=float, default=120.0, metavar="SECONDS")

    render = sub.add_parser("render", help="what a multi-node profile needs on a cluster, printed (writes nothing)",
                            epilog=EPILOG)
    kinds = render.add_subparsers(dest="kind", metavar="KIND", required=True)
    lws = kinds.add_parser("lws", help="a Kubernetes LeaderWorkerSet, its ConfigMap and the leader's Service")
    lws.add_argument("profile", metavar="PROFILE")
    lws.add_argument("--image", help="the container image (vllm-launch and vLLM; default: the Dockerfile's, "
                     "vllm-launch:vVERSION for the vLLM release whose flags the launcher ships)")
    lws.add_argument("--gpus-per-node", type=int, metavar="N", help="nvidia.com/gpu per pod (default: the "
                     "profile's tensor × pipeline parallel ÷ nodes.count)")
    lws.add_argument("--namespace", default="default", metavar="NS")
    unit = kinds.add_parser("systemd", help="the drop-in that gives one bare-metal node its rank")
    unit.add_argument("profile", metavar="PROFILE")
    unit.add_argument("--node-rank", type=int, required=True, metavar="N")

    bench = sub.add_parser("bench", help="an agent's multi-turn workload against the served model: TTFT, TPOT, "
                           "throughput, prefix-cache hit rate", epilog=EPILOG)
    bench.add_argument("target", metavar="PROFILE|URL", help="a profile (its URL, model and key) or http://HOST:PORT "
                       "(the key from VLLM_API_KEY)")
    bench.add_argument("--users", type=int, default=4, help="concurrent users (default 4)")
    bench.add_argument("--turns", type=int, default=4, help="turns per user without --duration (default 4)")
    bench.add_argument("--context", type=int, metavar="TOKENS", help="a conversation ends at this size "
                       "(default: the server's max-model-len)")
    bench.add_argument("--shared-prefix", type=int, default=512, metavar="TOKENS",
                       help="the system prompt every user shares (default 512)")
    bench.add_argument("--turn-tokens", type=int, default=128, metavar="TOKENS",
                       help="new user text each turn (default 128)")
    bench.add_argument("--max-tokens", type=int, default=64, metavar="M", help="output tokens per turn (default 64)")
    bench.add_argument("--duration", type=float, metavar="S", help="run for S seconds (conversations start over "
                       "at --context) instead of --turns")
    bench.add_argument("--warmup", type=int, default=1, metavar="K", help="requests sent first, not counted")
    bench.add_argument("--seed", type=int, default=0)
    bench.add_argument("--model", help="the served model name (default: the profile's, or the first listed)")
    bench.add_argument("--ignore-eos", action="store_true", help="always generate --max-tokens tokens")
    _add_tools(bench)
    bench.add_argument("--json", action="store_true", help="the result as JSON (stable keys, see docs/commands.md)")
    bench.add_argument("--plot", metavar="FILE.png", help="TTFT and TPOT distributions (needs the `plot` extra)")
    bench.add_argument("--compare", choices=("prefix-caching",), help="with a PROFILE: run it with and without "
                       "enable-prefix-caching through the supervisor, side by side")

    _add_tune(sub)

    completion = sub.add_parser("completion", help="the shell's completion script, printed: "
                                "vllm-launch completion bash > /etc/bash_completion.d/vllm-launch")
    completion.add_argument("shell", choices=("bash", "zsh"))
    return parser


def _add_tools(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tools", choices=("agent", "none"), default="agent", help="agent: a coding agent's dozen "
                        "tool definitions in every request, tool_choice auto (default); none: no tools")


def _add_tune(sub: Any) -> None:
    tune = sub.add_parser("tune", help="how many agent users the box serves within a latency target, and the "
                          "vllm serve flags that serve the most", epilog=EPILOG)
    tune.add_argument("profile", metavar="PROFILE")
    tune.add_argument("--slo", required=True, metavar="TERMS", help="the latency target, e.g. "
                      "'ttft_p95<=2s,tpot_p95<=80ms' (ttft, tpot, itl, e2el at mean/p50/p95/p99; user_tok_s>=N)")
    tune.add_argument("--grid", action="append", default=[], metavar="FLAG=V1,V2",
                      help="candidate values of one vllm serve flag, e.g. --grid max-num-seqs=32,64,128 (repeatable; "
                           "default: a small grid around vLLM's own defaults for this GPU)")
    tune.add_argument("--workload", choices=("agent", "random"), default="agent",
                      help="agent: bench's multi-turn chats over a shared system prompt (default); random: one-turn "
                           "prompts that share nothing")
    tune.add_argument("--budget", metavar="DURATION", help="stop cleanly after this long, e.g. 45m (the likeliest "
                      "winners run first)")
    tune.add_argument("--rounds", type=int, default=2, help="times each search is repeated (default 2)")
    tune.add_argument("--max-users", type=int, default=256, metavar="N", help="the most users tried (default 256)")
    tune.add_argument("--fresh", action="store_true", help="measure again what earlier runs cached")
    tune.add_argument("--context", type=int, metavar="TOKENS", help="a conversation ends at this size (default: the "
                      "server's max-model-len)")
    tune.add_argument("--shared-prefix", type=int, default=512, metavar="TOKENS", help="agent: the shared system "
                      "prompt (default 512)")
    tune.add_argument("--turn-tokens", type=int, default=128, metavar="TOKENS", help="new user text each turn "
                      "(default 128)")
    tune.add_argument("--max-tokens", type=int, default=64, metavar="M", help="output tokens per turn (default 64)")
    tune.add_argument("--seed", type=int, default=0)
    _add_tools(tune)
    _add_gpu_inventory(tune)
    tune.add_argument("--json", action="store_true", help="the result as JSON (stable keys, see docs/tune.md)")
    tune.add_argument("--plot", metavar="FILE.png", help="a Pareto chart, per-user against total output tokens/s "
                      "(needs the `plot` extra)")
    tune.add_argument("--write", metavar="FILE", help="write the winning profile to FILE (a new file), ready for up")


def _add_node_rank(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--node-rank", type=int, metavar="N", help="with a nodes: section, this node's rank (0: the "
                        "head, which serves the API); else $VLLM_LAUNCH_NODE_RANK or LeaderWorkerSet's index")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors, 0 on --help
        return int(exc.code or 0)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EX_ARGPARSE_USAGE
    try:
        handler = COMMANDS[args.command]
        return handler(args)
    except LauncherError as exc:
        print(f"vllm-launch: {exc}", file=sys.stderr)
        return EXIT_CODES[exc.outcome]
    except KeyboardInterrupt:
        return EX_INTERRUPTED
    except BrokenPipeError:
        # `vllm-launch diagnose LOG | head`: the reader left. Stop quietly; Python's flush at exit must not fail too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EX_BROKEN_PIPE


def cmd_plan(args: argparse.Namespace) -> int:
    from launcher.plan import render
    from launcher.plan.problems import Severity
    from launcher.plan.report import PlanRequest, run_plan

    report = run_plan(PlanRequest(
        profile=args.profile, sets=tuple(args.sets), gpu=args.gpu, gpu_inventory=args.gpu_inventory,
        model_config=args.model_config, weights_gib=args.weights_gib, vllm_version=args.vllm_version,
        from_log=args.from_log, node_rank=args.node_rank))
    if args.json:
        _print_json(report.to_dict())
    else:
        print(render.plan_text(report))
    blocking = any(p.severity is Severity.ERROR for p in report.problems)
    return EX_CONFIG if blocking else EX_OK


def cmd_diagnose(args: argparse.Namespace) -> int:
    from launcher.config.load import load
    from launcher.plan import render
    from launcher.run import ladder
    from launcher.vllm.diagnose import diagnose_log
    from launcher.vllm.log_export import printed_lines
    from launcher.vllm.phases import short

    try:
        if args.logfile == "-":
            diagnosis, clock = diagnose_log(printed_lines(sys.stdin))
        else:
            with open(args.logfile, encoding="utf-8", errors="replace") as handle:
                diagnosis, clock = diagnose_log(printed_lines(handle))
    except OSError as exc:
        raise UsageError(f"cannot read {args.logfile}: {exc.strerror}") from None
    prof = load(args.profile) if args.profile else None
    remedy = ladder.describe_remedy(diagnosis, prof)
    if args.json:
        _print_json({**diagnosis.to_dict(), "remedy": remedy, "phases": clock.to_dict()})
    else:
        print(render.diagnosis_text(diagnosis, remedy, args.logfile))
        phases = clock.seconds()
        if phases:
            total = clock.total()
            print(f"  {'phases':<18}{short(phases, clock.compile_cache, limit=len(phases))}"
                  + (f" (start-up {total:.0f}s)" if total is not None else ""))
    return EX_OK


def cmd_preflight(args: argparse.Namespace) -> int:
    from launcher.plan import render
    from launcher.plan.report import run_preflight

    result = run_preflight(args.profile, sets=tuple(args.sets), inventory_path=args.gpu_inventory)
    if args.json:
        _print_json(result.to_dict())
    else:
        print(render.preflight_text(result))
    return EX_CONFIG if result.blocking else EX_OK


def cmd_up(args: argparse.Namespace) -> int:
    from launcher.run import daemon

    return daemon.up(args.profile, sets=tuple(args.sets), inventory_path=args.gpu_inventory,
                     log_format=args.log_format, container_mode=args.container,
                     verbose=args.verbose, node_rank=args.node_rank)


def cmd_status(args: argparse.Namespace) -> int:
    from launcher.observe import status

    if args.watch:
        if not args.profile or args.json:
            raise UsageError("status --watch: give one PROFILE and no --json (e.g. vllm-launch status qwen3 --watch)")
        from launcher.observe import watch

        return watch.watch_command(args.profile)
    return status.status_command(args.profile, as_json=args.json)


def cmd_down(args: argparse.Namespace) -> int:
    from launcher.observe import down

    return down.down_command(args.profile, timeout=args.timeout)


def cmd_render(args: argparse.Namespace) -> int:
    from launcher.config import document
    from launcher.config.load import load
    from launcher.deploy import render

    profile = load(args.profile)
    if args.kind == "systemd":
        print(render.systemd_text(profile, args.node_rank), end="")
        return EX_OK
    documents = render.lws_manifest(profile, document.read_text(args.profile), image=args.image or render.DEFAULT_IMAGE,
                                    gpus_per_node=args.gpus_per_node, namespace=args.namespace)
    print(render.lws_text(documents, render.secret_name(profile)), end="")
    return EX_OK


def cmd_bench(args: argparse.Namespace) -> int:
    from launcher.bench.workload import Settings

    settings = Settings(users=args.users, turns=args.turns, context=args.context, shared_prefix=args.shared_prefix,
                        turn_tokens=args.turn_tokens, max_tokens=args.max_tokens, duration_s=args.duration,
                        warmup=args.warmup, seed=args.seed, ignore_eos=args.ignore_eos, tools=args.tools)
    return bench_main(args.target, settings, model=args.model, as_json=args.json, plot_path=args.plot,
                      compare=args.compare)


def bench_main(spec: str, settings: Settings, **kwargs: Any) -> int:
    """`bench` says "vllm-launch bench:" on its one error line; Ctrl-C in the measured run is handled by the
    runner (a partial report), and before it ends here."""
    from launcher.bench import command
    from launcher.bench.client import ServerError

    try:
        return command.bench(spec, settings, **kwargs)
    except (ServerError, LauncherError) as exc:
        print(f"vllm-launch bench: {exc}", file=sys.stderr)
        return EXIT_CODES[exc.outcome]
    except KeyboardInterrupt:  # in the prompt sizing or the warm-up: the measured run's own Ctrl-C reports
        print("vllm-launch bench: interrupted before the measured run began; nothing was measured", file=sys.stderr)
        return EX_INTERRUPTED


def cmd_tune(args: argparse.Namespace) -> int:
    """`tune` says "vllm-launch tune:" on its one error line, as bench does."""
    from launcher.bench.client import ServerError
    from launcher.bench.workload import Settings
    from launcher.tune import slo
    from launcher.tune.command import Request, tune
    from launcher.units import parse_duration

    try:
        budget = None
        if args.budget is not None:
            try:
                budget = parse_duration(args.budget)
            except ValueError as exc:
                raise UsageError(f"--budget {args.budget}: {exc}") from None
        settings = Settings(context=args.context, shared_prefix=args.shared_prefix, turn_tokens=args.turn_tokens,
                            max_tokens=args.max_tokens, seed=args.seed, tools=args.tools)
        request = Request(profile=args.profile, slo=slo.parse(args.slo), grids=tuple(args.grid),
                          workload=args.workload, settings=settings, budget_s=budget, rounds=args.rounds,
                          most_users=args.max_users, fresh=args.fresh, as_json=args.json, plot=args.plot,
                          write=args.write, gpu_inventory=args.gpu_inventory)
        return tune(request)
    except (ServerError, LauncherError) as exc:
        print(f"vllm-launch tune: {exc}", file=sys.stderr)
        return EXIT_CODES[exc.outcome]
    except KeyboardInterrupt:  # before the first candidate: nothing was measured
        print("vllm-launch tune: interrupted before anything was measured", file=sys.stderr)
        return EX_INTERRUPTED


def cmd_completion(args: argparse.Namespace) -> int:
    from launcher.completion import script

    return script(build_parser(), args.shell)


COMMANDS = {"plan": cmd_plan, "diagnose": cmd_diagnose, "preflight": cmd_preflight, "up": cmd_up,
            "status": cmd_status, "down": cmd_down, "bench": cmd_bench, "render": cmd_render,
            "tune": cmd_tune, "completion": cmd_completion}


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False, default=str))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

