"""`vllm-launch bench` against real vLLM for CPUs serving the tiny model: the numbers are small, but the
structure, the token accounting, the statistics, Ctrl-C and the errors are vLLM's own."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.conftest import Launches
from tests.e2e.realvllm import KEY, ROOT, RealLauncher, demo_profile_text
from tests.helpers.polling import poll_for
from tests.helpers.ports import free_port

# the demo profile serves no tool-call parser: its server refuses the agent tools (a case of its own below)
SMALL = ["--users", "2", "--turns", "3", "--shared-prefix", "64", "--turn-tokens", "32", "--max-tokens", "8",
         "--tools", "none"]


def bench(target: str, *args: str, key: str = KEY, env: dict[str, str] | None = None, timeout: float = 300
          ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "launcher", "bench", target, *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "VLLM_API_KEY": key, **(env or {})},
                          check=False)


@pytest.fixture(scope="class")
def served(class_launch: Launches) -> RealLauncher:
    lau = class_launch(demo_profile_text(free_port()))
    lau.wait_ready()
    return lau


class TestBench:
    def test_the_json_document_and_its_token_accounting(self, served: RealLauncher) -> None:
        done = bench(str(served.profile), *SMALL, "--ignore-eos", "--json")
        assert 0 == done.returncode, done.stderr
        doc = json.loads(done.stdout)
        assert {"target", "model", "vllm_version", "settings", "requests", "ttft_ms", "tpot_ms", "itl_ms", "e2el_ms",
                "input_tokens", "output_tokens", "output_tokens_per_s", "output_tokens_per_s_per_user",
                "requests_per_s", "prefix_cache_hit_rate", "kv_cache_usage_max", "preemptions",
                "duration_s"} <= set(doc)
        assert ("tiny", "0.32.0") == (doc["model"], doc["vllm_version"])
        assert {"completed": 6, "failed": 0, "errors": {}} == doc["requests"]
        assert 6 * 8 == doc["output_tokens"], "ignore_eos: every turn generates --max-tokens, as usage says"
        # every prompt resends the shared prefix and the history: at least prefix + turn each, growing
        assert doc["input_tokens"] >= 6 * (64 + 32) + 2 * (8 + 32) * (1 + 2)
        for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms"):
            stat = doc[key]
            assert set(stat) == {"mean", "p50", "p95", "p99"} and stat["p50"] <= stat["p95"] <= stat["p99"]
        assert doc["ttft_ms"]["p50"] > 0 and doc["e2el_ms"]["p50"] >= doc["ttft_ms"]["p50"]
        assert doc["prefix_cache_hit_rate"] is not None and doc["prefix_cache_hit_rate"] > 0, \
            "the shared prefix and each user's history are served from vLLM's prefix cache"
        assert doc["settings"]["context"] == 2048, "the server's max-model-len when --context is not given"

    def test_ctrl_c_stops_and_prints_what_was_measured(self, served: RealLauncher) -> None:
        proc = subprocess.Popen([sys.executable, "-m", "launcher", "bench", str(served.profile), "--duration", "120",
                                 "--users", "2", "--shared-prefix", "64", "--turn-tokens", "32", "--max-tokens", "8",
                                 "--tools", "none"],
                                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "VLLM_API_KEY": KEY})
        # Ctrl-C once the measured run is under way (vLLM's log shows its chat requests), however long the
        # prompts took to size on this machine: a fixed sleep can land in the sizing on a busy one.
        before = served.vllm_log().count("POST /v1/chat/completions")
        poll_for(lambda: served.vllm_log().count("POST /v1/chat/completions") >= before + 4 or proc.poll() is not None,
                 300, "the bench's first requests")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        assert 0 == proc.returncode, err
        assert "(interrupted)" in out and " completed, 0 failed" in out
        assert int(out.split("requests", 1)[1].split("completed")[0].strip()) > 0

    @pytest.mark.parametrize(("args", "key", "code", "words"), [
        ((), "wrong-key", 78, "401 Unauthorized"),
        (("--context", "99999"), KEY, 78, "above the server's max-model-len 2048"),
        (("--model", "llama"), KEY, 78, "it serves tiny"),
        (("--max-tokens", "4"), KEY, 78, "refuses tool_choice auto"),  # the agent tools, and no parser served
    ])
    def test_bad_input_is_one_line(self, served: RealLauncher, args: tuple[str, ...], key: str, code: int,
                                   words: str) -> None:
        done = bench(f"http://127.0.0.1:{served.port}", *args, key=key)
        assert code == done.returncode
        assert words in done.stderr and len(done.stderr.strip().splitlines()) == 1 and not done.stdout

    def test_an_unreachable_url(self) -> None:
        done = bench(f"http://127.0.0.1:{free_port()}")
        assert 2 == done.returncode and "no answer" in done.stderr


def test_compare_prefix_caching_through_the_supervisor(launch: Callable[..., RealLauncher], tmp_path: Path) -> None:
    """The same seeded workload with and without enable-prefix-caching, each on its own supervised start."""
    profile = tmp_path / "tiny.yaml"
    profile.write_text(demo_profile_text(free_port()).replace("log_file: vllm.log", f"log_file: {tmp_path}/vllm.log"))
    done = bench(str(profile), *SMALL, "--compare", "prefix-caching", "--json", timeout=900,
                 env={"VLLM_LAUNCH_STATE_DIR": str(tmp_path / "state"), "PATH": f"{ROOT / '.venv' / 'bin'}{os.pathsep}"
                      f"{os.environ.get('PATH', '')}", "HF_HUB_OFFLINE": "1"})
    assert 0 == done.returncode, done.stderr
    doc = json.loads(done.stdout)
    on, off = doc["with_prefix_caching"], doc["without_prefix_caching"]
    assert on["requests"]["completed"] == off["requests"]["completed"] == 6
    assert on["prefix_cache_hit_rate"] > (off["prefix_cache_hit_rate"] or 0.0)
    assert {"ttft_p50_speedup", "output_tokens_per_s_ratio", "hit_rate_with", "hit_rate_without"} == set(doc["ratios"])
    state = json.loads((tmp_path / "state" / "tiny" / "state.json").read_text())
    assert "stopped" == state["phase"], "each supervised start was stopped cleanly"
