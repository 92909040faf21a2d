"""A logging service's JSON export of a container's output is read as the lines vLLM printed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.cli import main
from launcher.vllm.log_export import printed_lines

E = "(EngineCore_DP0 pid=7) ERROR 06-06 03:41:48 [core.py:1165] "
PRINTED = [E + "Traceback (most recent call last):",
           E + '  File "/usr/local/lib/python3.12/dist-packages/vllm/model_executor/kernels/linear/__init__.py", '
               "line 685, in choose_mp_linear_kernel",
           E + "    raise ValueError(",
           E + "ValueError: Failed to find a kernel that can implement the WNA16 linear layer. Reasons: ",
           E + "CutlassW4A8LinearKernel requires capability 90, current compute  capability is 89"]


def _entries(order: list[int]) -> list[dict[str, object]]:
    return [{"insertId": f"i{n}", "severity": "ERROR", "textPayload": PRINTED[n],
             "timestamp": f"2026-06-06T03:41:48.{n:06d}Z"} for n in order]


def test_a_json_list_export_gives_the_printed_lines_oldest_first() -> None:
    """`gcloud logging read --format=json` lists the newest entry first: the lines come back in the order printed,
    with their quotes unescaped (a frame's `File "…"` is a frame again)."""
    export = json.dumps(_entries([4, 3, 2, 1, 0]), indent=2)
    assert PRINTED == list(printed_lines(export.split("\n")))


def test_one_entry_per_line_is_an_export_too() -> None:
    export = [json.dumps(entry) + "\n" for entry in _entries([0, 1, 2, 3, 4])]
    assert PRINTED == list(printed_lines(export))


@pytest.mark.parametrize("text", [
    "(APIServer pid=1) INFO 06-06 03:40:00 [api_server.py:1] vLLM API server version 0.22.1\nsecond line",
    "[rank0]: torch.OutOfMemoryError: CUDA out of memory.\nmore",  # starts with a bracket, is no JSON
    '{"not": "a log entry"}\n',
])
def test_anything_else_passes_unchanged(text: str) -> None:
    assert text.split("\n") == list(printed_lines(text.split("\n")))


def test_diagnose_reads_an_export(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`vllm-launch diagnose` on an export finds the traceback its entries hold, and the kernel refusal in it."""
    log = tmp_path / "revision_logs.json"
    log.write_text(json.dumps(_entries([4, 3, 2, 1, 0]), indent=2), encoding="utf-8")
    assert 0 == main(["diagnose", str(log), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert ("config", "bad_argument") == (data["class"], data["reason"])
    assert data["root_cause"].startswith("ValueError: Failed to find a kernel that can implement the WNA16 linear")
