"""The suite's own environment: what it starts can be interrupted like a program at a terminal."""

from __future__ import annotations

import subprocess
import sys


def test_a_process_the_suite_starts_does_not_ignore_sigint() -> None:
    """A background job of a shell without job control inherits SIGINT ignored; the suite takes it back
    (tests/conftest.py), else `bench`'s Ctrl-C test waits out its whole --duration."""
    done = subprocess.run([sys.executable, "-c", "import signal; print(signal.getsignal(signal.SIGINT) is "
                           "signal.default_int_handler)"], capture_output=True, text=True, check=True)
    assert "True" == done.stdout.strip()
