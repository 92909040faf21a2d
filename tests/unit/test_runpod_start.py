"""scripts/runpod-start.sh: container mode, the profile default, sshd only with a key and an sshd."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.conftest import ROOT

SCRIPT = ROOT / "scripts" / "runpod-start.sh"


def fake(path: Path, name: str, body: str) -> None:
    target = path / name
    target.write_text(f"#!/usr/bin/env bash\n{body}\n")
    target.chmod(0o755)


def run(tmp_path: Path, **env: str) -> tuple[str, Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake(bin_dir, "vllm-launch", 'echo "launcher: $* profile=$VLLM_LAUNCH_PROFILE set=${VLLM_LAUNCH_SET:-}"')
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    done = subprocess.run(["bash", str(SCRIPT), "--log-format", "json"], capture_output=True, text=True, timeout=30,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(home), **env}, check=True)
    return done.stdout + done.stderr, home


def test_execs_the_launcher_in_container_mode(tmp_path: Path) -> None:
    out, home = run(tmp_path, VLLM_LAUNCH_SET="vllm.max-model-len=32768")
    assert "launcher: up --container --log-format json profile=/workspace/vllm-launch.yaml" in out
    assert "set=vllm.max-model-len=32768" in out
    assert not (home / ".ssh").exists()  # no key: no sshd, no authorized_keys


def test_sshd_only_with_a_key_and_an_sshd(tmp_path: Path) -> None:
    out, home = run(tmp_path, PUBLIC_KEY="ssh-ed25519 AAAA test@x", VLLM_LAUNCH_PROFILE="/p.yaml")
    assert "profile=/p.yaml" in out
    assert not (home / ".ssh").exists()  # a key but no sshd on PATH: nothing to start
    fake(tmp_path / "bin", "sshd", f"touch {tmp_path}/sshd-started")
    run(tmp_path, PUBLIC_KEY="ssh-ed25519 AAAA test@x")
    assert (tmp_path / "sshd-started").exists()
    assert "ssh-ed25519 AAAA test@x" in (home / ".ssh" / "authorized_keys").read_text()
    assert 0o600 == (home / ".ssh" / "authorized_keys").stat().st_mode & 0o777
