"""`vllm serve` itself: the API server process. It replays a real log, starts the engine, serves, stops.

See the package docstring (fakevllm/__init__.py) for the scenario keys and the process tree.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from types import FrameType

from fakevllm import effects, multinode
from fakevllm.common import HELP, emit, interpreter, mark, option, tensor_parallel_size, text_option
from fakevllm.engine import ENGINE, read_lines, spawn
from fakevllm.scenario import Before, Scenario, choose_rule
from fakevllm.scheduler import Latency
from fakevllm.server import FakeServer

READY_LINE = re.compile(r"Application startup complete")
ENGINE_START = re.compile(r"EngineCore|Initializing|Started engine process")
FATAL = re.compile(r"ValueError: |KeyError: |TypeError: Error|OSError: |error: unrecognized|Value error, ")
STAMP = re.compile(r"\b\d\d-\d\d (\d\d):(\d\d):(\d\d)\b")
PROCESS_PREFIX = re.compile(r"\((APIServer|EngineCore(?:_DP\d+)?) pid=\d+\)")
ENGINE_HELLO_TIMEOUT_S = 15.0
SHUTDOWN_LINES = [
    "(APIServer pid={pid}) INFO 11-29 15:41:39 [launcher.py:254] [shutdown] API server: shutdown triggered",
    "(APIServer pid={pid}) ERROR 11-29 15:41:39 [async_llm.py:906] vllm.v1.engine.exceptions.EngineDeadError: "
    "EngineCore encountered an issue. See stack trace (above) for the root cause.",
    "INFO:     Shutting down",
    "INFO:     Application shutdown complete.",
]
DEATH_LINES = [
    "(APIServer pid={pid}) WARNING 11-29 15:51:24 [core_client.py:817] [shutdown] MPClient: engine core exited "
    "unexpectedly; starting cleanup",
    "(APIServer pid={pid}) ERROR 11-29 15:51:24 [async_llm.py:906] vllm.v1.engine.exceptions.EngineDeadError: "
    "EngineCore encountered an issue. See stack trace (above) for the root cause.",
    "INFO:     Waiting for application shutdown.",
    "INFO:     Application shutdown complete.",
]
STARTUP_DEATH_LINES = [
    "(APIServer pid={pid}) ERROR 11-29 15:51:24 [core_client.py:610] Engine core proc EngineCore_DP0 died "
    "unexpectedly, shutting down client.",
    "(APIServer pid={pid}) RuntimeError: Engine core initialization failed. See root cause above. "
    "Failed core proc(s): {{'EngineCore_DP0': {code}}}",
]


class ApiServer:
    """One `vllm serve` run; the main thread replays and waits, a thread waits on the engine."""

    def __init__(self, argv: list[str], scenario: Scenario) -> None:
        self.argv = argv
        self.sc = scenario
        self.pid = os.getpid()
        self.ready = False  # "Application startup complete" printed: SIGTERM is honoured from now on
        self.stopping = threading.Event()
        self.wake = threading.Event()  # a honoured SIGTERM or the engine's death: the replay's waits end at once
        self.engine: subprocess.Popen[bytes] | None = None
        self.engine_exited = threading.Event()
        self.engine_stopped_by_us = False
        self.control_fd: int | None = None
        self.hello_fd: int | None = None
        self.server: FakeServer | None = None
        self.serving_since = 0.0
        self.model = argv[1] if len(argv) > 1 and not argv[1].startswith("-") else text_option(argv, "--model", "")
        self.tp = tensor_parallel_size(argv)
        head_of_many = multinode.nodes(argv) > 1 and "--headless" not in argv
        self.group = multinode.Rendezvous(argv) if head_of_many else None  # the head of N ranks

    # signals ---------------------------------------------------------------------------------------------
    def on_term(self, signum: int, frame: FrameType | None) -> None:
        policy = self.sc.ignore_term
        if (policy == "startup" and self.ready) or not policy:
            self.stopping.set()
            self.wake.set()

    # the engine ------------------------------------------------------------------------------------------
    def start_engine(self) -> None:
        control_r, control_w = os.pipe()
        hello_r, hello_w = os.pipe()
        config = {"tp": self.tp, "gpu_memory": self.sc.gpu_memory, "release_delay_s": self.sc.release_delay_s,
                  "cleanup_s": self.sc.engine_cleanup_s, "die_after_s": self.sc.die_after_s,
                  "control_fd": control_r, "hello_fd": hello_w, "python": interpreter()}
        self.engine = spawn(ENGINE, "engine", config, (control_r, hello_w))
        os.close(control_r)
        os.close(hello_w)
        self.control_fd, self.hello_fd = control_w, hello_r
        threading.Thread(target=self._wait_engine, args=(self.engine,), daemon=True).start()

    def _wait_engine(self, engine: subprocess.Popen[bytes]) -> None:
        engine.wait()  # returns the moment it dies, whatever kills it
        self.engine_exited.set()
        self.wake.set()

    def wait_engine_ready(self) -> None:
        """vLLM's API server waits for the engine's handshake before it serves: so do we (the tree is up)."""
        if self.hello_fd is None:
            return
        read_lines(self.hello_fd, 1, ENGINE_HELLO_TIMEOUT_S)
        os.close(self.hello_fd)
        self.hello_fd = None

    def engine_died(self) -> bool:
        return self.engine_exited.is_set() and not self.engine_stopped_by_us

    def tell_engine(self, word: str) -> None:
        if self.control_fd is not None:
            with contextlib.suppress(OSError):
                os.write(self.control_fd, word.encode() + b"\n")

    def stop_engine(self) -> None:
        """The orderly path: SIGTERM the engine and wait while it cleans up (it frees shared memory and the GPU)."""
        if self.engine is None or self.engine_exited.is_set():
            return
        self.engine_stopped_by_us = True
        try:
            os.kill(self.engine.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        self.engine_exited.wait(self.sc.engine_cleanup_s + 5.0)

    # the log ---------------------------------------------------------------------------------------------
    def rewrite(self, line: str) -> str:
        """The log's process prefixes carry this tree's pids."""
        def pid_of(match: re.Match[str]) -> str:
            if match.group(1) == "APIServer":
                return f"(APIServer pid={self.pid})"
            return f"({match.group(1)} pid={self.engine.pid})" if self.engine is not None else match.group(0)
        return PROCESS_PREFIX.sub(pid_of, line) if "pid=" in line else line

    def effects_before(self, line: str | None, done: set[str]) -> None:
        """The silent download and the progress bar, just before the first line that asks for them."""
        def due(before: Before) -> bool:
            return before.at_start() if line is None else before.matches(line)
        if self.sc.download is not None and "download" not in done and due(self.sc.download.before):
            done.add("download")
            mark("download_started")
            effects.download(self.sc.download, self.model, sleep=self.wake.wait)
            mark("download_finished")
        if self.sc.progress_bar is not None and "bar" not in done and due(self.sc.progress_bar.before):
            done.add("bar")
            effects.progress_bar(self.sc.progress_bar, self.wake.wait)

    def start_server(self) -> None:
        self.wait_engine_ready()
        if self.group is not None:  # vLLM's head serves once every rank has joined
            while not self.group.assembled.wait(0.1) and not self.stopping.is_set():
                pass
        host = text_option(self.argv, "--host", "127.0.0.1")
        port = int(text_option(self.argv, "--port", "8000"))
        names = option(self.argv, "--served-model-name", None, many=True)
        served = names[0] if isinstance(names, list) and names else self.model
        max_model_len = int(text_option(self.argv, "--max-model-len", "2048"))
        latency = Latency(max_num_seqs=int(text_option(self.argv, "--max-num-seqs", "256")),
                          max_num_batched_tokens=int(text_option(self.argv, "--max-num-batched-tokens", "8192")),
                          completion_s=self.sc.completion_s, tokens_per_s=self.sc.tokens_per_s,
                          prefill_s_per_1k=self.sc.prefill_s_per_1k, token_s=self.sc.token_s,
                          batch_slowdown=self.sc.batch_slowdown)
        certfile = option(self.argv, "--ssl-certfile")
        keyfile = option(self.argv, "--ssl-keyfile")
        tls = (certfile, keyfile if isinstance(keyfile, str) else None) if isinstance(certfile, str) else None
        self.server = FakeServer(host, port, served, max_model_len, "--enable-log-requests" in self.argv, latency,
                                 tls, auto_tools="--enable-auto-tool-choice" in self.argv,
                                 tool_reply=self.sc.tool_reply)

    def replay(self) -> int | None:
        """Print the log with its timing scaled; an exit code when the run ends during it."""
        lines = self.sc.lines()
        engine_at = next((i for i, line in enumerate(lines) if ENGINE_START.search(line)), 0)
        done: set[str] = set()
        self.effects_before(None, done)
        if not lines:
            self.start_engine()
        previous: int | None = None
        for index, line in enumerate(lines):
            stamp = STAMP.search(line)
            if stamp:
                now = int(stamp.group(1)) * 3600 + int(stamp.group(2)) * 60 + int(stamp.group(3))
                if previous is not None and now > previous:
                    self.wake.wait(min((now - previous) * self.sc.time_scale, self.sc.max_delay_s))
                previous = now
            if self.stopping.is_set():
                if self.ready:
                    return None  # honoured while serving: the orderly shutdown follows
                self.stop_engine()
                return 143  # like a python process killed by an early SIGTERM
            if self.engine_died():
                return None if self.ready else self.startup_death()
            self.effects_before(line, done)
            if index == engine_at and self.engine is None:
                self.start_engine()
                # vLLM's engine retitles itself before it prints a line: a supervisor that reads an engine's
                # line can find VLLM::EngineCore in the process table, however loaded the machine is.
                self.wait_engine_ready()
            if READY_LINE.search(line) and self.server is None:
                self.start_server()
            if "[shutdown]" in line and self.server is not None:
                break  # the captured shutdown follows the capture's SIGTERM: we stop replaying there
            emit(self.rewrite(line))
            if index == self.sc.mark_line:
                mark("fatal_printed", line=line[:120])
            if self.server is not None and READY_LINE.search(line) and not self.ready:
                self.became_ready()
            if FATAL.search(line):
                mark("fatal_printed", line=line[:120])
        return None

    # the ends --------------------------------------------------------------------------------------------
    def startup_death(self) -> int:
        code = self.engine.returncode if self.engine is not None else None
        for line in STARTUP_DEATH_LINES:
            emit(line.format(pid=self.pid, code=code))
        return 1

    def engine_dead(self) -> int:
        """EngineDeadError: /health 503 and POSTs 500 a little while, then exit 0 (vLLM 0.32 does)."""
        assert self.server is not None
        self.server.dead.set()
        mark("engine_dead_seen")
        for line in DEATH_LINES:
            emit(line.format(pid=self.pid))
        time.sleep(self.sc.engine_dead_linger_s)
        self.server.close()
        return 0

    def became_ready(self) -> None:
        """"Application startup complete" is out: SIGTERM counts from now, and the engine is serving."""
        self.ready = True
        self.serving_since = time.monotonic()
        self.tell_engine("serving")

    def serve(self) -> int:
        if self.server is None:
            self.start_server()
            emit("INFO:     Application startup complete.")
        assert self.server is not None
        if not self.ready:
            self.became_ready()
        since = self.serving_since
        wedge = self.sc.wedge_after_s
        while not self.stopping.wait(0.05):
            if self.engine_died():
                return self.engine_dead()
            if self.group is not None and self.group.lost.is_set():
                mark("rank_lost")
                self.stop_engine()  # a rank is gone: the collectives fail and the engine dies
                return self.engine_dead()
            if wedge is not None and not self.server.wedged.is_set() and time.monotonic() - since >= wedge:
                self.server.wedged.set()
                mark("wedged")
        if self.sc.grandchild == "setsid-on-stop":
            grandchild("setsid")  # started after the supervisor's SIGTERM: on no record yet, in no session of ours
        for line in SHUTDOWN_LINES:
            emit(line.format(pid=self.pid))
        self.stop_engine()
        self.server.close()
        return 0

    def run(self) -> int:
        code = self.replay()
        if code is not None:
            return code
        after = self.sc.after or ("serve" if self.server is not None else "exit")
        if self.ready and (self.stopping.is_set() or self.engine_died()):
            after = "serve"  # SIGTERM or a dead engine while serving: handled as vLLM does, whatever the log did next
        if after in ("exit", "exit0"):
            self.stop_engine()
            return 0 if after == "exit0" else self.sc.exit_code
        if after == "hang":
            while True:
                time.sleep(1)
        if after == "crash":
            return self.crash()
        return self.serve()

    def crash(self) -> int:
        """vLLM 0.32's start-up failure as the process tree shows it: the engine dies at once (its traceback was
        the log's end); the API server's engine monitor prints "died unexpectedly" and "Engine core initialization
        failed" within moments, then takes linger_s to shut down before it exits 1."""
        if self.engine is not None and self.engine.poll() is None:
            self.engine_stopped_by_us = True
            with contextlib.suppress(ProcessLookupError):
                self.engine.kill()
            self.engine.wait()
        mark("engine_exited")
        code = self.startup_death() if self.sc.crash_lines else 1
        self.wake.clear()
        self.wake.wait(self.sc.linger_s)  # a honoured SIGTERM ends the wait
        return code


def grandchild(kind: bool | str) -> None:
    """An extra process: in the group (true), one that escapes it with setsid ("setsid"), or one that
    leaves the tree too ("double-fork": the middle process forks, the grandchild calls setsid and the
    middle exits at once, as daemon(3) does; the grandchild is left to the nearest subreaper).
    "setsid-on-stop" starts nothing here: the orderly shutdown starts a "setsid" one (ApiServer.serve)."""
    if not kind or kind == "setsid-on-stop":
        return
    code = "import time\nwhile True: time.sleep(1)"
    if kind == "double-fork":
        middle = ("import os, sys, time\nif os.fork() == 0:\n    os.setsid()\n"
                  "    null = os.open(os.devnull, os.O_RDWR)\n    [os.dup2(null, fd) for fd in (0, 1, 2)]\n"
                  "    while True: time.sleep(1)\n")
        subprocess.run([interpreter(), "-c", middle], check=True)
        return
    subprocess.Popen([interpreter(), "-c", code], start_new_session=(kind == "setsid"))


def main() -> int:
    argv = sys.argv[1:]
    if argv[:1] == ["--version"]:
        time.sleep(float(os.environ.get("FAKE_VLLM_VERSION_DELAY_S", "0")))  # real vLLM imports torch first
        emit(os.environ.get("FAKE_VLLM_VERSION", "0.32.0"))
        return 0
    if argv[:1] != ["serve"]:
        emit(f"fake vllm: unsupported command {argv!r}")
        return 2
    if any(a.startswith("--help") for a in argv):
        sys.stdout.write(HELP.read_text())
        return 0
    log_argv = os.environ.get("FAKE_VLLM_ARGV_LOG")
    if log_argv:
        with open(log_argv, "a") as handle:
            handle.write(json.dumps({"argv": argv, "time": time.time(), "pid": os.getpid(),
                                     "has_api_key": bool(os.environ.get("VLLM_API_KEY"))}) + "\n")
    mark("started")
    scenario = Scenario.from_rule(choose_rule(argv))
    if "--headless" in argv:
        worker = ApiServer(argv, scenario)
        return multinode.headless(argv, scenario.lines(), worker.start_engine, worker.stop_engine)
    api = ApiServer(argv, scenario)
    signal.signal(signal.SIGTERM, api.on_term)
    signal.signal(signal.SIGINT, api.on_term)
    grandchild(api.sc.grandchild)
    try:
        return api.run()
    finally:
        api.stop_engine()  # an orderly end never leaves the engine behind (a no-op when it is gone already)
