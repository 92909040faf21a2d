"""Start-up progress the operator sees: one console line per phase, and downloads vLLM does not print.

vLLM prints nothing while it downloads a model (minutes to an hour), so the model's folder in the
Hugging Face cache is watched: growth there is progress, as any output line is, and `startup_stall`
counts from the last progress of either kind.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import structlog

from launcher.plan.modelinfo import repo_cache_dir
from launcher.units import GIB
from launcher.vllm.signatures import EventKind, LogEvent

log = structlog.get_logger("vllm_launch")

POLL_EVERY_S = 2.0
REPORT_DOWNLOAD_EVERY_S = 10.0
PHASE_WORDS = {"download": "downloading the model", "weights": "loading weights", "profiling": "profiling memory",
               "cuda_graphs": "capturing CUDA graphs", "compile": "compiling", "warmup": "warming up"}


class CacheGrowth:
    """The bytes under a hub model's cache folder, read at most every POLL_EVERY_S."""

    def __init__(self, model: str, environ: Mapping[str, str], clock: Callable[[], float] = time.monotonic) -> None:
        local = model.startswith(("/", ".")) or Path(model).exists()
        self.folder = None if local or "/" not in model else repo_cache_dir(model, environ)
        self.clock = clock
        self.last_growth = 0.0  # monotonic time the folder last grew (0: never)
        self.size = self._measure()
        self.started_size = self.size
        self.started = clock()
        self.next_poll = self.started

    def _measure(self) -> int:
        if self.folder is None:
            return 0
        total = 0
        try:
            entries = list(os.scandir(self.folder / "blobs"))
        except OSError:
            return 0  # not created yet
        for entry in entries:
            try:
                total += entry.stat(follow_symlinks=False).st_size
            except OSError:
                continue  # renamed from .incomplete while we looked
        return total

    def poll(self) -> bool:
        """True when the folder grew since the last poll."""
        now = self.clock()
        if self.folder is None or now < self.next_poll:
            return False
        self.next_poll = now + POLL_EVERY_S
        size = self._measure()
        grew = size > self.size
        self.size = size
        if grew:
            self.last_growth = now
        return grew

    def downloaded(self) -> int:
        return max(0, self.size - self.started_size)


class PhaseReporter:
    """One `starting` log line per phase (weights: per percentage vLLM reports; downloads: bytes and rate)."""

    def __init__(self, growth: CacheGrowth, clock: Callable[[], float] = time.monotonic) -> None:
        self.growth = growth
        self.clock = clock
        self.phase: str | None = None
        self.percent: int | None = None
        self.last_download_report = 0.0

    def on_event(self, event: LogEvent) -> None:
        phase = event.values.get("phase") if event.kind == EventKind.PROGRESS else None
        if not isinstance(phase, str):
            return
        percent = event.values.get("percent")
        percent = percent if isinstance(percent, int) else None
        if phase == self.phase and (percent is None or percent == self.percent):
            return
        self.phase, self.percent = phase, percent
        fields: dict[str, object] = {"phase": phase}
        if percent is not None:
            fields["percent"] = percent
        log.info("starting." + phase, step=PHASE_WORDS.get(phase, phase), **fields)

    def tick(self) -> None:
        if not self.growth.poll():
            return
        now = self.clock()
        if now - self.last_download_report < REPORT_DOWNLOAD_EVERY_S and self.phase == "download":
            return
        self.last_download_report = now
        self.phase = "download"
        elapsed = max(now - self.growth.started, 1e-3)
        done = self.growth.downloaded()
        log.info("starting.download", step=PHASE_WORDS["download"], phase="download",
                 downloaded_gib=round(done / GIB, 2), rate_mib_s=round(done / elapsed / 2**20, 1))
