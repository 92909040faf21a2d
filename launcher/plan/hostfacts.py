"""What preflight needs to know about the host besides its GPUs, read cheaply and never raising.

/dev/shm, free disk where the model will be downloaded, whether it already is,
the CUDA version torch was built for, free RAM, and the vLLM processes no live
server owns: ours (by proof, plan/ownership.py) and a stranger's. `host_facts`
reads the machine; `preflight.evaluate` only reads the `HostFacts` it returns,
so the checks stay pure and testable.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from launcher.errors import ConfigError
from launcher.plan import modelinfo
from launcher.plan.ownership import LocalProcess, ProcessIter, local_vllm

if TYPE_CHECKING:
    from launcher.config.profile import Profile

SHM_PATH = "/dev/shm"  # noqa: S108  (only measured, never written)
_TORCH_CUDA = re.compile(r"^cuda\s*(?::[^=]*)?=\s*['\"](\d+\.\d+)", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class HostFacts:
    """The host side of preflight; None means unknown, and unknown skips the check."""

    shm_bytes: int | None = None  # size of /dev/shm
    cache_dir: str | None = None  # the Hugging Face hub cache the model goes to
    cache_free_bytes: int | None = None
    model_downloaded: bool | None = None  # a local directory counts as downloaded
    model_bytes: int | None = None  # safetensors size, when the files or their index are local
    model_present_bytes: int = 0  # of those, already on disk (a partial download)
    torch_cuda: str | None = None  # torch.version.cuda of vLLM's torch, e.g. "12.8"
    memory_available_bytes: int | None = None
    leftovers: tuple[LocalProcess, ...] = ()  # ours, by proof (plan/ownership.py): `up` stops them
    strangers: tuple[LocalProcess, ...] = ()  # vLLM processes no live server owns and nothing proves ours

    @classmethod
    def none(cls) -> HostFacts:
        """For simulated GPUs (`plan --gpu`): no host checks at all."""
        return cls()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def host_facts(profile: Profile | None, *, environ: Mapping[str, str] | None = None,
               process_iter: ProcessIter | None = None, shm_path: str = SHM_PATH) -> HostFacts:
    """Read the machine for `profile` (None: only what needs no profile). Cheap: no imports of torch."""
    env = dict(os.environ if environ is None else environ)
    if profile is not None:
        env.update(profile.env)  # vLLM runs with the profile's env: its HF_HOME is where the model goes
    cache = modelinfo.hf_hub_cache(env)
    downloaded, size, present = _model_files(profile.model, env) if profile is not None else (None, None, 0)
    vllm = local_vllm(process_iter=process_iter)
    return HostFacts(
        shm_bytes=_fs_size(shm_path), cache_dir=str(cache), cache_free_bytes=_fs_free(cache),
        model_downloaded=downloaded, model_bytes=size, model_present_bytes=present,
        torch_cuda=torch_cuda(_torch_version_files(profile, env)), memory_available_bytes=_available_memory(),
        leftovers=vllm.ours, strangers=vllm.strangers,
    )


def _fs_size(path: str) -> int | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_blocks * st.f_frsize


def _fs_free(path: Path) -> int | None:
    """Free bytes for an unprivileged writer on the filesystem that holds `path` (or would)."""
    for candidate in (path, *path.parents):
        try:
            st = os.statvfs(candidate)
        except OSError:
            continue
        return st.f_bavail * st.f_frsize
    return None


def _model_files(model: str, environ: Mapping[str, str]) -> tuple[bool | None, int | None, int]:
    """(downloaded, size, bytes present) of a local directory or a hub cache snapshot."""
    try:
        local = Path(model)
        if local.is_dir():
            return True, modelinfo.safetensors_bytes(local), 0
        snapshot = modelinfo.snapshot_dir(model, environ)
        if snapshot is None:
            return False, None, 0
        present = sorted(p.name for p in snapshot.glob("*.safetensors"))
        index = snapshot / modelinfo.INDEX
        if os.path.lexists(index):  # the index arrives first and knows the size of every shard
            wanted, size = modelinfo.read_index(index)
        else:
            wanted, size = set(), modelinfo.safetensors_bytes(snapshot)
        complete = bool(present) and wanted <= set(present)
        present_bytes = sum((snapshot / name).stat().st_size for name in present)
        return complete, size, present_bytes
    except (OSError, ValueError, ConfigError):  # a broken file: capacity's no_estimate names it
        return None, None, 0


def torch_cuda(version_files: Iterable[Path]) -> str | None:
    """`cuda` from the first torch/version.py found; None for CPU builds or when there is none."""
    for path in version_files:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError:
            continue
        match = _TORCH_CUDA.search(text)
        return match.group(1) if match else None
    return None


def _torch_version_files(profile: Profile | None, environ: Mapping[str, str]) -> Iterator[Path]:
    """torch/version.py of vLLM's own environment first, then of ours; read as text, never imported."""
    from launcher.errors import LauncherError
    from launcher.vllm.install import find_vllm

    if profile is not None:
        try:
            prefix = find_vllm(profile.launcher.vllm_bin, environ).parent.parent
        except LauncherError:
            prefix = None
        if prefix is not None:
            for packages in ("site-packages", "dist-packages"):
                yield from sorted(prefix.glob(f"lib/python3*/{packages}/torch/version.py"))
    try:
        spec = importlib.util.find_spec("torch")  # finds without importing (seconds, and CUDA init)
    except (ImportError, ValueError):
        spec = None
    for location in (spec.submodule_search_locations or []) if spec else []:
        yield Path(location) / "version.py"


def _available_memory() -> int | None:
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except (ImportError, OSError):
        return None
