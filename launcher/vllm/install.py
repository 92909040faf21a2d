"""The installed vLLM: where its executable is, which version it is, which flags it takes.

`vllm --version` and `vllm serve --help=all` each cost about 10 s (they import
torch), so the version is read through the executable's own interpreter and the
help is cached per version.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path

import structlog

from launcher import safefile
from launcher.config.flags import MIN_FLAGS, FlagCatalog, parse_help, shipped_catalog
from launcher.errors import UsageError, VllmNotFound
from launcher.statedir import write_text_atomic
from launcher.vllm.versions import VersionSemantics, semantics

Runner = Callable[..., subprocess.CompletedProcess[str]]
log = structlog.get_logger("vllm_launch")
MAX_CACHE_BYTES = 4 * 2**20  # vLLM 0.32's list is about 60 KiB

_VERSION_PROBE = "import importlib.metadata as m; print(m.version('vllm'))"
_VERSION_WORD = re.compile(r"(\d+\.\d+(?:\.\d+)?(?:[.+\w-]*)?)\s*$")


def find_vllm(configured: str | None, environ: Mapping[str, str] | None = None) -> Path:
    """The `vllm` to run: the profile's `launcher.vllm_bin`, else `vllm` on PATH."""
    environ = os.environ if environ is None else environ
    name = configured or "vllm"
    found = shutil.which(name, path=environ.get("PATH"))
    if found:
        return Path(found)
    if configured:
        raise VllmNotFound(f"launcher.vllm_bin {configured!r} is not an executable; fix the path in the profile")
    raise VllmNotFound("no `vllm` on PATH; install vLLM (pip install 'vllm-launch[vllm]') or set "
                       "launcher.vllm_bin: /path/to/venv/bin/vllm in the profile")


def installed_version(vllm_bin: Path, run: Runner = subprocess.run) -> str | None:
    """vLLM's version as its own Python reports it; None when it cannot be told."""
    interpreter = _shebang_python(vllm_bin)
    commands = [[interpreter, "-c", _VERSION_PROBE]] if interpreter else []
    commands.append([str(vllm_bin), "--version"])
    for command in commands:
        try:
            done = run(command, capture_output=True, text=True, timeout=90, check=False)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode == 0:
            lines = done.stdout.strip().splitlines()
            match = _VERSION_WORD.search(lines[-1]) if lines else None
            if match:
                return match.group(1)
    return None


def _shebang_python(path: Path) -> str | None:
    try:
        with path.open("rb") as handle:
            first = handle.readline(512).decode(errors="replace").strip()
    except OSError:
        return None
    if not first.startswith("#!") or "python" not in first:
        return None
    parts = first[2:].split()
    if parts and Path(parts[0]).name == "env" and len(parts) > 1:
        return shutil.which(parts[1])
    return parts[0] if parts else None


def cached_catalog(version: str, cache: Path, unreadable: Callable[[str], None] | None = None) -> FlagCatalog | None:
    """The flags installed_catalog cached for this vLLM version, without asking vLLM; None if none, or if the
    file cannot be trusted (read as hostile, every field checked: `unreadable` is told why)."""
    path = cache / f"vllm-flags-{_safe(version)}.json"
    try:
        catalog = FlagCatalog.from_json(safefile.read_text(path, MAX_CACHE_BYTES), source="installed",
                                        origin=str(path))
    except safefile.Missing:
        return None
    except safefile.Unreadable as exc:
        if unreadable is not None:
            unreadable(str(exc))
        return None
    if catalog.version != version:
        if unreadable is not None:
            unreadable(f"{path}: holds the flags of vLLM {catalog.version[:40]!r}, not {version}")
        return None
    return catalog


def installed_catalog(vllm_bin: Path, version: str, cache: Path, run: Runner = subprocess.run) -> FlagCatalog | None:
    """Flags from `vllm serve --help=all`, cached per version; None if the help cannot be read. A cached list
    that cannot be trusted is a warning, and is read again and rewritten."""
    cached = cache / f"vllm-flags-{_safe(version)}.json"
    found = cached_catalog(version, cache, lambda why: log.warning(
        "flag_catalog.cache_ignored", error=why, action="reading `vllm serve --help=all` again (about 10 s)"))
    if found is not None:
        return found
    try:
        done = run([str(vllm_bin), "serve", "--help=all"], capture_output=True, text=True, timeout=180, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    catalog = parse_help(done.stdout, version, "installed")
    if done.returncode != 0 or len(catalog.flags) < MIN_FLAGS:
        return None
    with contextlib.suppress(OSError):  # a read-only cache only costs the next run 10 s
        write_text_atomic(cached, catalog.to_json())  # a new file renamed over whatever lies there
    return catalog


def catalog_for(vllm_bin: Path | None, version: str | None, cache: Path, run: Runner = subprocess.run) -> FlagCatalog:
    """The installed vLLM's flags when it can be asked, else the shipped list."""
    if vllm_bin is not None and version is not None:
        catalog = installed_catalog(vllm_bin, version, cache, run)
        if catalog is not None:
            return catalog
    return shipped_catalog()


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._+-]", "_", text)


def resolve_version(requested: str | None, vllm_bin: Path | None) -> tuple[VersionSemantics, str, str | None]:
    """(semantics, where the version came from, installed version)."""
    installed = installed_version(vllm_bin) if vllm_bin is not None else None
    if requested:
        try:
            return semantics(requested), "--vllm-version", installed
        except ValueError as exc:
            raise UsageError(f"--vllm-version: {exc}") from None
    if installed:
        return semantics(installed), "installed", installed
    return semantics(None), "newest known", None
