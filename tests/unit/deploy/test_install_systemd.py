"""scripts/install-systemd: the dry run changes nothing, the --root install writes what a live one does (files,
owners, modes, user, enablement), the unit systemd loads is clean, and secrets stay out of everything printed."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path, PurePosixPath

import pytest

from launcher.config.load import load
from launcher.config.secrets import resolve
from launcher.deploy.install import main
from launcher.deploy.systemd_plan import MakeDir, Remove, WriteFile
from launcher.errors import ConfigError
from tests.conftest import ROOT
from tests.helpers.profiles import shipped, write_profile

SECRET = "sk-install-test-5f1e"
QWEN3 = shipped("qwen3")
LIVE_TOOLS = pytest.mark.skipif(not (shutil.which("systemd-sysusers") and shutil.which("systemctl")),
                                reason="systemd-sysusers/systemctl are not installed")


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def install(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, Path]:
    root = tmp_path / "root"
    root.mkdir(exist_ok=True)
    code = main([*args, "--root", str(root), "--no-venv"], environ=env if env is not None else {"VLLM_API_KEY": SECRET})
    return code, root


LOOPBACK = "model: Qwen/Qwen3-0.6B\nvllm: {host: 127.0.0.1, port: 8001}\nlauncher: {stop_grace: 45s}\n"


def test_dry_run_prints_every_step_and_changes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "root"
    root.mkdir()
    code = main([str(write_profile(tmp_path, QWEN3, name="qwen3")), "--dry-run", "--root", str(root)],
                environ={"VLLM_API_KEY": SECRET})
    out = capsys.readouterr().out
    assert (code, tree(root)) == (0, set())
    for command in (f"systemd-sysusers --root={root} vllm-launch.conf", "python3 -m venv /opt/vllm-launch/venv",
                    f"/opt/vllm-launch/venv/bin/pip install '{ROOT}[vllm]'", "install -d -m 0700 /etc/vllm-launch/creds",
                    "install -m 0600 /dev/stdin /etc/vllm-launch/creds/qwen3.api_key",
                    f"systemctl --root={root} enable vllm-launch@qwen3.service",
                    "# skipped with --root: systemctl start vllm-launch@qwen3.service"):
        assert command in out
    assert SECRET not in out


def test_dry_run_without_the_secret_says_a_real_install_would_stop(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    code = main([str(write_profile(tmp_path, QWEN3, name="qwen3")), "--dry-run"], environ={})
    captured = capsys.readouterr()
    assert code == 0
    assert "a real install would stop here: api_key: VLLM_API_KEY is not set" in captured.err
    assert "systemctl daemon-reload" in captured.out and "systemctl start vllm-launch@qwen3.service" in captured.out


@LIVE_TOOLS
def test_root_install_writes_the_profile_credentials_unit_and_user(tmp_path: Path) -> None:
    code, root = install(tmp_path, str(write_profile(tmp_path, QWEN3, name="qwen3")), "--vllm", "/opt/vllm/bin/vllm")
    assert code == 0
    etc = root / "etc"
    modes = {path: stat.S_IMODE((etc / path).stat().st_mode) for path in
             ("vllm-launch", "vllm-launch/creds", "vllm-launch/creds/qwen3.api_key", "vllm-launch/qwen3.yaml",
              "systemd/system/vllm-launch@.service", "systemd/system/vllm-launch@qwen3.service.d/10-profile.conf")}
    assert modes == {"vllm-launch": 0o755, "vllm-launch/creds": 0o700, "vllm-launch/creds/qwen3.api_key": 0o600,
                     "vllm-launch/qwen3.yaml": 0o644, "systemd/system/vllm-launch@.service": 0o644,
                     "systemd/system/vllm-launch@qwen3.service.d/10-profile.conf": 0o644}
    assert (etc / "vllm-launch/creds/qwen3.api_key").stat().st_uid == os.getuid()
    assert (etc / "vllm-launch/creds/qwen3.api_key").read_text() == SECRET + "\n"
    assert any(line.startswith("vllm:") and ":/var/lib/vllm-launch:" in line
               for line in (etc / "passwd").read_text().splitlines())
    wants = etc / "systemd/system/multi-user.target.wants/vllm-launch@qwen3.service"
    assert str(wants.readlink()) == "/etc/systemd/system/vllm-launch@.service"
    installed = (etc / "vllm-launch/qwen3.yaml").read_text()
    assert SECRET not in installed and "$CREDENTIALS_DIRECTORY/api_key" in installed
    # The installed profile is what the unit runs: it loads, takes vLLM from --vllm and finds its credential.
    loaded = load(etc / "vllm-launch/qwen3.yaml")
    assert loaded.launcher.vllm_bin == "/opt/vllm/bin/vllm"
    creds = tmp_path / "run-credentials"
    creds.mkdir()
    (creds / "api_key").write_text(SECRET)
    assert resolve(loaded, {"CREDENTIALS_DIRECTORY": str(creds)}) == {"VLLM_API_KEY": SECRET}
    with pytest.raises(ConfigError, match="CREDENTIALS_DIRECTORY is not set"):
        resolve(loaded, {})


@LIVE_TOOLS
def test_drop_in_loads_only_the_secrets_used_and_derives_the_stop_timeout(tmp_path: Path) -> None:
    code, root = install(tmp_path, str(write_profile(tmp_path, LOOPBACK, name="local")), env={})
    drop_in = (root / "etc/systemd/system/vllm-launch@local.service.d/10-profile.conf").read_text()
    assert code == 0
    assert "LoadCredential" not in drop_in, "a missing credential file fails the unit with status 243"
    assert "TimeoutStopSec=105s" in drop_in.splitlines()  # stop_grace 45 s + 60 s margin
    assert not (root / "etc/vllm-launch/creds/local.api_key").exists()
    unit = (root / "etc/systemd/system/vllm-launch@.service").read_text()
    assert "LoadCredential" not in "".join(line for line in unit.splitlines() if not line.startswith("#"))


@LIVE_TOOLS
def test_profile_paths_outside_the_units_directories_become_writable(tmp_path: Path) -> None:
    code, root = install(tmp_path, str(write_profile(tmp_path, QWEN3, name="qwen3")))
    drop_in = (root / "etc/systemd/system/vllm-launch@qwen3.service.d/10-profile.conf").read_text()
    assert code == 0
    # log_file /workspace/vllm.log and HF_HOME /workspace/.cache/... : one entry covers them all.
    assert [line for line in drop_in.splitlines() if line.startswith("ReadWritePaths")] == ["ReadWritePaths=-/workspace"]


@LIVE_TOOLS
@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_installed_unit_and_drop_in_verify_clean(tmp_path: Path) -> None:
    code, root = install(tmp_path, str(write_profile(tmp_path, QWEN3, name="qwen3")))
    assert code == 0
    units = tmp_path / "units"
    shutil.copytree(root / "etc/systemd/system/vllm-launch@qwen3.service.d", units / "vllm-launch@qwen3.service.d")
    template = (root / "etc/systemd/system/vllm-launch@.service").read_text()
    (units / "vllm-launch@.service").write_text(template.replace("/opt/vllm-launch/venv/bin/vllm-launch", "/bin/true"))
    done = subprocess.run(["systemd-analyze", "verify", "vllm-launch@qwen3.service"], cwd=units,
                          capture_output=True, text=True, timeout=60, check=False)
    assert (0, "") == (done.returncode, done.stderr.strip())


@LIVE_TOOLS
def test_missing_secret_is_78_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, root = install(tmp_path, str(write_profile(tmp_path, QWEN3, name="qwen3")), env={})
    assert (code, tree(root)) == (78, set())
    assert "api_key: VLLM_API_KEY is not set for the installer" in capsys.readouterr().err


@LIVE_TOOLS
def test_rerun_without_the_secret_keeps_the_installed_one(tmp_path: Path) -> None:
    path = write_profile(tmp_path, QWEN3, name="qwen3")
    assert install(tmp_path, str(path))[0] == 0
    code, root = install(tmp_path, str(path), env={})
    assert code == 0
    assert (root / "etc/vllm-launch/creds/qwen3.api_key").read_text() == SECRET + "\n"


@LIVE_TOOLS
def test_uninstall_removes_the_instance_and_keeps_what_others_share(tmp_path: Path) -> None:
    path = write_profile(tmp_path, QWEN3, name="qwen3")
    assert install(tmp_path, str(path))[0] == 0
    code, root = install(tmp_path, str(path), "--uninstall")
    left = tree(root)
    assert code == 0
    assert not {"etc/vllm-launch/qwen3.yaml", "etc/vllm-launch/creds/qwen3.api_key",
                "etc/systemd/system/vllm-launch@qwen3.service.d",
                "etc/systemd/system/multi-user.target.wants/vllm-launch@qwen3.service"} & left
    assert {"etc/systemd/system/vllm-launch@.service", "etc/passwd"} <= left


def test_instance_names_systemd_cannot_take_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main([str(write_profile(tmp_path, LOOPBACK, name="my model")), "--dry-run"], environ={})
    assert code == 78
    assert "becomes the unit instance vllm-launch@NAME" in capsys.readouterr().err


def test_the_script_runs_the_installer(tmp_path: Path) -> None:
    done = subprocess.run([str(ROOT / "scripts" / "install-systemd"), str(write_profile(tmp_path, LOOPBACK, name="local")),
                           "--dry-run"], capture_output=True, text=True, timeout=60, check=False,
                          env={"PATH": os.environ["PATH"], "PYTHON": sys.executable})
    assert done.returncode == 0, done.stderr
    assert "systemctl enable vllm-launch@local.service" in done.stdout


def test_the_installer_needs_only_pyyaml_from_outside_the_standard_library() -> None:
    """It runs on the box's system python3 (python3-yaml), before the venv with the launcher's dependencies."""
    probe = ("import sys, launcher.deploy.install; "
             "print(sorted(m for m in ('psutil', 'structlog', 'tenacity', 'pynvml', 'prometheus_client') "
             "if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          check=True)
    assert done.stdout.strip() == "[]"


def test_relative_paths_become_absolute_at_install(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """systemd runs the unit from /: tiny-cpu's `.venv/bin/vllm`, `.scratch/…` and `.models/…` are resolved
    against the installer's directory (and said so); a hub id and a bare command stay as written."""
    monkeypatch.chdir(tmp_path)
    path = write_profile(tmp_path, shipped("tiny-cpu"), name="tiny-cpu")
    assert 0 == main([str(path), "--dry-run", "--no-venv"], environ={"VLLM_API_KEY": SECRET})
    out = capsys.readouterr().out
    installed = out.split("/etc/vllm-launch/tiny-cpu.yaml <<'EOF'\n")[1].split("\nEOF\n")[0]
    assert f"model: {tmp_path}/.models/tiny-llama\n" in installed
    assert f"  vllm_bin: {tmp_path}/.venv/bin/vllm\n" in installed
    assert f"  log_file: {tmp_path}/.scratch/tiny-cpu/vllm.log\n" in installed
    assert f"ReadWritePaths=-{tmp_path}/.scratch/tiny-cpu\n" in out
    assert f"note: launcher.vllm_bin: .venv/bin/vllm → {tmp_path}/.venv/bin/vllm (systemd runs the unit from /)" in out
    hub = write_profile(tmp_path, LOOPBACK.replace("launcher: {", "launcher: {vllm_bin: vllm, "), name="hub")
    assert 0 == main([str(hub), "--dry-run", "--no-venv"], environ={})
    out = capsys.readouterr().out
    assert "model: Qwen/Qwen3-0.6B\n" in out and "vllm_bin: vllm\n" in out and "note:" not in out


def test_uninstall_refuses_a_name_no_unit_can_have(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`a b;c.yaml`: refused in one line (78), never `rm -rf /etc/vllm-launch/a b;c.yaml` printed or run."""
    code = main([str(write_profile(tmp_path, LOOPBACK, name="a b;c")), "--uninstall", "--dry-run"], environ={})
    out, err = capsys.readouterr()
    assert (78, "") == (code, out)
    assert "--uninstall: the file name 'a b;c' becomes the unit instance vllm-launch@NAME" in err


def test_printed_steps_quote_paths_and_keep_the_here_document_closed() -> None:
    assert "rm -rf '/etc/vllm-launch/a b;c.yaml'" == Remove(PurePosixPath("/etc/vllm-launch/a b;c.yaml")).shell()
    assert "install -d -m 0755 '/x y'" == MakeDir(PurePosixPath("/x y"), 0o755).shell()
    step = WriteFile(PurePosixPath("/etc/f"), "a\nEOF\nrm -rf /\n", 0o644)
    assert "install -D -m 0644 /dev/stdin /etc/f <<'EOF_'\na\nEOF\nrm -rf /\nEOF_" == step.shell()


def test_a_path_with_a_newline_never_reaches_the_drop_in(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A newline in HF_HOME would start a directive of its own (ExecStartPre=+… runs as root): refused."""
    text = LOOPBACK + 'env: {HF_HOME: "/data/hf\\nExecStartPre=+/bin/sh -c id"}\n'
    assert 78 == main([str(write_profile(tmp_path, text, name="nl")), "--dry-run", "--no-venv"], environ={})
    out, err = capsys.readouterr()
    assert "ExecStartPre" not in out and "holds a space or a control character" in err
