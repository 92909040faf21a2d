"""GPUs a plan can be made for without one: a table, `NAME xN`, or a custom spec."""

from __future__ import annotations

import re
from dataclasses import dataclass

from launcher.errors import UsageError

MIB = 1024**2


@dataclass(frozen=True, slots=True)
class GpuModel:
    """One GPU type: memory as NVML reports it, and compute capability."""

    name: str
    nvml_mib: int  # nvmlDeviceGetMemoryInfo().total (what nvidia-smi prints as memory.total)
    cc: tuple[int, int]
    # Share of NVML's total that CUDA (and so vLLM's `total × utilization`) sees; the driver
    # reserves the rest. Measured from published vLLM logs where known, else a typical value.
    cuda_visible: float = 0.985
    # The SXM parts sit on NVLink/NVSwitch: vLLM enables its custom all-reduce there (custom_all_reduce.py
    # checks full NVLink connectivity) and NCCL opens many more channels, each with buffers per peer.
    fabric: bool = False

    @property
    def cuda_total_bytes(self) -> int:
        return int(self.nvml_mib * MIB * self.cuda_visible)


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """The devices a plan is made for (all the same model)."""

    model: GpuModel
    count: int
    source: str  # "table", "custom", "probe", "inventory"
    free_bytes: tuple[int, ...] | None = None  # per device, when read from a probe

    @property
    def total_bytes(self) -> int:
        return self.model.cuda_total_bytes

    def describe(self) -> str:
        count = f" x{self.count}" if self.count > 1 else ""
        return (f"{self.model.name}{count} ({self.model.nvml_mib / 1024:.1f} GiB, "
                f"CC {self.model.cc[0]}.{self.model.cc[1]})")


# memory.total as nvidia-smi/NVML print it, and compute capability (NVIDIA CUDA GPUs table).
GPU_TABLE: dict[str, GpuModel] = {g.name: g for g in (
    GpuModel("l4", 23034, (8, 9), 0.979),
    GpuModel("l40", 46068, (8, 9), 0.987),
    GpuModel("l40s", 46068, (8, 9), 0.987),
    GpuModel("a10", 23028, (8, 6), 0.981),
    GpuModel("a10g", 23028, (8, 6), 0.981),
    GpuModel("a40", 46068, (8, 6), 0.987),
    GpuModel("rtx-a6000", 49140, (8, 6), 0.988),
    GpuModel("rtx-a5000", 24564, (8, 6), 0.985),
    GpuModel("a100-40gb", 40960, (8, 0), 0.970, fabric=True),
    GpuModel("a100-80gb", 81920, (8, 0), 0.989, fabric=True),
    GpuModel("h100", 81559, (9, 0), 0.994, fabric=True),
    GpuModel("h100-nvl", 95830, (9, 0), 0.994),
    GpuModel("h200", 143771, (9, 0), 0.995, fabric=True),
    GpuModel("b200", 183359, (10, 0), 0.995, fabric=True),
    GpuModel("rtx3090", 24576, (8, 6), 0.980),
    GpuModel("rtx3050-laptop", 4096, (8, 6), 0.960),
    GpuModel("rtx4080", 16376, (8, 9), 0.980),
    GpuModel("rtx4090", 24564, (8, 9), 0.985),
    GpuModel("rtx5090", 32607, (12, 0), 0.985),
    GpuModel("rtx6000-ada", 49140, (8, 9), 0.988),
    GpuModel("t4", 15360, (7, 5), 0.985),
    GpuModel("v100-32gb", 32768, (7, 0), 0.985),
)}

_ALIASES = {"a100": "a100-80gb", "h100-80gb": "h100", "h100-sxm": "h100", "h200-141gb": "h200",
            "4090": "rtx4090", "3090": "rtx3090", "5090": "rtx5090", "4080": "rtx4080", "a6000": "rtx-a6000"}
# "a100-80gb x2", "h100 ×4", "l4*2": the count needs a separator, or "rtx4090" would read as "rt" × 4090.
_COUNT = re.compile(r"^(?P<name>.+?)(?:\s+[x×*]\s*|\s*[×*]\s*)(?P<count>\d+)$", re.IGNORECASE)


def lookup(name: str) -> GpuModel | None:
    key = name.strip().lower().replace(" ", "-").replace("_", "-")
    key = key.removeprefix("nvidia-").removeprefix("geforce-")
    key = _ALIASES.get(key, key)
    return GPU_TABLE.get(key) or GPU_TABLE.get(key.replace("-", ""))


def parse_gpu_spec(text: str) -> GpuSpec:
    """`l40s`, `"a100-80gb x2"` or `"mem=79.2GiB,cc=8.0,count=2"`."""
    text = text.strip()
    if "=" in text:
        return _custom(text)
    match = _COUNT.match(text)
    name = match.group("name") if match else text
    count = int(match.group("count")) if match and match.group("count") else 1
    model = lookup(name)
    if model is None:
        raise UsageError(f"--gpu: unknown GPU {name!r}; use one of {', '.join(sorted(GPU_TABLE))}, "
                         "add xN for several, or a custom \"mem=79.2GiB,cc=8.0,count=2\"")
    if count < 1:
        raise UsageError("--gpu: the count after x must be at least 1")
    return GpuSpec(model, count, "table")


def _custom(text: str) -> GpuSpec:
    fields: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep:
            raise UsageError(f"--gpu: expected key=value in {part!r}; write \"mem=79.2GiB,cc=8.0,count=2\"")
        fields[key.strip().lower()] = value.strip()
    unknown = set(fields) - {"mem", "cc", "count", "name"}
    if unknown or "mem" not in fields:
        raise UsageError("--gpu: a custom GPU needs mem= (and may give cc=, count=, name=), "
                         "e.g. \"mem=79.2GiB,cc=8.0,count=2\"")
    mem = re.match(r"^(\d+(?:\.\d+)?)\s*(GiB|GB|MiB|MB)?$", fields["mem"], re.IGNORECASE)
    if not mem:
        raise UsageError(f"--gpu: mem={fields['mem']!r} is not a size; write e.g. mem=79.2GiB")
    number, unit = float(mem.group(1)), (mem.group(2) or "GiB").lower()
    scale = {"gib": 1024.0, "gb": 1e9 / MIB, "mib": 1.0, "mb": 1e6 / MIB}[unit]
    cc_text = fields.get("cc", "8.0")
    cc = re.match(r"^(\d+)\.(\d+)$", cc_text)
    if not cc:
        raise UsageError(f"--gpu: cc={cc_text!r} is not a compute capability; write e.g. cc=8.9")
    count_text = fields.get("count", "1")
    if not count_text.isdigit() or int(count_text) < 1:
        raise UsageError(f"--gpu: count={count_text!r} must be a whole number ≥ 1")
    # A custom size is taken as what CUDA sees (the number vLLM logs), so no driver reserve applies.
    model = GpuModel(fields.get("name", "custom"), int(number * scale), (int(cc.group(1)), int(cc.group(2))), 1.0)
    return GpuSpec(model, int(count_text), "custom")
