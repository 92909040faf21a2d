"""Profiles for tests, built as YAML text and read by the real loader (`launcher.config.load`), so a test's
profile goes through the same parsing, line numbers and validation as an operator's.

`profile_yaml` writes one; `write_profile` puts one (or given text or bytes) in a file; `load_profile` reads
one into a `Profile`. The named profiles below are the ones several modules share: the fake vLLM's tiny
model for the integration tier, the two-node profile, the Qwen3-Coder guide profile, an alias bomb.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from launcher.config.load import loads
from launcher.config.profile import Profile

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"

# A section: data (a mapping, written by YAML's dumper; a None value leaves the key out) or YAML source lines
# already indented under the section, kept as written (YAML's own readings of `yes` or `[a, b]`, line numbers).
Section = Mapping[str, Any] | str | None


def _block(entries: Mapping[str, Any], indent: str) -> str:
    kept = {key: value for key, value in entries.items() if value is not None}
    if not kept:
        return ""
    text = yaml.safe_dump(kept, sort_keys=False, default_flow_style=False, allow_unicode=True, width=math.inf)
    return "".join(indent + line for line in text.splitlines(keepends=True))


def _section(name: str, section: Section, first: Mapping[str, Any] | None = None) -> str:
    entries = {**(first or {}), **(section if isinstance(section, Mapping) else {})}
    raw = section if isinstance(section, str) else ""
    return f"{name}:\n" + _block(entries, "  ") + raw


def yaml_lines(entries: Mapping[str, object]) -> str:
    """`entries` as YAML source lines for a section, each value written as given: `yes`, `[a, b]` and
    `{level: 0}` are YAML's to read, as they would be in an operator's file."""
    return "".join(f"  {key}: {value}\n" for key, value in entries.items())


def profile_yaml(model: str = "/m", vllm: Section = None, *, launcher: Section = None, **top: Any) -> str:
    """A profile's YAML: `model`, then `vllm` (host 127.0.0.1 first, on loopback as a test's server should be;
    `host=None` in a mapping leaves it out), then `launcher` if given, then any other top-level keys as data.

    With text for `vllm`, its lines follow `host` from line 4 on, so errors name the line a test expects."""
    text = _block({"model": model}, "") + _section("vllm", vllm, {"host": "127.0.0.1"})
    if launcher is not None:
        text += _section("launcher", launcher)
    return text + _block(top, "")


def write_profile(directory: Path, text: str | bytes | None = None, *, name: str = "p", **profile: Any) -> Path:
    """`directory/NAME.yaml` holding `text` (bytes as they are), or else `profile_yaml(**profile)`."""
    path = directory / f"{name}.yaml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(profile_yaml(**profile) if text is None else text)
    return path


def load_profile(text: str | None = None, *, source: str = "p.yaml", name: str = "p",
                 sets: Mapping[str, Any] | Iterable[str] = (), **profile: Any) -> Profile:
    """`text` (or else `profile_yaml(**profile)`) read by the real loader as if from `source` (so errors name
    p.yaml and a line); `sets` as `--set` takes them, or as a mapping of key to value."""
    assignments = [f"{k}={v}" for k, v in sets.items()] if isinstance(sets, Mapping) else list(sets)
    return loads(profile_yaml(**profile) if text is None else text, source=source, name=name, sets=assignments)


def shipped(name: str) -> str:
    """The text of a profile shipped in configs/."""
    return (CONFIGS / f"{name}.yaml").read_text()


# The integration tier's profile: the fake vLLM (tests/fakes/vllm) serving its tiny model on the CPU path. The
# harness gives the daemon KEY as VLLM_API_KEY; the profile reads it from there.
KEY = "test-secret-key-0123456789"


def tiny_profile(port: int, *, extra_vllm: str = "", launcher: str = "", ladder: str = "") -> str:
    """The fake vLLM's tiny model on `port`; `extra_vllm`, `launcher` and `ladder` are YAML lines added to
    those sections, indented as they are to be."""
    return f"""\
model: /models/tiny
vllm:
  host: 127.0.0.1
  port: {port}
  served-model-name: tiny
  max-model-len: 2048
{extra_vllm}api_key: {{env: VLLM_API_KEY}}
launcher:
  device: cpu
  log_file: vllm.log
  stop_grace: 5s
  startup_stall: 60s
{launcher}  ladder:
    min_model_len: 1024
{ladder}"""


def tiny_gpu_profile(port: int, *, vllm: str = "", launcher: str = "", ladder: str = "") -> str:
    """`tiny_profile` on the GPU path: no `device: cpu`, so preflight, the ladder and restarts read the GPU."""
    return tiny_profile(port, extra_vllm=vllm, launcher=launcher, ladder=ladder).replace("  device: cpu\n", "")


TWO_NODES = """\
model: meta-llama/Llama-3.1-70B-Instruct
vllm: {host: 0.0.0.0, port: 8000, tensor-parallel-size: 4, pipeline-parallel-size: 2,
       served-model-name: llama, enable-auto-tool-choice: true, tool-call-parser: llama3_json}
api_key: {env: VLLM_API_KEY}
nodes: {count: 2, master_addr: 10.0.0.1, master_port: 29600}
"""

GUIDE_MODEL = "Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8"


def guide_profile(flags: dict[str, Any] | None = None, ladder: dict[str, Any] | None = None, **top: Any) -> Profile:
    """The Qwen3-Coder L40S guide profile on loopback; `flags`/`ladder` change it, a None value removes a flag;
    `model`, `launcher` and other top-level keys as data."""
    vllm = {"max-model-len": 65536, "gpu-memory-utilization": 0.92, "kv-cache-dtype": "fp8", **(flags or {})}
    launcher = {"ladder": {"gpu_memory_utilization": [0.92, 0.88], **(ladder or {})}, **top.pop("launcher", {})}
    return load_profile(model=top.pop("model", GUIDE_MODEL), vllm=vllm, launcher=launcher, **top)


def bomb(levels: int, width: int = 9) -> str:
    """A profile with an alias bomb: anchors under nodes:, each level `width` aliases of the one before:
    width**levels values, a few hundred bytes."""
    lines = ["model: Org/Model", "vllm: {host: 127.0.0.1}", "nodes:", f"  l0: &l0 [{', '.join(['x'] * width)}]"]
    lines += [f"  l{n}: &l{n} [{', '.join([f'*l{n - 1}'] * width)}]" for n in range(1, levels)]
    return "\n".join(lines) + "\n"
