"""The shipped systemd unit: what it must say, and systemd's own verdict where systemd-analyze exists."""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from tests.conftest import ROOT

UNIT = ROOT / "systemd" / "vllm-launch@.service"


def test_unit_declares_the_contract() -> None:
    """Type=notify, 78 never restarted, the supervisor stops vLLM itself, private files; the credentials are
    the per-instance drop-in's (scripts/install-systemd), since one the profile does not use fails the unit."""
    text = UNIT.read_text()
    for line in ("Type=notify", "NotifyAccess=main", "RestartPreventExitStatus=78", "KillMode=mixed",
                 "ExecStart=/opt/vllm-launch/venv/bin/vllm-launch up /etc/vllm-launch/%i.yaml", "WatchdogSec=",
                 "UMask=0077", "ExecReload=/bin/kill -HUP $MAINPID"):
        assert line in text
    assert not [line for line in text.splitlines() if line.startswith("LoadCredential")]
    assert "Environment=VLLM_API_KEY" not in text
    assert not [line for line in text.splitlines() if "=" in line and " #" in line.split("=", 1)[1]], \
        "systemd has no trailing comments"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_analyze_verify_is_clean(tmp_path: Path) -> None:
    """`systemd-analyze verify` prints nothing: unknown keys and bad values only warn, so any output fails."""
    unit = tmp_path / "vllm-launch@.service"
    unit.write_text(UNIT.read_text().replace("/opt/vllm-launch/venv/bin/vllm-launch", "/bin/true"))
    done = subprocess.run(["systemd-analyze", "verify", "vllm-launch@qwen3.service"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, check=False)
    assert (0, "") == (done.returncode, done.stderr.strip())


def test_documentation_points_at_pages_that_exist() -> None:
    """`systemctl help vllm-launch@NAME` opens these: the project's pages (pyproject's URLs), each naming a file
    of this repository. A file:// path would not do: the installer puts only a venv under /opt/vllm-launch."""
    homepage = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Homepage"]
    lines = [line for line in UNIT.read_text().splitlines() if line.startswith("Documentation=")]
    uris = [uri for line in lines for uri in line.removeprefix("Documentation=").split()]
    assert uris and all(uri.startswith(homepage) for uri in uris)
    paths = [uri.removeprefix(f"{homepage}/blob/main/") for uri in uris if uri != f"{homepage}#readme"]
    assert [] == [path for path in paths if not (ROOT / path).is_file()]
    assert "docs/operations.md" in paths, "exit codes and signals: what an operator looking at the unit needs"
