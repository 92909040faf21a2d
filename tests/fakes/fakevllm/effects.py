"""What a loading vLLM does besides printing lines: tqdm progress bars redrawn with \\r, silent downloads."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from fakevllm.common import write
from fakevllm.scenario import Download, ProgressBar

BAR_LABEL = "Loading safetensors checkpoint shards"
Sleep = Callable[[float], object]


def _clock(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes:02d}:{secs:02d}"


def bar_text(done: int, total: int, elapsed: float) -> str:
    """One tqdm redraw: `...:  25% Completed | 1/4 [00:01<00:03,  1.00s/it]` (vLLM's bar format)."""
    percent = 100 * done // total
    if done == 0 or elapsed <= 0:
        timing = f"{_clock(elapsed)}<?, ?it/s"
    else:
        per_item = elapsed / done
        rate = f"{per_item:5.2f}s/it" if per_item >= 1 else f"{1 / per_item:5.2f}it/s"
        timing = f"{_clock(elapsed)}<{_clock(per_item * (total - done))}, {rate}"
    return f"{BAR_LABEL}: {percent:3d}% Completed | {done}/{total} [{timing}]"


def progress_bar(spec: ProgressBar, sleep: Sleep = time.sleep) -> None:
    """steps + 1 redraws, each `\\r` + the bar and flushed, interval_s apart, no newline until the end (tqdm).
    `sleep` returning true (an Event's wait: a stop) ends the bar early."""
    started = time.monotonic()
    for done in range(spec.steps + 1):
        if done and sleep(spec.interval_s):
            break
        write("\r" + bar_text(done, spec.steps, time.monotonic() - started))
    write("\n")


def hub_cache(env: Mapping[str, str]) -> Path:
    """Where huggingface_hub keeps repositories: HF_HUB_CACHE, HF_HOME/hub, XDG_CACHE_HOME/huggingface/hub, ~/.cache."""
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"])
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]) / "hub"
    cache = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return cache / "huggingface" / "hub"


def download_path(model: str, env: Mapping[str, str]) -> Path:
    """`Qwen/Qwen3-0.6B` → <hub cache>/models--Qwen--Qwen3-0.6B/blobs/fake-download.incomplete."""
    repo = "models--" + model.strip("/").replace("/", "--")
    return hub_cache(env) / repo / "blobs" / "fake-download.incomplete"


def download(spec: Download, model: str, env: Mapping[str, str] | None = None, sleep: Sleep = time.sleep) -> Path:
    """Write spec.size bytes in spec.chunks pieces over spec.seconds, printing nothing (huggingface_hub's
    download progress goes to a terminal only; under a supervisor the log is silent meanwhile).
    `sleep` returning true (a stop) ends it early."""
    path = download_path(model, os.environ if env is None else env)
    path.parent.mkdir(parents=True, exist_ok=True)
    piece, rest = divmod(spec.size, spec.chunks)
    with open(path, "wb") as handle:
        for n in range(spec.chunks):
            handle.write(b"\0" * (piece + (rest if n == spec.chunks - 1 else 0)))
            handle.flush()
            if sleep(spec.seconds / spec.chunks):
                break
    return path
