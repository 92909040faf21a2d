"""How close `vllm-launch plan`'s KV-token estimate comes to what vLLM really reported, in and out of sample.

Data: tests/data/kv_observations/observations.yaml, real published start-ups with their GPU, model
config, flags and version. The estimate uses what an operator has before launching (GPU name,
config.json, the checkpoint's size, flags, vLLM version). Printed, per start-up and as median and
worst relative error of kv_tokens:
- in sample: the reserve terms fitted on every start-up;
- leave-one-source-out: the terms refitted without each source (a repository or an issue thread),
  then scored on that source's start-ups;
- three baselines in the same run: no reserve (utilization × memory − weights), GPUStack's rule
  (weights × 1.2 + 2 GiB) and a constant 1.3 GiB per GPU.
Goal: leave-one-source-out median ≤ 5 %, worst ≤ 20 %. `--fit` prints the fitted terms.

    .venv/bin/python benchmarks/kv_estimator.py [--weights-from-config] [--verbose] [--fit]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from launcher.units import GIB, MIB  # noqa: E402
from tests.kv_observations import (  # noqa: E402
    cases,
    constant_reserve,
    fit,
    inputs,
    leave_one_source_out,
    observations,
    source_of,
    summary,
)


def relative(estimate: int, real: int) -> float:
    return abs(estimate - real) / real


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights-from-config", action="store_true",
                        help="weights from config.json arithmetic instead of the checkpoint's size")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--fit", action="store_true", help="print the fitted reserve terms")
    args = parser.parse_args()
    from_log = not args.weights_from_config
    scored = cases(from_log)
    model = fit(scored)
    loso = leave_one_source_out(scored)
    by_id = {o["id"]: o for o in observations()}
    baselines: dict[str, list[float]] = {"no reserve": [], "GPUStack (weights x 1.2 + 2 GiB)": [],
                                         "constant 1.3 GiB per GPU": []}
    for case in scored:
        i = inputs(by_id[case.ident], from_log)
        baselines["no reserve"].append(relative(constant_reserve(i, 0), case.real))
        weights = i.weights_bytes / (i.tensor_parallel_size * i.pipeline_parallel_size)
        baselines["GPUStack (weights x 1.2 + 2 GiB)"].append(
            relative(constant_reserve(i, int(weights * 0.2 + 2 * GIB)), case.real))
        baselines["constant 1.3 GiB per GPU"].append(relative(constant_reserve(i, int(1.3 * GIB)), case.real))
    if args.verbose:
        for case in scored:
            print(f"  {case.ident:48s} {case.regime:13s} real {case.real:>10,}  in-sample {case.error(model):6.1%}  "
                  f"out-of-sample {loso[case.ident]:6.1%}")
        excluded = [o for o in observations() if o.get("excluded_from_accuracy")]
        for o in excluded:
            print(f"  (not scored) {o['id']}: {o['excluded_from_accuracy']}")
    sources = {source_of(c) for c in scored}
    weights = "config.json" if args.weights_from_config else "the checkpoint size the log shows"
    print(f"observations: {len(scored)} scored real start-ups from {len(sources)} sources "
          f"({len(observations())} in the data); weights from {weights}")
    in_median, in_worst = summary(c.error(model) for c in scored)
    out_median, out_worst = summary(loso.values())
    print(f"vllm-launch, in sample:              median {in_median:5.1%}, worst {in_worst:5.1%}")
    print(f"vllm-launch, leave-one-source-out:   median {out_median:5.1%}, worst {out_worst:5.1%}")
    for name, errors in baselines.items():
        median, worst = summary(errors)
        print(f"baseline, {name + ':':33s} median {median:5.1%}, worst {worst:5.1%}")
    constant = statistics.median(baselines["constant 1.3 GiB per GPU"])
    print(f"ratio (ours out of sample / constant-reserve baseline, median): {out_median / constant:.2f}")
    print(f"goal median <= 5%, worst <= 20% out of sample: {'met' if out_median <= 0.05 and out_worst <= 0.20 else 'NOT met'}")
    if args.fit:
        terms = ", ".join(f"{name}={getattr(model, name) // MIB} MiB" for name in model.__dataclass_fields__)
        print(f"fitted: {terms}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
