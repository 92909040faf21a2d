"""The systemd install as data: every file it writes and every command it runs, decided from the profile alone.

Pure: nothing here touches the machine, so `--dry-run` prints exactly what a real install does, and the
tests read the plan before any file exists. Secrets travel only in `WriteFile.content` of files marked
`secret`; the printed form of such a step never shows them.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

import yaml

from launcher.config import document
from launcher.config.profile import Profile
from launcher.config.secrets import CREDENTIALS_PREFIX
from launcher.errors import ConfigError

ETC = PurePosixPath("/etc/vllm-launch")
CREDS = ETC / "creds"
UNIT_DIR = PurePosixPath("/etc/systemd/system")
SYSUSERS = PurePosixPath("/etc/sysusers.d/vllm-launch.conf")
DEFAULT_PREFIX = PurePosixPath("/opt/vllm-launch")
# In the checkout: the runtime dependencies at the versions CI tested, so a service installs what was tested.
CONSTRAINTS = "constraints.txt"
# Directories the unit already makes writable (StateDirectory=, CacheDirectory=, LogsDirectory=).
MANAGED = (PurePosixPath("/var/lib/vllm-launch"), PurePosixPath("/var/cache/vllm-launch"),
           PurePosixPath("/var/log/vllm-launch"))
# Beyond stop_grace: the final SIGKILL, the wait for GPU memory to come back, and the state write.
STOP_MARGIN_S = 60
_INSTANCE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_SECRET_ENV = {"api_key": "VLLM_API_KEY", "hf_token": "HF_TOKEN"}
# Environment variables that hold a directory vLLM writes to.
_PATH_ENV = ("HF_HOME", "HF_HUB_CACHE", "VLLM_CACHE_ROOT", "XDG_CACHE_HOME", "TRITON_CACHE_DIR")
_UNSAFE_PATH = re.compile(r"[\s\x00-\x1f\x7f]")


@dataclass(frozen=True, slots=True)
class WriteFile:
    path: PurePosixPath
    content: str
    mode: int
    secret: bool = False
    source: str | None = None  # a secret's: where the installer read it (a path or a variable), never its value

    def shell(self) -> str:
        path = shlex.quote(str(self.path))
        if self.secret:
            source = f" from {self.source}" if self.source else ""
            return f"install -m {self.mode:04o} /dev/stdin {path}   # the secret{source}, not shown"
        body = self.content.rstrip()
        end = "EOF"
        while end in body.splitlines():  # a line of the content must not end the here-document early
            end += "_"
        return f"install -D -m {self.mode:04o} /dev/stdin {path} <<'{end}'\n{body}\n{end}"


@dataclass(frozen=True, slots=True)
class MakeDir:
    path: PurePosixPath
    mode: int

    def shell(self) -> str:
        return f"install -d -m {self.mode:04o} {shlex.quote(str(self.path))}"


@dataclass(frozen=True, slots=True)
class Remove:
    path: PurePosixPath

    def shell(self) -> str:
        return f"rm -rf {shlex.quote(str(self.path))}"


@dataclass(frozen=True, slots=True)
class Run:
    argv: tuple[str, ...]
    # Commands that only make sense on the live system (daemon-reload, starting the unit) are left out of
    # an install into a directory tree.
    live_only: bool = False

    def shell(self) -> str:
        return shlex.join(self.argv)


Step = WriteFile | MakeDir | Remove | Run


@dataclass(frozen=True, slots=True)
class InstallOptions:
    project: str  # what pip installs: the checkout's path
    user: str = "vllm"
    prefix: PurePosixPath = DEFAULT_PREFIX
    vllm: str | None = None  # an existing vLLM executable; the venv then holds the launcher only
    root: str | None = None  # install into this directory tree (systemctl --root)
    venv: bool = True  # False: the launcher is already installed at PREFIX/venv


def instance_name(profile: Profile) -> str:
    return checked_name(profile.name, profile.source)


def checked_name(name: str, source: str) -> str:
    """The unit instance name, on every path that builds a unit or file name from it (install and uninstall)."""
    if not _INSTANCE.fullmatch(name):
        raise ConfigError(f"{source}: the file name {name!r} becomes the unit instance "
                          "vllm-launch@NAME; rename it to letters, digits, '.', '_' or '-'")
    return name


def stop_timeout_s(profile: Profile) -> int:
    """How long the service manager (systemd, or Kubernetes for a pod) waits for a clean stop before SIGKILL."""
    return int(profile.launcher.stop_grace_s) + STOP_MARGIN_S


def secrets_used(profile: Profile) -> tuple[str, ...]:
    """The credentials the unit loads: only those the profile references (a missing one fails the unit)."""
    return tuple(key for key in ("api_key", "hf_token") if getattr(profile, key) is not None)


def secret_sources(profile: Profile) -> dict[str, str]:
    """Where the installer takes each used secret from: the file the profile names, else its variable."""
    sources: dict[str, str] = {}
    for key in secrets_used(profile):
        ref = getattr(profile, key)
        if ref.kind == "file" and not ref.ref.startswith(CREDENTIALS_PREFIX):
            sources[key] = ref.ref
        else:
            sources[key] = f"${ref.ref if ref.kind == 'env' else _SECRET_ENV[key]}"
    return sources


def secret_values(profile: Profile, environ: Mapping[str, str], existing: set[str],
                  read_file: Callable[[str, str], str]) -> dict[str, str]:
    """Each used secret's value from the installer's environment (or the file the profile names, through
    `read_file(key, path)`, which reads it with the invoking user's rights); a secret already installed
    (re-run, upgrade) may be absent and is then kept."""
    values: dict[str, str] = {}
    for key in secrets_used(profile):
        ref = getattr(profile, key)
        name = ref.ref if ref.kind == "env" else _SECRET_ENV[key]  # the variable the installer reads
        if ref.kind == "file" and not ref.ref.startswith(CREDENTIALS_PREFIX):
            value = read_file(key, ref.ref)
        else:
            value = environ.get(name, "")
        if value:
            values[key] = value
        elif key not in existing:
            raise ConfigError(f"{key}: {name} is not set for the installer; run `sudo {name}=… "
                              f"scripts/install-systemd …` (or sudo --preserve-env={name})")
    return values


def installed_profile(text: str, profile: Profile, vllm: str | None) -> str:
    """The profile as the unit reads it: secrets from the unit's credentials, vLLM from --vllm."""
    data = document.parse_mapping(text, profile.source)
    for key in secrets_used(profile):
        data[key] = {"file": f"{CREDENTIALS_PREFIX}{key}"}
    if vllm:
        data.setdefault("launcher", {})["vllm_bin"] = vllm
    header = (f"# Installed by scripts/install-systemd from {profile.source}; edit here, then\n"
              f"#   systemctl reload vllm-launch@{profile.name}\n")
    return header + yaml.safe_dump(data, sort_keys=False)


def writable_paths(profile: Profile) -> list[PurePosixPath]:
    """Absolute paths the profile writes to outside the unit's own directories (ProtectSystem=strict)."""
    wanted: list[str] = [str(profile.launcher.log_file.parent)] if profile.launcher.log_file else []
    wanted += [value for name, value in profile.env.items() if name in _PATH_ENV]
    candidates = [PurePosixPath(p) for p in wanted]
    outside = [p for p in candidates if p.is_absolute() and not any(p.is_relative_to(m) for m in MANAGED)]
    for path in outside:
        if _UNSAFE_PATH.search(str(path)):
            # A space splits ReadWritePaths=, a newline would start a directive of its own in the drop-in.
            raise ConfigError(f"{profile.source}: the path {str(path)!r} holds a space or a control character, "
                              "which the unit's ReadWritePaths= cannot take; move it to a plain path")
    # /workspace already covers /workspace/.cache/vllm
    return sorted({p for p in outside if not any(p != q and p.is_relative_to(q) for q in outside)})


def absolute_paths(text: str, source: str, cwd: str,
                   is_local: Callable[[str], bool] = lambda path: False) -> tuple[str, list[str]]:
    """The profile with its relative paths made absolute against the installer's directory: systemd runs the
    unit from /, where `.venv/bin/vllm` or `.scratch/vllm.log` mean nothing. `is_local(path)`: whether a
    relative model names a directory under `cwd` (the caller looks; this module touches nothing). Returns the
    text (unchanged when nothing was relative) and one note per path changed."""
    data = document.parse_mapping(text, source)
    notes: list[str] = []

    def absolute(where: dict[str, Any], name: str, key: str, *, local_only: bool = False) -> None:
        value = where.get(name)
        if not isinstance(value, str) or not value or PurePosixPath(value).is_absolute() or value.startswith("~"):
            return
        # A bare command (vllm_bin: vllm) is found on the unit's PATH; a hub id (Org/Name) is not a path:
        # hub ids never start with '.', and a local directory of that name would shadow it for vLLM too.
        if local_only and not (value.startswith(".") or is_local(value)):
            return
        if name == "vllm_bin" and "/" not in value:
            return
        where[name] = posixpath.normpath(posixpath.join(cwd, value))
        notes.append(f"{key}: {value} → {where[name]} (systemd runs the unit from /)")

    absolute(data, "model", "model", local_only=True)
    for section, names in (("launcher", ("vllm_bin", "log_file")), ("env", _PATH_ENV)):
        if isinstance(data.get(section), dict):
            for name in names:
                absolute(data[section], name, f"{section}.{name}")
    return (yaml.safe_dump(data, sort_keys=False) if notes else text), notes


def drop_in(profile: Profile) -> str:
    name = instance_name(profile)
    lines = [f"# What vllm-launch@{name} needs beyond the template, from {ETC / name}.yaml.",
             "# Written by scripts/install-systemd; run it again after adding a secret or changing stop_grace.",
             "[Service]"]
    lines += [f"LoadCredential={key}:{CREDS / f'{name}.{key}'}" for key in secrets_used(profile)]
    lines.append(f"TimeoutStopSec={stop_timeout_s(profile)}s")
    # "-": a path that does not exist on this box is skipped instead of failing the unit's namespace setup.
    lines += [f"ReadWritePaths=-{path}" for path in writable_paths(profile)]
    return "\n".join(lines) + "\n"


def unit_text(template: str, options: InstallOptions) -> str:
    text = template.replace(str(DEFAULT_PREFIX), str(options.prefix))
    return text.replace("User=vllm\n", f"User={options.user}\n").replace("Group=vllm\n", f"Group={options.user}\n")


def _tool(name: str, root: str | None) -> tuple[str, ...]:
    """systemctl and systemd-sysusers both act on a directory tree with --root."""
    return (name, f"--root={root}") if root else (name,)


def install_steps(profile: Profile, profile_text: str, template: str, options: InstallOptions,
                  secrets: Mapping[str, str], sources: Mapping[str, str] | None = None) -> list[Step]:
    name = instance_name(profile)
    unit = f"vllm-launch@{name}.service"
    systemctl, sysusers = _tool("systemctl", options.root), _tool("systemd-sysusers", options.root)
    steps: list[Step] = [
        WriteFile(SYSUSERS, f'u {options.user} - "vllm-launch service" /var/lib/vllm-launch\n', 0o644),
        Run((*sysusers, SYSUSERS.name)),
    ]
    if options.venv:
        venv = options.prefix / "venv"
        target = options.project if options.vllm else f"{options.project}[vllm]"
        constraints = str(PurePosixPath(options.project) / CONSTRAINTS)
        steps += [Run(("python3", "-m", "venv", str(venv))),
                  Run((str(venv / "bin" / "pip"), "install", target, "-c", constraints))]
    steps += [MakeDir(ETC, 0o755), MakeDir(CREDS, 0o700),
              WriteFile(ETC / f"{name}.yaml", installed_profile(profile_text, profile, options.vllm), 0o644)]
    steps += [WriteFile(CREDS / f"{name}.{key}", value + "\n", 0o600, secret=True, source=(sources or {}).get(key))
              for key, value in secrets.items()]
    steps += [WriteFile(UNIT_DIR / "vllm-launch@.service", unit_text(template, options), 0o644),
              WriteFile(UNIT_DIR / f"{unit}.d" / "10-profile.conf", drop_in(profile), 0o644),
              Run(("systemctl", "daemon-reload"), live_only=True),
              Run((*systemctl, "enable", unit)),
              Run(("systemctl", "start", unit), live_only=True)]
    return steps


def uninstall_steps(name: str, root: str | None) -> list[Step]:
    """One instance out: its unit stopped and disabled, its profile, drop-in and credentials removed. The
    template, venv, user and caches stay (other instances and the downloaded models use them)."""
    name = checked_name(name, "--uninstall")
    unit = f"vllm-launch@{name}.service"
    systemctl = _tool("systemctl", root)
    return [Run(("systemctl", "stop", unit), live_only=True),
            Run((*systemctl, "disable", unit)),
            Remove(UNIT_DIR / f"{unit}.d"),
            Remove(ETC / f"{name}.yaml"),
            *[Remove(CREDS / f"{name}.{key}") for key in ("api_key", "hf_token")],
            Run(("systemctl", "daemon-reload"), live_only=True)]
