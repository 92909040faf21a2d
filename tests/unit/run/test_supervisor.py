"""The child process: log rotation, the output pump, stopping a whole tree (real processes)."""

from __future__ import annotations

import dataclasses
import errno
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from launcher.errors import ConfigError, TransientFailure
from launcher.run import attempt, logpump, processes, supervisor
from launcher.run.health import Probe
from launcher.vllm import command
from tests.helpers.plans import plan_for
from tests.helpers.polling import poll_for

TREE = """
import os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)           # like vLLM during engine start-up
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])                          # in the group
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)  # escaped it
print("KV cache ok", flush=True)
print("(EngineCore pid=1) ERROR 11-29 15:43:46 [core.py:1] ValueError: No available memory for the cache blocks.",
      flush=True)
time.sleep(60)
"""


class TestRotatingFile:
    def test_rotates_at_the_cap(self, tmp_path: Path) -> None:
        """Past max_bytes the log moves to .1, older ones shift, at most `backups` are kept."""
        sink = logpump.RotatingFile(tmp_path / "vllm.log", max_bytes=100, backups=2)
        for i in range(30):
            sink.write(f"line {i:02d} " + "x" * 10)
        sink.close()
        names = sorted(p.name for p in tmp_path.iterdir())
        assert ["vllm.log", "vllm.log.1", "vllm.log.2"] == names
        assert (tmp_path / "vllm.log").stat().st_size <= 100
        assert "line 29" in (tmp_path / "vllm.log").read_text()

    def test_the_cap_counts_bytes_not_characters(self, tmp_path: Path) -> None:
        """Invalid UTF-8 reaches the file as U+FFFD, three bytes for each character: the cap is in bytes."""
        sink = logpump.RotatingFile(tmp_path / "vllm.log", max_bytes=100, backups=2)
        for _ in range(30):
            sink.write("\ufffd" * 20)  # 61 bytes a line with its newline
        sink.close()
        sizes = {p.name: p.stat().st_size for p in tmp_path.iterdir()}
        assert ["vllm.log", "vllm.log.1", "vllm.log.2"] == sorted(sizes)
        assert all(size <= 100 for size in sizes.values()), sizes

    def test_the_log_is_created_private_and_never_through_a_link(self, tmp_path: Path) -> None:
        """Request logging can put prompts into vllm.log: it is created 0600 whatever the umask, and a
        symbolic link planted at its path is refused with its name, its target left untouched."""
        old_umask = os.umask(0o022)
        try:
            sink = logpump.RotatingFile(tmp_path / "vllm.log", max_bytes=50, backups=1)
            for i in range(5):
                sink.write(f"line {i} " + "x" * 20)  # rotates: the fresh file after it is private too
            sink.close()
        finally:
            os.umask(old_umask)
        assert {0o600} == {stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()}
        older = tmp_path / "older.log"  # written 0644 by an earlier version: others lose their read bit
        older.write_text("old line\n")
        older.chmod(0o644)
        logpump.RotatingFile(older, max_bytes=50, backups=1).close()
        assert 0o640 == stat.S_IMODE(older.stat().st_mode)
        target = tmp_path / "precious"
        target.write_text("keep me\n")
        (tmp_path / "linked.log").symlink_to(target)
        with pytest.raises(ConfigError) as caught:
            logpump.RotatingFile(tmp_path / "linked.log", max_bytes=50, backups=1)
        assert f"launcher.log_file {tmp_path / 'linked.log'}" in str(caught.value)
        assert "keep me\n" == target.read_text()


class TestChild:
    def test_fatal_line_decides_and_the_whole_tree_is_stopped(self, tmp_path: Path) -> None:
        """A child that ignores SIGTERM and has a grandchild outside its group is still stopped completely."""
        sink = logpump.RotatingFile(tmp_path / "vllm.log", 10**6, 1)
        child = supervisor.spawn(plan_for([sys.executable, "-c", TREE]), attempt=1, secrets={"VLLM_API_KEY": "k"},
                                 sink=sink, echo=False)
        check = attempt.ReadyCheck(health=lambda: Probe(False, "down"), models=lambda: Probe(False, "down"))
        events: list[str] = []
        outcome = attempt.watch(child, threading.Event(), check, hooks=attempt.Hooks(on_line=lambda e: events.append(e.kind)))
        assert ("failed", "no_cache_blocks") == (outcome.kind, outcome.diagnosis.cls)
        poll_for(lambda: len(psutil.Process(child.pid).children(recursive=True)) >= 2, 10, "the grandchildren")
        child.remember_descendants()
        tree = dict(child.known)
        assert 3 <= len(tree)
        started = time.monotonic()
        report = supervisor.stop_tree(child, grace_s=0.5)
        assert time.monotonic() - started < 10
        assert () == report.leftovers
        for pid in tree:
            assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        sink.close()
        assert "No available memory" in (tmp_path / "vllm.log").read_text()

    def test_environment_strips_systemd_and_adds_secrets(self) -> None:
        """vLLM never sees NOTIFY_SOCKET/WATCHDOG_*; it gets the plan's env and the secrets."""
        env = supervisor.child_environment(plan_for(["x"]), {"VLLM_API_KEY": "k"},
                                           {"NOTIFY_SOCKET": "@s", "WATCHDOG_USEC": "1", "PATH": "/bin"})
        assert {"PATH": "/bin", "PYTHONUNBUFFERED": "1", "VLLM_API_KEY": "k"} == env

    def test_reap_orphans_leaves_the_tracked_child_to_popen(self) -> None:
        """Reaping adopted zombies must not steal the exit status of vLLM's own process."""
        tracked = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
        stray = subprocess.Popen([sys.executable, "-c", "pass"])
        poll_for(lambda: psutil.Process(stray.pid).status() == psutil.STATUS_ZOMBIE, 10, "the stray to exit")
        poll_for(lambda: psutil.Process(tracked.pid).status() == psutil.STATUS_ZOMBIE, 10, "the child to exit")
        reaped = processes.reap_orphans(tracked)
        assert stray.pid in reaped
        assert 3 == tracked.wait()


class TestSignals:
    def test_signals_reach_the_events_through_the_wakeup_pipe(self) -> None:
        """SIGHUP sets reload only; SIGTERM sets stop; the old handlers come back afterwards."""
        import os
        import signal

        from launcher.run.daemon import stop_on_signals

        before = signal.getsignal(signal.SIGTERM)
        with stop_on_signals() as (stop, reload):
            os.kill(os.getpid(), signal.SIGHUP)
            assert reload.wait(2) and not stop.is_set()
            os.kill(os.getpid(), signal.SIGTERM)
            assert stop.wait(2)
        assert signal.getsignal(signal.SIGTERM) is before
        assert signal.set_wakeup_fd(-1) == -1, "the wakeup fd is given back"


class TestUnexecutable:
    """What execve cannot take is one line before anything is spawned (a reload checks it before the stop)."""

    @pytest.mark.parametrize(("env", "secrets", "words"), [
        ({"SOME_SETTING": "a\0b"}, {}, "env.SOME_SETTING"),
        ({}, {"VLLM_API_KEY": "key\0with-a-nul"}, "VLLM_API_KEY"),
        ({"SOME_SETTING": "x" * 140_000}, {}, "MAX_ARG_STRLEN"),
    ])
    def test_a_nul_or_an_oversized_entry_is_one_line_naming_it(self, env: dict[str, str], secrets: dict[str, str],
                                                               words: str) -> None:
        plan = dataclasses.replace(plan_for(["x"]), env=env)
        assert command.exec_problem(plan, secrets) is not None
        with pytest.raises(ConfigError) as caught:
            supervisor.spawn(plan, attempt=1, secrets=secrets, sink=None, echo=False, popen=_never)
        message = str(caught.value)
        assert words in message and "\n" not in message and "with-a-nul" not in message

    def test_an_argv_word_over_the_limit_names_its_flag(self) -> None:
        plan = plan_for(["vllm", "serve", "m", "--chat-template", "t" * 200_000])
        problem = command.exec_problem(plan, {})
        assert problem is not None and "--chat-template" in problem and "MAX_ARG_STRLEN" in problem

    @pytest.mark.parametrize(("error", "kind"), [(OSError(errno.E2BIG, "Argument list too long"), ConfigError),
                                                 (FileNotFoundError(errno.ENOENT, "No such file"), ConfigError),
                                                 (OSError(errno.EAGAIN, "Resource busy"), TransientFailure)])
    def test_an_exec_that_fails_is_one_line(self, error: OSError, kind: type[Exception]) -> None:
        def failing(*args: object, **kwargs: object) -> subprocess.Popen[bytes]:
            raise error

        with pytest.raises(kind) as caught:
            supervisor.spawn(plan_for(["/opt/vllm/bin/vllm", "serve", "m"]), attempt=1, secrets={}, sink=None,
                             echo=False, popen=failing)
        assert "/opt/vllm/bin/vllm" in str(caught.value) and error.strerror in str(caught.value)


def _never(*args: object, **kwargs: object) -> subprocess.Popen[bytes]:
    raise AssertionError("nothing is spawned")
