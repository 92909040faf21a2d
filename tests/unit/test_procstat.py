"""One "alive" for the whole launcher: a zombie that waits to be reaped holds nothing and is not alive."""

from __future__ import annotations

import os
import subprocess
import sys

from launcher.procstat import alive, stat_fields
from tests.helpers.polling import poll_for


def test_a_zombie_is_not_alive_and_a_running_process_is() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        assert alive(child.pid) and alive(os.getpid())
        assert child.stdin is not None
        child.stdin.close()  # it exits; not reaped yet, it stays a zombie
        poll_for(lambda: not alive(child.pid), 10, "the child to exit")
        fields = stat_fields(child.pid)
        assert fields is not None and fields[0] == b"Z"  # still in the process table: a zombie, not gone
    finally:
        child.kill()
        child.wait()
    assert not alive(child.pid)  # reaped: gone
    assert not alive(0) and not alive(-1)
