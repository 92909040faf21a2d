"""The `launcher:` section of a profile: device, logs, time limits, the ladder's bounds, requirements,
restart and health policies."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from launcher.config.keys import KeyReader
from launcher.config.profile import (
    FlagValue,
    HealthPolicy,
    LadderBounds,
    LauncherSettings,
    MetricsSettings,
    Requirements,
    RestartPolicy,
    parse_max_model_len,
)
from launcher.units import parse_duration, parse_size

LAUNCHER_KEYS = (
    "device", "vllm_bin", "log_file", "log_max_size", "log_backups", "startup_timeout",
    "startup_stall", "stop_grace", "gpu_release_timeout", "confirm_window", "max_attempts", "ladder", "require",
    "restart", "health", "metrics",
)
# A failure line waits at least this long for its confirmation (vLLM retries a Hub lookup after 2 s) and at
# most this long (a fatal error that hangs vLLM must still end the attempt).
CONFIRM_WINDOW_BOUNDS_S = (1.0, 120.0)
_LADDER_KEYS = ("gpu_memory_utilization", "drop_fp8_kv_if_unsupported", "min_model_len")
_REQUIRE_KEYS = ("min_sessions", "min_kv_tokens")
_RESTART_KEYS = ("max", "window", "backoff")
_HEALTH_KEYS = ("interval", "failures", "timeout", "completion_probe", "completion_interval", "completion_timeout")
_METRICS_KEYS = ("port", "address", "textfile")


def read_launcher(r: KeyReader, data: dict[str, Any], vllm: Mapping[str, FlagValue]) -> LauncherSettings:
    r.known_keys(data, LAUNCHER_KEYS, "launcher.")
    device = data.get("device", "gpu")
    if device not in ("gpu", "cpu"):
        raise r.fail("launcher.device", f"expected gpu or cpu, got {device!r}",
                        "write device: cpu for vLLM's CPU backend, else leave it out")
    vllm_bin = data.get("vllm_bin")
    if vllm_bin is not None and not isinstance(vllm_bin, str):
        raise r.fail("launcher.vllm_bin", "expected a path", "write vllm_bin: /opt/vllm/bin/vllm")
    log_file = data.get("log_file")
    if log_file is not None and not isinstance(log_file, str):
        raise r.fail("launcher.log_file", "expected a path", "write log_file: /var/log/vllm-launch/model.log")
    try:
        log_max_bytes = parse_size(data.get("log_max_size", "100MiB"))
    except ValueError as exc:
        raise r.fail("launcher.log_max_size", str(exc), "write e.g. log_max_size: 100MiB") from None
    log_backups = r.integer(data, "log_backups", "launcher.log_backups", 3) or 0
    startup_timeout = r.duration(data, "startup_timeout", "launcher.startup_timeout", "60m")
    startup_stall = r.duration(data, "startup_stall", "launcher.startup_stall", "10m")
    stop_grace = r.duration(data, "stop_grace", "launcher.stop_grace", "30s")
    max_attempts = r.integer(data, "max_attempts", "launcher.max_attempts", 6, minimum=1) or 1
    confirm_window = r.duration(data, "confirm_window", "launcher.confirm_window", "5s")
    low, high = CONFIRM_WINDOW_BOUNDS_S
    if not low <= confirm_window <= high:
        raise r.fail("launcher.confirm_window", f"{confirm_window:g}s is outside {low:g}s to {high:g}s",
                     "write e.g. confirm_window: 5s (how long a failure line waits for vLLM to confirm it)")
    return LauncherSettings(
        device=device, vllm_bin=vllm_bin, log_file=Path(log_file) if log_file else None,
        log_max_bytes=log_max_bytes, log_backups=log_backups, startup_timeout_s=startup_timeout,
        startup_stall_s=startup_stall, stop_grace_s=stop_grace, max_attempts=max_attempts,
        gpu_release_timeout_s=r.duration(data, "gpu_release_timeout", "launcher.gpu_release_timeout", "60s"),
        confirm_window_s=confirm_window,
        ladder=_ladder(r, r.mapping(data.get("ladder"), "launcher.ladder"), vllm),
        require=_require(r, r.mapping(data.get("require"), "launcher.require")),
        restart=_restart(r, r.mapping(data.get("restart"), "launcher.restart")),
        health=_health(r, r.mapping(data.get("health"), "launcher.health")),
        metrics=_metrics(r, data.get("metrics"), vllm),
    )

def _ladder(r: KeyReader, data: dict[str, Any], vllm: Mapping[str, FlagValue]) -> LadderBounds:
    r.known_keys(data, _LADDER_KEYS, "launcher.ladder.")
    key = "launcher.ladder.gpu_memory_utilization"
    rungs_raw = data.get("gpu_memory_utilization")
    start = vllm.get("gpu-memory-utilization")
    if rungs_raw is None:
        rungs: tuple[float, ...] = (float(start),) if start is not None else ()  # type: ignore[arg-type]
    else:
        if not isinstance(rungs_raw, list) or not rungs_raw:
            raise r.fail(key, "expected a list of utilizations, highest first", "write e.g. [0.92, 0.88]")
        for rung in rungs_raw:
            if isinstance(rung, bool) or not isinstance(rung, int | float) or not 0 < rung <= 1:
                raise r.fail(key, f"each rung must be a fraction in (0, 1], got {rung!r}",
                                "write e.g. [0.92, 0.88]")
        rungs = tuple(float(r) for r in rungs_raw)
        if list(rungs) != sorted(rungs, reverse=True) or len(set(rungs)) != len(rungs):
            raise r.fail(key, "rungs must be distinct and in descending order", "write e.g. [0.92, 0.88]")
        if start is not None and float(start) not in rungs:  # type: ignore[arg-type]
            raise r.fail("vllm.gpu-memory-utilization",
                            f"{start} is not one of the ladder's rungs {list(rungs)}",
                            "make it the first rung, or drop it from vllm: (the first rung is used)")
    min_len = data.get("min_model_len")
    if min_len is not None:
        try:
            min_len = parse_max_model_len(min_len)
        except ValueError as exc:
            raise r.fail("launcher.ladder.min_model_len", f"{exc}, got {min_len!r}",
                            "write e.g. min_model_len: 32768") from None
        requested = parse_max_model_len(vllm.get("max-model-len"))
        if requested is not None and min_len is not None and min_len > requested:
            raise r.fail("launcher.ladder.min_model_len",
                            f"{min_len} is above max-model-len {requested}",
                            "make min_model_len at most max-model-len")
    return LadderBounds(
        utilization_rungs=rungs,
        drop_fp8_kv_if_unsupported=r.boolean(data, "drop_fp8_kv_if_unsupported",
                                                "launcher.ladder.drop_fp8_kv_if_unsupported", True),
        min_model_len=min_len,
    )

def _require(r: KeyReader, data: dict[str, Any]) -> Requirements:
    r.known_keys(data, _REQUIRE_KEYS, "launcher.require.")
    sessions = data.get("min_sessions")
    if sessions is not None and (isinstance(sessions, bool) or not isinstance(sessions, int | float)
                                 or sessions <= 0):
        raise r.fail("launcher.require.min_sessions", f"expected a positive number, got {sessions!r}",
                        "write e.g. min_sessions: 2 (full max-model-len sessions that must fit)")
    return Requirements(
        min_sessions=float(sessions) if sessions is not None else None,
        min_kv_tokens=r.integer(data, "min_kv_tokens", "launcher.require.min_kv_tokens", None, minimum=1),
    )

def _restart(r: KeyReader, data: dict[str, Any]) -> RestartPolicy:
    r.known_keys(data, _RESTART_KEYS, "launcher.restart.")
    backoff = data.get("backoff", ["5s", "5m"])
    key = "launcher.restart.backoff"
    if not isinstance(backoff, list) or len(backoff) != 2:
        raise r.fail(key, "expected [first, longest] delays", "write e.g. backoff: [5s, 5m]")
    try:
        low, high = parse_duration(backoff[0]), parse_duration(backoff[1])
    except ValueError as exc:
        raise r.fail(key, str(exc), "write e.g. backoff: [5s, 5m]") from None
    if low > high:
        raise r.fail(key, "the first delay is longer than the longest", "write e.g. backoff: [5s, 5m]")
    return RestartPolicy(
        max_restarts=r.integer(data, "max", "launcher.restart.max", 5) or 0,
        window_s=r.duration(data, "window", "launcher.restart.window", "1h"),
        backoff_min_s=low, backoff_max_s=high,
    )

def _health(r: KeyReader, data: dict[str, Any]) -> HealthPolicy:
    r.known_keys(data, _HEALTH_KEYS, "launcher.health.")
    return HealthPolicy(
        interval_s=r.duration(data, "interval", "launcher.health.interval", "10s"),
        failures=r.integer(data, "failures", "launcher.health.failures", 3, minimum=1) or 1,
        timeout_s=r.duration(data, "timeout", "launcher.health.timeout", "5s"),
        completion_probe=r.boolean(data, "completion_probe", "launcher.health.completion_probe", False),
        completion_interval_s=r.duration(data, "completion_interval", "launcher.health.completion_interval", "5m"),
        completion_timeout_s=r.duration(data, "completion_timeout", "launcher.health.completion_timeout", "60s"),
    )


def _metrics(r: KeyReader, raw: Any, vllm: Mapping[str, FlagValue]) -> MetricsSettings | None:
    if raw is None:
        return None
    data = r.mapping(raw, "launcher.metrics")
    r.known_keys(data, _METRICS_KEYS, "launcher.metrics.")
    fix = "write metrics: {port: 9400} (served on 127.0.0.1) or metrics: {textfile: /var/lib/node_exporter/vllm.prom}"
    port = r.integer(data, "port", "launcher.metrics.port", None, minimum=1)
    textfile = data.get("textfile")
    if (port is None) == (textfile is None):
        raise r.fail("launcher.metrics", "expected exactly one of port or textfile", fix)
    if port is not None and (port > 65535 or port == vllm.get("port", 8000)):
        raise r.fail("launcher.metrics.port", f"{port} is not a free port of its own (vLLM serves on "
                     f"{vllm.get('port', 8000)})", "pick another port, e.g. 9400")
    if textfile is not None and (not isinstance(textfile, str) or not textfile.endswith(".prom")):
        raise r.fail("launcher.metrics.textfile", f"expected a path ending in .prom, got {textfile!r}",
                     "node_exporter reads only *.prom files: write e.g. textfile: /var/lib/node_exporter/vllm.prom")
    address = data.get("address", "127.0.0.1")
    if not isinstance(address, str) or not address:
        raise r.fail("launcher.metrics.address", f"expected an address, got {address!r}",
                     "write address: 127.0.0.1 (loopback, the default) or the address a scraper reaches")
    return MetricsSettings(port=port, address=address, textfile=Path(textfile) if textfile else None)
