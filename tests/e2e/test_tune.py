"""`vllm-launch tune` against real vLLM for CPUs serving the tiny model: two candidates, each started through the
supervisor, the winner written as a profile, and `up` of that profile.

The profile as written runs one sequence at a time (max-num-seqs 1), so a user's request waits for the whole of
the replies ahead of it (512 tokens each, many times the prefill) before its first token. The candidate
max-num-seqs=4 batches them. The SLO sits between the two on any box this runs on: long replies keep a waiting
user's first token past it however fast the CPU decodes (with 64-token replies a quiet box served four users one at
a time within it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tests.e2e.realvllm import KEY, ROOT, RealLauncher, profile_text
from tests.helpers.ports import free_port

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
                           "--turn-tokens", "16", "--max-tokens", "512", "--tools", "none", "--json", "--write", str(tuned)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200, check=False)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    found = {c["label"]: c for c in doc["candidates"]}
    assert set(found) == {"baseline", "max-num-seqs=4"} and doc["vllm_version"].startswith("0.32")
    assert doc["requests_per_level"] == 16
    base, four = found["baseline"], found["max-num-seqs=4"]
    assert base["status"] == four["status"] == "measured", doc
    # One at a time, a user's TTFT is the replies ahead of it: two 512-token replies take well over 400 ms even on
    # a quiet box (64-token ones did not). Batched, the first token does not wait for them, so it serves more users
    # within the SLO; how many more depends on the box (3 or 4 of 4 seen), so that is compared, not fixed.
    assert base["users_at_slo"] in (1, 2), "one sequence at a time: a third user waits two whole replies"
    assert four["users_at_slo"] > base["users_at_slo"], "batched: more users' first tokens within the SLO"
    assert doc["verdict"] == "winner" and doc["winner"]["label"] == "max-num-seqs=4"
    assert doc["winner"]["gains"]["users"] > 1.0
    assert four["levels_measured"] >= 3 and base["levels_measured"] >= 2
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
