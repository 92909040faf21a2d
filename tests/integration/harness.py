"""Run the real `vllm-launch up` as a subprocess against the fake vllm, with a real NOTIFY_SOCKET."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from tests.helpers.polling import poll_for
from tests.helpers.profiles import KEY

ROOT = Path(__file__).resolve().parents[2]
FAKES = ROOT / "tests" / "fakes"


class NotifySocket:
    """A real AF_UNIX datagram socket playing systemd (abstract namespace: no path length limits)."""

    def __init__(self) -> None:
        self.name = f"@vllm-launch-test-{uuid.uuid4().hex}"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind("\0" + self.name[1:])
        self.sock.settimeout(0.2)
        self.messages: list[dict[str, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            fields = dict(line.split("=", 1) for line in data.decode().splitlines() if "=" in line)
            self.messages.append(fields)

    def kinds(self) -> list[str]:
        """The sequence of message kinds: READY, STOPPING, EXTEND, WATCHDOG, or STATUS."""
        kinds: list[str] = []
        for message in self.messages:
            for key in ("READY", "STOPPING", "EXTEND_TIMEOUT_USEC", "WATCHDOG"):
                if key in message:
                    kinds.append(key)
                    break
            else:
                kinds.append("STATUS")
        return kinds

    def close(self) -> None:
        self._stop.set()
        self.sock.close()


class Launcher:
    """One `python -m launcher up` process and everything it printed."""

    def __init__(self, tmp: Path, profile_text: str, *, scenarios: list[dict[str, Any]] | None = None,
                 extra_env: dict[str, str] | None = None, args: tuple[str, ...] = (), notify: bool = True,
                 state_dir: Path | None = None) -> None:
        self.tmp = tmp
        self.tag = uuid.uuid4().hex
        self.profile = tmp / "profile.yaml"
        self.profile.write_text(profile_text)
        self.argv_log = tmp / "argv.jsonl"
        self.events_log = tmp / "events.jsonl"
        self.state_dir = state_dir or tmp / "state"
        self.notify = NotifySocket() if notify else None
        env = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_VLLM", "NOTIFY_SOCKET", "WATCHDOG"))}
        env.update({
            "PATH": f"{FAKES}{os.pathsep}{env.get('PATH', '')}",
            "VLLM_LAUNCH_STATE_DIR": str(self.state_dir),
            "XDG_CACHE_HOME": str(tmp / "cache"),
            "FAKE_VLLM_ARGV_LOG": str(self.argv_log),
            "FAKE_VLLM_EVENTS": str(self.events_log),
            "FAKE_VLLM_STATE": str(tmp),
            "FAKE_VLLM_TAG": self.tag,
            "VLLM_API_KEY": KEY,
            "PYTHONUNBUFFERED": "1",
        })
        if self.notify:
            env["NOTIFY_SOCKET"] = self.notify.name
        if scenarios is not None:
            path = tmp / "scenarios.json"
            path.write_text(json.dumps(scenarios))
            env["FAKE_VLLM_SCENARIOS"] = str(path)
        env.update(extra_env or {})
        self.env = env
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "launcher", "up", str(self.profile), "--log-format", "json", *args],
            cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def output(self) -> str:
        return "\n".join(self.lines[-80:])

    def events(self) -> list[dict[str, Any]]:
        """The launcher's own JSON log events (vLLM's lines are skipped)."""
        found = []
        for line in list(self.lines):
            if line.startswith("{"):
                try:
                    found.append(json.loads(line))
                except ValueError:
                    continue
        return found

    def event(self, name: str) -> dict[str, Any] | None:
        return next((e for e in self.events() if e.get("event") == name), None)

    def wait_event(self, name: str, timeout: float = 30) -> dict[str, Any]:
        return poll_for(lambda: self.event(name), timeout, f"event {name}", self.output)  # type: ignore[no-any-return]

    def argvs(self) -> list[list[str]]:
        if not self.argv_log.exists():
            return []
        return [json.loads(line)["argv"] for line in self.argv_log.read_text().splitlines()]

    def state(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.state_dir / "profile" / "state.json").read_text())
        return data

    def signal(self, sig: int = signal.SIGTERM) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 30) -> int:
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"vllm-launch did not exit within {timeout}s\n{self.output()}") from None
        self._reader.join(timeout=5)
        return code

    def our_processes(self) -> list[psutil.Process]:
        """Every live process started for this test (fake vllm and its grandchildren carry our tag)."""
        return tagged_processes(self.tag, but=self.proc.pid)

    def cleanup(self) -> None:
        if self.proc.poll() is None:
            with_suppress(lambda: os.killpg(self.proc.pid, signal.SIGKILL))
            self.proc.wait(timeout=10)
        for proc in self.our_processes():
            with_suppress(proc.kill)
        if self.notify:
            self.notify.close()


def tagged_processes(tag: str, but: int | None = None) -> list[psutil.Process]:
    """Live processes (not zombies) whose environment carries FAKE_VLLM_TAG=`tag`, except the PID `but`."""
    found = []
    for proc in psutil.process_iter(["pid", "status"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE or proc.pid == but:
                continue
            if proc.environ().get("FAKE_VLLM_TAG") == tag:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def with_suppress(fn: Callable[[], Any]) -> None:
    with contextlib.suppress(OSError, psutil.Error):
        fn()


def ready(launcher: Launcher, timeout: float = 30) -> dict[str, Any]:
    """The daemon's `ready` event, once it comes."""
    return launcher.wait_event("ready", timeout)
