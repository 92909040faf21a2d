"""Start-up progress: the Hugging Face cache growing is progress though vLLM prints nothing; one line a phase."""

from __future__ import annotations

from pathlib import Path

from structlog.testing import capture_logs

from launcher.run import progress
from launcher.vllm.signatures import LogEvent


def test_a_growing_download_is_progress(tmp_path: Path) -> None:
    now = [100.0]
    blobs = tmp_path / "hub" / "models--Qwen--Qwen3-0.6B" / "blobs"
    growth = progress.CacheGrowth("Qwen/Qwen3-0.6B", {"HF_HOME": str(tmp_path)}, clock=lambda: now[0])
    assert growth.poll() is False and growth.last_growth == 0.0, "no folder yet: no progress, no error"
    blobs.mkdir(parents=True)
    (blobs / "abc.incomplete").write_bytes(b"x" * 1000)
    now[0] += 1.0
    assert growth.poll() is False, "polled at most every POLL_EVERY_S"
    now[0] += progress.POLL_EVERY_S
    assert growth.poll() is True and growth.last_growth == now[0]
    now[0] += progress.POLL_EVERY_S
    assert growth.poll() is False, "same size: no progress"
    assert growth.downloaded() == 1000


def test_a_local_model_has_nothing_to_watch(tmp_path: Path) -> None:
    growth = progress.CacheGrowth(str(tmp_path), {"HF_HOME": str(tmp_path)})
    assert growth.folder is None and growth.poll() is False


def test_one_line_per_phase_and_per_weights_percentage(tmp_path: Path) -> None:
    reporter = progress.PhaseReporter(progress.CacheGrowth(str(tmp_path), {}))
    events = [LogEvent("progress", "", values={"phase": "weights"}),
              LogEvent("progress", "", values={"phase": "weights", "percent": 50}),
              LogEvent("progress", "", values={"phase": "weights", "percent": 50}),
              LogEvent("progress", "", values={"phase": "profiling"}),
              LogEvent("progress", "", values={"phase": "profiling"}),
              LogEvent("kv_tokens", "", values={"kv_tokens": 5})]
    with capture_logs() as logs:
        for event in events:
            reporter.on_event(event)
    assert [(e["event"], e.get("percent")) for e in logs] == [
        ("starting.weights", None), ("starting.weights", 50), ("starting.profiling", None)]
