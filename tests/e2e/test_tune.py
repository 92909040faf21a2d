"""`vllm-launch tune` against real vLLM for CPUs serving the tiny model: two candidates, each started through the
supervisor, the winner written as a profile, and `up` of that profile.

The profile as written runs one sequence at a time (max-num-seqs 1), so a second user's request waits for the
whole of the first one's reply (~64 tokens, several times the prefill) before its first token: its TTFT median
at two users is the length of a reply. The candidate max-num-seqs=4 batches them. The SLO sits between the two."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tests.e2e.realvllm import KEY, ROOT, RealLauncher, profile_text
from tests.integration.harness import free_port

SLO = "ttft_p50<=400ms"


def test_two_candidates_json_and_write_then_up_of_the_written_profile(
        tmp_path: Path, launch: Callable[..., RealLauncher]) -> None:
    original = tmp_path / "tiny.yaml"
    original.write_text(profile_text(free_port(), vllm="  max-num-seqs: 1\n"))
    tuned = tmp_path / "tiny-tuned.yaml"
    env = {**os.environ, "VLLM_API_KEY": KEY, "VLLM_LAUNCH_STATE_DIR": str(tmp_path / "state"),
           "PATH": f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run([sys.executable, "-m", "launcher", "tune", str(original), "--slo", SLO, "--grid",
                           "max-num-seqs=4", "--rounds", "1", "--max-users", "4", "--shared-prefix", "32",
                           "--turn-tokens", "16", "--max-tokens", "64", "--json", "--write", str(tuned)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200, check=False)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    found = {c["label"]: c for c in doc["candidates"]}
    assert set(found) == {"baseline", "max-num-seqs=4"} and doc["vllm_version"].startswith("0.32")
    assert doc["requests_per_level"] == 16
    base, four = found["baseline"], found["max-num-seqs=4"]
    assert base["status"] == four["status"] == "measured", doc
    assert base["users_at_slo"] == 1, "one sequence at a time: a second user waits a whole reply"
    assert four["users_at_slo"] >= 2, "batched: two users' first tokens do not wait for each other"
    assert doc["verdict"] == "winner" and doc["winner"]["label"] == "max-num-seqs=4"
    assert doc["winner"]["gains"]["users"] >= 2.0
    assert doc["written"] == str(tuned)

    text = tuned.read_text()
    assert "# Tuned by vllm-launch tune" in text and SLO.replace("<=", " <= ").replace("400ms", "400 ms") in text
    plan = subprocess.run([sys.executable, "-m", "launcher", "plan", str(tuned), "--json"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    argv = json.loads(plan.stdout)["argv"]
    assert argv[argv.index("--max-num-seqs") + 1] == "4"

    served = launch(text)
    served.wait_ready()
    assert served.proc.poll() is None
