"""How close `vllm-launch plan`'s KV-token estimate comes to what vLLM really reported.

Data: tests/data/kv_observations/observations.yaml, real published start-up logs with
their GPU, model config and flags. The estimate uses only what an operator has before
launching (GPU name, config.json, flags, vLLM version). Printed: median and worst relative
error of kv_tokens, for our estimator and for two baselines computed in the same run:
"no reserve" (utilization × memory − weights) and GPUStack's rule (weights × 1.2 + 2 GiB).
Goal: median ≤ 10 %.

    .venv/bin/python benchmarks/kv_estimator.py [--weights-from-log] [--verbose]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from launcher.gpu import catalog  # noqa: E402
from launcher.plan import capacity, modelinfo  # noqa: E402
from launcher.units import GIB  # noqa: E402
from launcher.vllm.versions import semantics  # noqa: E402

DATA = ROOT / "tests" / "data" / "kv_observations"


def observations() -> list[dict[str, Any]]:
    return list(yaml.safe_load((DATA / "observations.yaml").read_text()))


def version_of(o: dict[str, Any]) -> str:
    """The logged version; for the V0 logs that state none, the V0 era their format dates them to."""
    if o.get("vllm_version"):
        return str(o["vllm_version"])
    return "0.6.6" if o.get("engine") == "v0" else "0.10.0"


def inputs(o: dict[str, Any], weights_from_log: bool) -> capacity.CapacityInputs:
    config = json.loads((DATA / o["model_config"]).read_text())
    arch = modelinfo.arch_from_config(config, o["model"])
    tp = int(o.get("tensor_parallel_size") or 1)
    count = int(o.get("gpu_count") or tp)
    if weights_from_log and o.get("model_loading_gib"):
        weights, source = int(o["model_loading_gib"] * GIB * tp), "log"
    else:
        weights, source = modelinfo.estimate_weight_bytes(arch), "config"
    model = catalog.lookup(o["gpu"])
    if model is None:
        raise SystemExit(f"{o['id']}: GPU {o['gpu']!r} is not in launcher/catalog.py")
    version = semantics(version_of(o))
    max_len = int(o.get("max_model_len") or arch.max_position_embeddings or 4096)
    return capacity.CapacityInputs(
        arch=arch, weights_bytes=weights, weights_source=source, gpu=catalog.GpuSpec(model, count, "table"),
        version=version, utilization=float(o["gpu_memory_utilization"]), max_model_len=max_len,
        kv_cache_dtype=str(o.get("kv_cache_dtype") or "auto"), tensor_parallel_size=tp,
        enforce_eager=bool(o.get("enforce_eager")), max_num_seqs=o.get("max_num_seqs"),
        max_num_batched_tokens=o.get("max_num_batched_tokens"), block_size=int(o.get("block_size") or 16))


def baselines(i: capacity.CapacityInputs) -> tuple[int, int]:
    per_token, _ = capacity.kv_bytes_per_token(i.arch, i.kv_cache_dtype, i.tensor_parallel_size)
    budget = i.gpu.total_bytes * i.utilization
    weights = i.weights_bytes / i.tensor_parallel_size
    no_reserve = max(0, int((budget - weights) / per_token))
    gpustack = max(0, int((budget - weights * 1.2 - 2 * GIB) / per_token))
    return no_reserve, gpustack


def relative(estimate: int, real: int) -> float:
    return abs(estimate - real) / real


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights-from-log", action="store_true",
                        help="use the log's 'Model loading took X GiB' (as --weights-gib would)")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    ours: list[float] = []
    plain: list[float] = []
    gpustack: list[float] = []
    rows = []
    for o in observations():
        i = inputs(o, args.weights_from_log)
        plan = capacity.estimate(i)
        real = int(o["kv_tokens"])
        base, stack = baselines(i)
        ours.append(relative(plan.kv_tokens, real))
        plain.append(relative(base, real))
        gpustack.append(relative(stack, real))
        rows.append((o["id"], real, plan.kv_tokens, ours[-1], o.get("approximate", False)))
    if args.verbose:
        for ident, real, est, err, approx in rows:
            print(f"  {ident:44s} real {real:>10,}  estimate {est:>10,}  error {err:6.1%}{'  (approximate)' if approx else ''}")
    median, worst = statistics.median(ours), max(ours)
    print(f"observations: {len(ours)} real vLLM logs; weights from {'the log' if args.weights_from_log else 'config.json'}")
    print(f"vllm-launch estimator: median error {median:.1%}, worst {worst:.1%}")
    print(f"baseline, no reserve:  median error {statistics.median(plain):.1%}, worst {max(plain):.1%}")
    print(f"baseline, GPUStack:    median error {statistics.median(gpustack):.1%}, worst {max(gpustack):.1%}")
    print(f"ratio (ours / no-reserve baseline, median): {median / statistics.median(plain):.2f}")
    print(f"goal median <= 10%: {'met' if median <= 0.10 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
