"""Choosing the probe: NVML if its bindings load and initialise, else nvidia-smi on PATH, else none."""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import warnings
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

from launcher.gpu.inventory import GpuProbe
from launcher.gpu.nvml import NvmlProbe
from launcher.gpu.smi import SmiProbe


def detect(environ: Mapping[str, str] | None = None, *,
           importer: Callable[[str], ModuleType] = importlib.import_module,
           which: Callable[..., str | None] = shutil.which) -> GpuProbe | None:
    """NVML if its bindings load and initialise, else nvidia-smi if on PATH, else None. Never raises."""
    environ = os.environ if environ is None else environ
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            nvml: Any = importer("pynvml")
        nvml.nvmlInit()
        with contextlib.suppress(Exception):  # a failed shutdown after a good init still means NVML works
            nvml.nvmlShutdown()
        return NvmlProbe(nvml, environ)
    except Exception:  # noqa: S110  (any failure at this boundary means "no usable NVML")
        pass
    if which("nvidia-smi", path=environ.get("PATH")):
        return SmiProbe(environ=environ)
    return None
