"""Load and validate a YAML profile into a frozen, typed `Profile`.

Every bad input becomes one `ProfileError` line that names the file, the line,
the key and the fix (exit 78). `--set key=value` overrides are applied to the
raw document before validation, so they are checked exactly like the file.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

import yaml

from launcher.errors import ProfileError
from launcher.units import parse_duration, parse_size

FlagValue = bool | int | float | str | tuple[Any, ...] | Mapping[str, Any]

# Every value vLLM has accepted for --kv-cache-dtype, 0.6.6 → 0.33.0 (catalog §5).
KV_CACHE_DTYPES = frozenset({
    "auto", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "bfloat16", "float16", "fp8_ds_mla",
    "turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc",
    "int8_per_token_head", "fp8_per_token_head", "nvfp4", "int4_per_token_head", "nvfp4_4over6",
    "nvfp4_ds_mla", "octave_k3v4", "octave_k3v3", "octave_k3v3_compact", "ultraquant_4bit",
})
FP8_KV_DTYPES = frozenset({"fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla", "fp8_per_token_head"})

_TOP_KEYS = ("model", "vllm", "api_key", "hf_token", "allow_unauthenticated", "env", "launcher")
_LAUNCHER_KEYS = (
    "device", "vllm_bin", "log_file", "log_max_size", "log_backups", "startup_timeout",
    "startup_stall", "stop_grace", "max_attempts", "ladder", "require", "restart", "health",
)
_LADDER_KEYS = ("gpu_memory_utilization", "drop_fp8_kv_if_unsupported", "min_model_len")
_REQUIRE_KEYS = ("min_sessions", "min_kv_tokens")
_RESTART_KEYS = ("max", "window", "backoff")
_HEALTH_KEYS = ("interval", "failures", "timeout", "completion_probe")

# Environment names that hold secrets: they must come from api_key/hf_token, never as literals.
_SECRET_ENV = re.compile(r"(API_?KEY|TOKEN|SECRET|PASSWORD|PASSWD)$", re.IGNORECASE)
# Values that look like a credential whatever key they sit under (OpenAI-style, Hugging Face).
_SECRET_VALUE = re.compile(r"^(sk-[A-Za-z0-9_-]{16,}|hf_[A-Za-z0-9]{20,})$")
_LOOPBACK = re.compile(r"^(127\.\d+\.\d+\.\d+|localhost|::1|\[::1\])$")
_FLAG_ALIASES = {"device-memory-utilization": "gpu-memory-utilization", "tp": "tensor-parallel-size",
                 "pp": "pipeline-parallel-size", "dp": "data-parallel-size"}
_HUMAN_INT = re.compile(r"^(\d+(?:\.\d+)?)([kmgtKMGT]?)$")


@dataclass(frozen=True, slots=True)
class SecretRef:
    """Where a secret lives: an environment variable or a file (e.g. a systemd credential)."""

    kind: Literal["env", "file"]
    ref: str

    def describe(self) -> str:
        return f"{self.kind} {self.ref}"


@dataclass(frozen=True, slots=True)
class LadderBounds:
    """How far the failure ladder may move a profile away from what it says."""

    utilization_rungs: tuple[float, ...]  # descending; empty = the launcher never changes it
    drop_fp8_kv_if_unsupported: bool
    min_model_len: int | None  # None = never cut the context


@dataclass(frozen=True, slots=True)
class Requirements:
    """A capacity gate on readiness: below it, the attempt fails as kv_insufficient."""

    min_sessions: float | None
    min_kv_tokens: int | None


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    """Restarts of a dead engine after READY: at most `max_restarts` per `window_s`."""

    max_restarts: int
    window_s: float
    backoff_min_s: float
    backoff_max_s: float


@dataclass(frozen=True, slots=True)
class HealthPolicy:
    interval_s: float
    failures: int
    timeout_s: float
    completion_probe: bool


@dataclass(frozen=True, slots=True)
class LauncherSettings:
    device: Literal["gpu", "cpu"]
    vllm_bin: str | None
    log_file: Path | None
    log_max_bytes: int
    log_backups: int
    startup_timeout_s: float
    startup_stall_s: float
    stop_grace_s: float
    max_attempts: int
    ladder: LadderBounds
    require: Requirements
    restart: RestartPolicy
    health: HealthPolicy


class FlagViews:
    """Typed views of the vLLM flags the launcher reasons about, shared by Profile and Plan."""

    __slots__ = ()

    def _flags(self) -> Mapping[str, FlagValue]:
        raise NotImplementedError

    @property
    def utilization(self) -> float | None:
        value = self._flags().get("gpu-memory-utilization")
        return float(value) if isinstance(value, int | float) else None

    @property
    def kv_cache_dtype(self) -> str:
        return str(self._flags().get("kv-cache-dtype", "auto"))

    @property
    def max_model_len(self) -> int | None:
        """The requested context; None when unset or `auto` (vLLM then derives it)."""
        return parse_max_model_len(self._flags().get("max-model-len"))

    @property
    def tensor_parallel_size(self) -> int:
        value = self._flags().get("tensor-parallel-size", 1)
        return value if isinstance(value, int) else 1

    @property
    def pipeline_parallel_size(self) -> int:
        value = self._flags().get("pipeline-parallel-size", 1)
        return value if isinstance(value, int) else 1


@dataclass(frozen=True, slots=True)
class Profile(FlagViews):
    """One served model: the `vllm serve` flags as written plus the launcher's own settings."""

    source: str
    name: str
    model: str
    vllm: Mapping[str, FlagValue]  # kebab-case flag names, in the order written
    api_key: SecretRef | None
    hf_token: SecretRef | None
    allow_unauthenticated: bool
    env: Mapping[str, str]
    launcher: LauncherSettings
    digest: str  # sha256 of the validated content: keys last-known-good and state
    origins: Mapping[str, str]  # dotted key → "file:line" or "--set key=value"

    def error(self, key: str, problem: str, fix: str) -> ProfileError:
        """A ProfileError that points at where `key` was written (file:line or --set)."""
        origin = self.origins.get(key, "")
        if origin.startswith("--set"):
            return ProfileError("--set", key, problem, fix)
        source, _, line = origin.rpartition(":")
        if source and line.isdigit():
            return ProfileError(source, key, problem, fix, int(line))
        return ProfileError(self.source, key, problem, fix)

    def flag(self, name: str, default: Any = None) -> Any:
        return self.vllm.get(name, default)

    @property
    def host(self) -> str | None:
        value = self.vllm.get("host")
        return str(value) if value is not None else None

    @property
    def port(self) -> int:
        return int(self.vllm.get("port", 8000))  # type: ignore[arg-type]

    @property
    def served_model_name(self) -> str:
        value = self.vllm.get("served-model-name")
        if isinstance(value, tuple):
            return str(value[0])
        return str(value) if value is not None else self.model

    def _flags(self) -> Mapping[str, FlagValue]:
        return self.vllm

    @property
    def gpus_needed(self) -> int:
        dp = int(self.vllm.get("data-parallel-size", 1))  # type: ignore[arg-type]
        return self.tensor_parallel_size * self.pipeline_parallel_size * dp


def parse_max_model_len(value: object) -> int | None:
    """vLLM's human-readable ints: `64k` = 64000, `64K` = 65536; `auto`/-1 → None."""
    if value is None or value in ("auto", -1, "-1"):
        return None
    if isinstance(value, bool):
        raise ValueError("expected a token count such as 65536 or 64K")
    if isinstance(value, int):
        if value <= 0:
            raise ValueError("expected a positive token count")
        return value
    if isinstance(value, str):
        match = _HUMAN_INT.match(value.strip())
        if match:
            number, suffix = match.groups()
            if suffix in "kmgt" and suffix:
                return int(float(number) * int(1000 ** ("kmgt".index(suffix) + 1)))
            if suffix:
                if "." in number:
                    raise ValueError("binary suffixes (K, M, G) take whole numbers")
                return int(number) * int(1024 ** ("KMGT".index(suffix) + 1))
            return int(float(number))
    raise ValueError("expected a token count such as 65536, 64K (65,536) or 64k (64,000), or auto")


def is_loopback(host: str | None) -> bool:
    return host is not None and bool(_LOOPBACK.match(host))


# --------------------------------------------------------------------------- loading


def load(path: str | Path, sets: Sequence[str] = ()) -> Profile:
    """Read, override and validate a profile file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ProfileError(str(path), "", "no such profile", "check the path (profiles usually live in configs/ "
                           "or /etc/vllm-launch/)") from None
    except OSError as exc:
        raise ProfileError(str(path), "", f"cannot read the profile ({exc.strerror})",
                           "check the file's permissions") from None
    return loads(text, source=str(path), name=path.stem, sets=sets)


def loads(text: str, source: str = "<profile>", name: str = "profile", sets: Sequence[str] = ()) -> Profile:
    """Validate a profile given as YAML text."""
    raw, lines = _parse_yaml(text, source)
    origins = {key: f"{source}:{line}" for key, line in lines.items()}
    for assignment in sets:
        _apply_set(raw, assignment, origins)
    return _Validator(source, lines, origins).profile(raw, name)


def _parse_yaml(text: str, source: str) -> tuple[dict[str, Any], dict[str, int]]:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        raw = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        raise ProfileError(source, "", f"malformed YAML ({exc.problem})",
                           "fix the indentation or quoting on that line", line) from None
    except yaml.YAMLError as exc:
        raise ProfileError(source, "", f"malformed YAML ({exc})", "fix the YAML syntax") from None
    if raw is None:
        raise ProfileError(source, "model", "the profile is empty",
                           "write at least `model: <hub id or path>`", 1)
    if not isinstance(raw, dict) or node is None:
        raise ProfileError(source, "", "a profile must be a mapping of keys (model:, vllm:, launcher:)",
                           "start the file with `model: <hub id or path>`", 1)
    lines: dict[str, int] = {}
    _collect_lines(node, "", lines)
    return raw, lines


def _collect_lines(node: yaml.Node, prefix: str, lines: dict[str, int]) -> None:
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = f"{prefix}{key_node.value}"
            lines[key] = key_node.start_mark.line + 1
            _collect_lines(value_node, key + ".", lines)


def _apply_set(raw: dict[str, Any], assignment: str, origins: dict[str, str]) -> None:
    key, sep, text = assignment.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ProfileError("--set", assignment, "expected KEY=VALUE",
                           "write it as --set vllm.max-model-len=32768")
    try:
        value = yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError:
        value = text
    # `vllm.<flag>` and `env.<NAME>` keep the rest of the key whole: flag names may hold dots.
    head, _, rest = key.partition(".")
    path = [head, rest] if head in ("vllm", "env") and rest else key.split(".")
    if head == "vllm" and rest and isinstance(raw.get("vllm"), dict):
        # --set vllm.max-model-len replaces max_model_len as written in the file, whatever its spelling.
        wanted = rest.replace("_", "-")
        for existing in list(raw["vllm"]):
            if str(existing).replace("_", "-") == wanted:
                del raw["vllm"][existing]
    target = raw
    for part in path[:-1]:
        child = target.setdefault(part, {})
        if not isinstance(child, dict):
            raise ProfileError("--set", key, f"{part} is not a mapping", "set a key under a mapping section")
        target = child
    target[path[-1]] = value
    origins[key] = f"--set {assignment.split('=', 1)[0]}=…"


class _Validator:
    """Turns the raw document into a Profile, raising on the first bad key."""

    def __init__(self, source: str, lines: Mapping[str, int], origins: Mapping[str, str]) -> None:
        self.source = source
        self.lines = dict(lines)
        self.origins = dict(origins)

    def fail(self, key: str, problem: str, fix: str) -> ProfileError:
        origin = self.origins.get(key, "")
        if origin.startswith("--set"):
            return ProfileError("--set", key, problem, fix)
        line = self.lines.get(key)
        if line is None and "." in key:  # fall back to the enclosing section's line
            line = self.lines.get(key.rsplit(".", 1)[0])
        return ProfileError(self.source, key, problem, fix, line)

    # ---- helpers for typed values

    def mapping(self, value: Any, key: str) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(key, f"expected a mapping, got {_type_name(value)}",
                            f"write {key}: as indented `name: value` lines")
        return value

    def known_keys(self, data: Mapping[str, Any], allowed: Sequence[str], prefix: str) -> None:
        for key in data:
            if key not in allowed:
                close = _closest(str(key), allowed)
                hint = f"did you mean {close}?" if close else f"allowed keys are {', '.join(allowed)}"
                raise self.fail(f"{prefix}{key}", "unknown key", hint)

    def boolean(self, data: Mapping[str, Any], name: str, key: str, default: bool) -> bool:
        value = data.get(name, default)
        if not isinstance(value, bool):
            raise self.fail(key, f"expected true or false, got {value!r}", f"write {name}: true or {name}: false")
        return value

    def integer(self, data: Mapping[str, Any], name: str, key: str, default: int | None,
                minimum: int = 0) -> int | None:
        value = data.get(name, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.fail(key, f"expected a whole number ≥ {minimum}, got {value!r}", f"write e.g. {name}: {max(minimum, 1)}")
        return value

    def duration(self, data: Mapping[str, Any], name: str, key: str, default: str) -> float:
        try:
            return parse_duration(data.get(name, default))
        except ValueError as exc:
            raise self.fail(key, f"{exc}, got {data.get(name)!r}", f"write e.g. {name}: {default}") from None

    def secret(self, value: Any, key: str, env_hint: str) -> SecretRef | None:
        if value is None:
            return None
        fix = (f"write {key}: {{env: {env_hint}}} or {key}: {{file: /run/credentials/vllm-launch/{key}}}; "
               "the launcher hands it to vLLM through the environment, never on the command line")
        if isinstance(value, str):
            raise self.fail(key, "a secret is written in plain text", fix)
        if not isinstance(value, dict) or len(value) != 1:
            raise self.fail(key, "expected {env: NAME} or {file: PATH}", fix)
        (kind, ref), = value.items()
        if kind not in ("env", "file") or not isinstance(ref, str) or not ref:
            raise self.fail(key, "expected {env: NAME} or {file: PATH}", fix)
        return SecretRef(kind, ref)

    # ---- sections

    def profile(self, raw: dict[str, Any], name: str) -> Profile:
        self.known_keys(raw, _TOP_KEYS, "")
        self._refuse_plaintext_secrets(raw, "")
        model = raw.get("model")
        if model is None or model == "":
            raise self.fail("model", "missing model", "add `model: <Hugging Face id or local path>` at the top level")
        if not isinstance(model, str):
            raise self.fail("model", f"expected a model id or path, got {_type_name(model)}",
                            "write model: Org/Name or model: /path/to/model")
        api_key = self.secret(raw.get("api_key"), "api_key", "VLLM_API_KEY")
        hf_token = self.secret(raw.get("hf_token"), "hf_token", "HF_TOKEN")
        allow_unauth = self.boolean(raw, "allow_unauthenticated", "allow_unauthenticated", False)
        env = self._env(raw.get("env"))
        vllm = self._vllm(raw.get("vllm"))
        launcher = self._launcher(self.mapping(raw.get("launcher"), "launcher"), vllm)
        vllm = _with_start_utilization(vllm, launcher.ladder)

        host = vllm.get("host")
        if api_key is None and not allow_unauth and not is_loopback(None if host is None else str(host)):
            where = f"host {host}" if host is not None else "all interfaces (vLLM's default host)"
            raise self.fail("vllm.host" if host is not None else "api_key",
                            f"the server would listen on {where} without an API key",
                            "add api_key: {env: VLLM_API_KEY}, bind host: 127.0.0.1, "
                            "or say allow_unauthenticated: true")
        content = json.dumps({"model": model, "vllm": _jsonable(vllm), "env": dict(env),
                              "api_key": api_key and api_key.describe(),
                              "hf_token": hf_token and hf_token.describe(),
                              "launcher": _jsonable(raw.get("launcher") or {})},
                             sort_keys=True, default=str)
        return Profile(
            source=self.source, name=name, model=model, vllm=MappingProxyType(vllm),
            api_key=api_key, hf_token=hf_token, allow_unauthenticated=allow_unauth,
            env=MappingProxyType(env), launcher=launcher,
            digest=hashlib.sha256(content.encode()).hexdigest()[:16],
            origins=MappingProxyType(dict(self.origins)),
        )

    def _refuse_plaintext_secrets(self, data: Any, prefix: str) -> None:
        """An API key or token written anywhere in the profile would leak into logs and backups."""
        if isinstance(data, dict):
            for key, value in data.items():
                self._refuse_plaintext_secrets(value, f"{prefix}{key}.")
        elif isinstance(data, list):
            for item in data:
                self._refuse_plaintext_secrets(item, prefix)
        elif isinstance(data, str) and _SECRET_VALUE.match(data.strip()):
            key = prefix.rstrip(".")
            raise self.fail(key, "this looks like an API key or token written in plain text",
                            "move it to an environment variable or a file and write "
                            "api_key: {env: VLLM_API_KEY} (or hf_token: {env: HF_TOKEN})")

    def _env(self, value: Any) -> dict[str, str]:
        env: dict[str, str] = {}
        for name, item in self.mapping(value, "env").items():
            key = f"env.{name}"
            if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise self.fail(key, "not a valid environment variable name", "use letters, digits and _")
            if _SECRET_ENV.search(name):
                raise self.fail(key, "a secret is written in plain text in env:",
                                "remove it and use api_key: {env: VLLM_API_KEY} or hf_token: {env: HF_TOKEN}; "
                                "the launcher passes them to vLLM itself")
            if isinstance(item, dict | list) or item is None:
                raise self.fail(key, f"expected a string or number, got {_type_name(item)}", f"write {name}: \"value\"")
            env[name] = str(item).lower() if isinstance(item, bool) else str(item)
        return env

    def _vllm(self, value: Any) -> dict[str, FlagValue]:
        flags: dict[str, FlagValue] = {}
        for raw_name, item in self.mapping(value, "vllm").items():
            key = f"vllm.{raw_name}"
            name = str(raw_name).strip().lstrip("-").replace("_", "-")
            name = _FLAG_ALIASES.get(name, name)
            # Later messages (unknown flag, bad choice) name the flag by its kebab spelling.
            if key in self.origins:
                self.origins[f"vllm.{name}"] = self.origins[key]
            if key in self.lines:
                self.lines[f"vllm.{name}"] = self.lines[key]
            if name in flags:
                raise self.fail(key, f"{name} is given twice (kebab and snake case)", "keep one spelling")
            if name == "model":
                raise self.fail(key, "the model is not a vllm: flag", "move it to the top level: model: <id or path>")
            if name == "api-key":
                raise self.fail(key, "an API key in vllm: would be passed on the command line "
                                "(world-readable in /proc)", "use api_key: {env: VLLM_API_KEY} at the top level")
            if name == "config":
                raise self.fail(key, "a second config file would bypass the profile's checks",
                                "copy its flags into vllm:")
            if item is None:
                continue  # `flag: null` means "leave vLLM's default"
            flags[name] = self._flag_value(name, item, key)
        return flags

    def _flag_value(self, name: str, item: Any, key: str) -> FlagValue:
        if name in ("gpu-memory-utilization", "device-memory-utilization"):
            if isinstance(item, bool) or not isinstance(item, int | float) or not 0 < item <= 1:
                raise self.fail(key, f"must be a fraction in (0, 1], got {item!r}",
                                "write e.g. gpu-memory-utilization: 0.90 (a fraction of the GPU's total memory)")
            return float(item)
        if name == "kv-cache-dtype":
            if item not in KV_CACHE_DTYPES:
                close = _closest(str(item), sorted(KV_CACHE_DTYPES))
                raise self.fail(key, f"unknown kv-cache-dtype {item!r}",
                                f"use auto, fp8 or another vLLM KV dtype{f' (did you mean {close}?)' if close else ''}")
            return str(item)
        if name == "max-model-len":
            try:
                parse_max_model_len(item)
            except ValueError as exc:
                raise self.fail(key, f"{exc}, got {item!r}", "write e.g. max-model-len: 65536") from None
            return item if isinstance(item, int) else str(item)
        if name in ("tensor-parallel-size", "pipeline-parallel-size", "data-parallel-size", "max-num-seqs",
                    "block-size"):
            if isinstance(item, bool) or not isinstance(item, int) or item < 1:
                raise self.fail(key, f"expected a whole number ≥ 1, got {item!r}", f"write e.g. {name}: 1")
            return item
        if name == "port":
            if isinstance(item, bool) or not isinstance(item, int) or not 0 < item < 65536:
                raise self.fail(key, f"expected a TCP port (1-65535), got {item!r}", "write e.g. port: 8000")
            return item
        if name in ("host", "served-model-name", "tool-call-parser") and isinstance(item, dict | bool):
            raise self.fail(key, f"expected text, got {_type_name(item)}", f"write {name}: <text>")
        if isinstance(item, list):
            if any(isinstance(x, dict | list) for x in item):
                raise self.fail(key, "lists may hold only plain values", f"write {name}: [a, b]")
            return tuple(item)
        if isinstance(item, dict):
            return MappingProxyType(dict(item))
        if isinstance(item, bool | int | float | str):
            return item
        raise self.fail(key, f"unsupported value {item!r}", "use a string, number, true/false, list or mapping")

    def _launcher(self, data: dict[str, Any], vllm: Mapping[str, FlagValue]) -> LauncherSettings:
        self.known_keys(data, _LAUNCHER_KEYS, "launcher.")
        device = data.get("device", "gpu")
        if device not in ("gpu", "cpu"):
            raise self.fail("launcher.device", f"expected gpu or cpu, got {device!r}",
                            "write device: cpu for vLLM's CPU backend, else leave it out")
        vllm_bin = data.get("vllm_bin")
        if vllm_bin is not None and not isinstance(vllm_bin, str):
            raise self.fail("launcher.vllm_bin", "expected a path", "write vllm_bin: /opt/vllm/bin/vllm")
        log_file = data.get("log_file")
        if log_file is not None and not isinstance(log_file, str):
            raise self.fail("launcher.log_file", "expected a path", "write log_file: /var/log/vllm-launch/model.log")
        try:
            log_max_bytes = parse_size(data.get("log_max_size", "100MiB"))
        except ValueError as exc:
            raise self.fail("launcher.log_max_size", str(exc), "write e.g. log_max_size: 100MiB") from None
        log_backups = self.integer(data, "log_backups", "launcher.log_backups", 3) or 0
        startup_timeout = self.duration(data, "startup_timeout", "launcher.startup_timeout", "60m")
        startup_stall = self.duration(data, "startup_stall", "launcher.startup_stall", "10m")
        stop_grace = self.duration(data, "stop_grace", "launcher.stop_grace", "30s")
        max_attempts = self.integer(data, "max_attempts", "launcher.max_attempts", 6, minimum=1) or 1
        return LauncherSettings(
            device=device, vllm_bin=vllm_bin, log_file=Path(log_file) if log_file else None,
            log_max_bytes=log_max_bytes, log_backups=log_backups, startup_timeout_s=startup_timeout,
            startup_stall_s=startup_stall, stop_grace_s=stop_grace, max_attempts=max_attempts,
            ladder=self._ladder(self.mapping(data.get("ladder"), "launcher.ladder"), vllm),
            require=self._require(self.mapping(data.get("require"), "launcher.require")),
            restart=self._restart(self.mapping(data.get("restart"), "launcher.restart")),
            health=self._health(self.mapping(data.get("health"), "launcher.health")),
        )

    def _ladder(self, data: dict[str, Any], vllm: Mapping[str, FlagValue]) -> LadderBounds:
        self.known_keys(data, _LADDER_KEYS, "launcher.ladder.")
        key = "launcher.ladder.gpu_memory_utilization"
        rungs_raw = data.get("gpu_memory_utilization")
        start = vllm.get("gpu-memory-utilization")
        if rungs_raw is None:
            rungs: tuple[float, ...] = (float(start),) if start is not None else ()  # type: ignore[arg-type]
        else:
            if not isinstance(rungs_raw, list) or not rungs_raw:
                raise self.fail(key, "expected a list of utilizations, highest first", "write e.g. [0.92, 0.88]")
            for rung in rungs_raw:
                if isinstance(rung, bool) or not isinstance(rung, int | float) or not 0 < rung <= 1:
                    raise self.fail(key, f"each rung must be a fraction in (0, 1], got {rung!r}",
                                    "write e.g. [0.92, 0.88]")
            rungs = tuple(float(r) for r in rungs_raw)
            if list(rungs) != sorted(rungs, reverse=True) or len(set(rungs)) != len(rungs):
                raise self.fail(key, "rungs must be distinct and in descending order", "write e.g. [0.92, 0.88]")
            if start is not None and float(start) not in rungs:  # type: ignore[arg-type]
                raise self.fail("vllm.gpu-memory-utilization",
                                f"{start} is not one of the ladder's rungs {list(rungs)}",
                                "make it the first rung, or drop it from vllm: (the first rung is used)")
        min_len = data.get("min_model_len")
        if min_len is not None:
            try:
                min_len = parse_max_model_len(min_len)
            except ValueError as exc:
                raise self.fail("launcher.ladder.min_model_len", f"{exc}, got {min_len!r}",
                                "write e.g. min_model_len: 32768") from None
            requested = parse_max_model_len(vllm.get("max-model-len"))
            if requested is not None and min_len is not None and min_len > requested:
                raise self.fail("launcher.ladder.min_model_len",
                                f"{min_len} is above max-model-len {requested}",
                                "make min_model_len at most max-model-len")
        return LadderBounds(
            utilization_rungs=rungs,
            drop_fp8_kv_if_unsupported=self.boolean(data, "drop_fp8_kv_if_unsupported",
                                                    "launcher.ladder.drop_fp8_kv_if_unsupported", True),
            min_model_len=min_len,
        )

    def _require(self, data: dict[str, Any]) -> Requirements:
        self.known_keys(data, _REQUIRE_KEYS, "launcher.require.")
        sessions = data.get("min_sessions")
        if sessions is not None and (isinstance(sessions, bool) or not isinstance(sessions, int | float)
                                     or sessions <= 0):
            raise self.fail("launcher.require.min_sessions", f"expected a positive number, got {sessions!r}",
                            "write e.g. min_sessions: 2 (full max-model-len sessions that must fit)")
        return Requirements(
            min_sessions=float(sessions) if sessions is not None else None,
            min_kv_tokens=self.integer(data, "min_kv_tokens", "launcher.require.min_kv_tokens", None, minimum=1),
        )

    def _restart(self, data: dict[str, Any]) -> RestartPolicy:
        self.known_keys(data, _RESTART_KEYS, "launcher.restart.")
        backoff = data.get("backoff", ["5s", "5m"])
        key = "launcher.restart.backoff"
        if not isinstance(backoff, list) or len(backoff) != 2:
            raise self.fail(key, "expected [first, longest] delays", "write e.g. backoff: [5s, 5m]")
        try:
            low, high = parse_duration(backoff[0]), parse_duration(backoff[1])
        except ValueError as exc:
            raise self.fail(key, str(exc), "write e.g. backoff: [5s, 5m]") from None
        if low > high:
            raise self.fail(key, "the first delay is longer than the longest", "write e.g. backoff: [5s, 5m]")
        return RestartPolicy(
            max_restarts=self.integer(data, "max", "launcher.restart.max", 5) or 0,
            window_s=self.duration(data, "window", "launcher.restart.window", "1h"),
            backoff_min_s=low, backoff_max_s=high,
        )

    def _health(self, data: dict[str, Any]) -> HealthPolicy:
        self.known_keys(data, _HEALTH_KEYS, "launcher.health.")
        return HealthPolicy(
            interval_s=self.duration(data, "interval", "launcher.health.interval", "10s"),
            failures=self.integer(data, "failures", "launcher.health.failures", 3, minimum=1) or 1,
            timeout_s=self.duration(data, "timeout", "launcher.health.timeout", "5s"),
            completion_probe=self.boolean(data, "completion_probe", "launcher.health.completion_probe", False),
        )


def _with_start_utilization(vllm: dict[str, FlagValue], ladder: LadderBounds) -> dict[str, FlagValue]:
    """With ladder rungs but no utilization flag, the first rung is the starting value."""
    if ladder.utilization_rungs and "gpu-memory-utilization" not in vllm:
        return {**vllm, "gpu-memory-utilization": ladder.utilization_rungs[0]}
    return vllm


def _closest(word: str, options: Sequence[str]) -> str | None:
    import difflib

    match = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return match[0] if match else None


def _type_name(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "text", bool: "true/false", int: "a number",
            float: "a number", type(None): "nothing"}.get(type(value), type(value).__name__)


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value
