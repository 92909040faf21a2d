"""`supervised` (bench --compare, tune): the `up` it starts can write any amount to stderr without blocking."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from launcher.bench.client import ServerError
from launcher.bench.command import supervised
from launcher.config.load import loads

LOUD = "import sys\nfor i in range(20000): sys.stderr.write(f'line {i} ' + 'x' * 100 + '\\n')\nsys.exit(3)"


def test_a_child_that_writes_megabytes_to_stderr_is_not_blocked(tmp_path: Path) -> None:
    """Two MiB to stderr, then exit 3: with a pipe nobody reads, the child blocks at 64 KiB and the start times
    out instead; the last line is the reason given."""
    server = supervised("p.yaml", loads("model: m\nvllm:\n  host: 127.0.0.1\n", name="p"), (),
                        {"VLLM_LAUNCH_STATE_DIR": str(tmp_path)}, ready_timeout_s=60)
    server.argv = [sys.executable, "-c", LOUD]
    with pytest.raises(ServerError) as caught:
        server.__enter__()
    assert "exited 3 before serving: line 19999 " in str(caught.value)
    assert server.errors is None, "closed"
