"""Stopping leftovers: a zombie has exited already and is not reported as a process that cannot be stopped."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil

from launcher.run.processes import kill_processes

# A parent that never reaps: its child exits at once and stays a zombie until the parent ends.
PARENT = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "pass"])
print(child.pid, flush=True)
time.sleep(60)
"""


def test_a_zombie_leftover_counts_as_stopped() -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        zombie = psutil.Process(int(parent.stdout.readline()))
        deadline = time.monotonic() + 30
        while zombie.status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
            time.sleep(0.05)
        assert zombie.status() == psutil.STATUS_ZOMBIE
        assert kill_processes([zombie], grace_s=0.2, kill_wait_s=0.2) == []
        assert zombie.status() == psutil.STATUS_ZOMBIE, "still there, waiting for its parent: nothing to stop"
    finally:
        parent.kill()
        parent.wait()


def test_a_live_process_is_stopped() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert kill_processes([psutil.Process(proc.pid)], grace_s=5, kill_wait_s=5) == []
        assert proc.wait(timeout=10) is not None
    finally:
        proc.kill()
