"""`sudo scripts/install-systemd` reads a `{file:}` secret with the rights of the user who ran sudo, never
root's: a file only root can read is refused in one line, and the dry run names each secret's source (never
its value). Without real sudo: SUDO_UID/SUDO_GID in the installer's environment are the seam, and as root
the child that reads the file drops to that uid (65534, nobody) for real."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.deploy import invoker
from launcher.deploy.install import main
from tests.helpers.profiles import write_profile

AS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="dropping to another uid needs root")
NOBODY = {"SUDO_UID": "65534", "SUDO_GID": "65534"}
VALUE = "root-only-secret-8c1d"
LOCAL = "model: Qwen/Qwen3-0.6B\nvllm: {{host: 127.0.0.1, port: 8001}}\napi_key: {{file: {secret}}}\n"


@pytest.fixture
def secret() -> Iterator[Path]:
    """A root-owned file, mode 0600, in a directory anyone may enter (pytest's tmp_path is 0700)."""
    with tempfile.TemporaryDirectory() as directory:
        Path(directory).chmod(0o755)  # entered by uid 65534; the file itself stays 0600
        path = Path(directory) / "api_key"
        path.write_text(VALUE + "\n")
        path.chmod(0o600)
        yield path


@AS_ROOT
def test_a_secret_the_user_who_ran_sudo_cannot_read_is_refused(tmp_path: Path, secret: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "root"
    root.mkdir()
    code = main([str(write_profile(tmp_path, LOCAL.format(secret=secret), name="local")), "--root", str(root), "--no-venv"],
                environ=NOBODY)
    err = capsys.readouterr().err
    assert code == 78 and list(root.iterdir()) == []
    assert len(err.strip().splitlines()) == 1
    assert str(secret) in err and "uid 65534" in err and "Permission denied" in err and VALUE not in err


@AS_ROOT
def test_the_dry_run_names_where_each_secret_comes_from(tmp_path: Path, secret: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert 0 == main([str(write_profile(tmp_path, LOCAL.format(secret=secret), name="local")), "--dry-run"], environ=NOBODY)
    captured = capsys.readouterr()
    assert "a real install would stop here: api_key: cannot read" in captured.err
    secret.chmod(0o644)  # now nobody may read it: the install goes on with it
    assert 0 == main([str(write_profile(tmp_path, LOCAL.format(secret=secret), name="local")), "--dry-run"], environ=NOBODY)
    captured = capsys.readouterr()
    assert f"# the secret from {secret} (read with the rights of uid 65534, who ran sudo), not shown" in captured.out
    assert VALUE not in captured.out + captured.err and "would stop" not in captured.err


@AS_ROOT
def test_the_child_reads_with_the_invokers_rights() -> None:
    who = invoker.invoker(NOBODY)
    assert (who.uid, who.gid) == (65534, 65534)
    with pytest.raises(Exception, match="Permission denied"):
        invoker.read_secret("api_key", "/etc/shadow", who)
    assert invoker.read_secret("api_key", "/etc/hostname", who) == Path("/etc/hostname").read_text().strip()


def test_without_sudo_the_installer_reads_with_its_own_rights() -> None:
    assert invoker.invoker(NOBODY, euid=1000) == invoker.Invoker()  # sudo to a user, not to root
    assert invoker.invoker({"SUDO_UID": "0"}, euid=0) == invoker.Invoker()  # root ran sudo: root's own rights
    assert invoker.invoker({}, euid=0) == invoker.Invoker()


def test_a_fifo_or_a_device_as_the_secret_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in (str(fifo), "/dev/zero"):
        with pytest.raises(Exception, match="not a regular file"):
            invoker.read_secret("api_key", path, invoker.Invoker())
