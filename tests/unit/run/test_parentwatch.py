"""An `up` that tune or bench --compare started stops when that process is gone, however it died."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable

from launcher.config.load import loads
from launcher.run.parentwatch import PARENT_VARIABLE, watch_parent
from launcher.run.supervisor import child_environment
from launcher.vllm import command


def gone_event() -> tuple[threading.Event, list[int], Callable[[int], None]]:
    event, seen = threading.Event(), []

    def on_gone(pid: int) -> None:
        seen.append(pid)
        event.set()

    return event, seen, on_gone


def test_nothing_is_watched_without_the_variable_or_with_garbage_in_it() -> None:
    event, _, on_gone = gone_event()
    for environ in ({}, {PARENT_VARIABLE: ""}, {PARENT_VARIABLE: "-1"}, {PARENT_VARIABLE: "1"},
                    {PARENT_VARIABLE: "12\n34"}):
        assert watch_parent(environ, on_gone=on_gone) is None
    assert not event.is_set()


def test_a_parent_that_is_gone_already_stops_it_at_once() -> None:
    """The parent died before `up` could watch it: no such process, or it is no longer our parent (pdeathsig's race)."""
    _, seen, on_gone = gone_event()
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    assert watch_parent({PARENT_VARIABLE: str(done.pid)}, on_gone=on_gone) is None
    assert [done.pid] == seen
    alive_but_not_ours = os.getpid()  # alive, yet not our parent: we were re-parented
    assert watch_parent({PARENT_VARIABLE: str(alive_but_not_ours)}, on_gone=on_gone) is None
    assert [done.pid, alive_but_not_ours] == seen


def test_the_parents_exit_is_seen() -> None:
    """However the parent ends (here SIGKILL), its pidfd says so and `on_gone` runs once."""
    event, seen, on_gone = gone_event()
    parent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        thread = watch_parent({PARENT_VARIABLE: str(parent.pid)}, on_gone=on_gone,
                              parent_pid=lambda: parent.pid)
        assert thread is not None and not event.wait(0.2)
        parent.kill()
        parent.wait()
        assert event.wait(10) and [parent.pid] == seen
    finally:
        parent.kill()
        parent.wait()


def test_vllm_never_sees_the_variable() -> None:
    """It is `up`'s to watch: vLLM (and anything it starts) does not inherit it."""
    plan = command.build_plan(loads("model: m\nvllm: {host: 127.0.0.1}\n"))
    env = child_environment(plan, {}, {PARENT_VARIABLE: "4242", "PATH": "/bin"})
    assert PARENT_VARIABLE not in env and "/bin" == env["PATH"]
