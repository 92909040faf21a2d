"""The `launcher:` section of a profile: device, logs, time limits, the ladder's bounds, requirements,
restart and health policies."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from launcher.config.keys import KeyReader
from launcher.config.profile import (
    DEFAULT_PORT,
    FlagValue,
    HealthPolicy,
    LadderBounds,
    LauncherSettings,
    MetricsSettings,
    Requirements,
    RestartPolicy,
    parse_max_model_len,
)
from launcher.config.settings import setting

# Every key is read through its entry in config/settings.py (type, default, bounds, fix); what stays here
# are the checks that relate a key to another one or to the vllm: flags.


def read_launcher(r: KeyReader, data: dict[str, Any], vllm: Mapping[str, FlagValue]) -> LauncherSettings:
    r.section(data, "")
    return LauncherSettings(
        device=r.setting(data, "device"), vllm_bin=r.setting(data, "vllm_bin"),
        log_file=_path(r.setting(data, "log_file")),
        log_max_bytes=r.setting(data, "log_max_size"), log_backups=r.setting(data, "log_backups"),
        startup_timeout_s=r.setting(data, "startup_timeout"),
        startup_stall_s=r.setting(data, "startup_stall"),
        stop_grace_s=r.setting(data, "stop_grace"), max_attempts=r.setting(data, "max_attempts"),
        confirm_window_s=r.setting(data, "confirm_window"),
        # YAML reads a bare `off` as false: that is what the operator wrote.
        agent_probe="off" if data.get("agent_probe") is False else r.setting(data, "agent_probe"),
        gpu_release_timeout_s=r.setting(data, "gpu_release_timeout"),
        ladder=_ladder(r, r.section(data, "ladder"), vllm),
        require=_require(r, r.section(data, "require")),
        restart=_restart(r, r.section(data, "restart")),
        health=_health(r, r.section(data, "health")),
        metrics=_metrics(r, data, vllm),
    )

def _ladder(r: KeyReader, data: dict[str, Any], vllm: Mapping[str, FlagValue]) -> LadderBounds:
    rungs_written = r.setting(data, "ladder.gpu_memory_utilization")
    start = vllm.get("gpu-memory-utilization")
    if rungs_written is None:
        rungs: tuple[float, ...] = (float(start),) if start is not None else ()  # type: ignore[arg-type]
    else:
        rungs = rungs_written
        if start is not None and float(start) not in rungs:  # type: ignore[arg-type]
            raise r.fail("vllm.gpu-memory-utilization",
                            f"{start} is not one of the ladder's rungs {list(rungs)}",
                            "make it the first rung, or drop it from vllm: (the first rung is used)")
    min_len = r.setting(data, "ladder.min_model_len")
    if min_len is not None:
        requested = parse_max_model_len(vllm.get("max-model-len"))
        if requested is not None and min_len > requested:
            raise r.fail("launcher.ladder.min_model_len",
                            f"{min_len} is above max-model-len {requested}",
                            "make min_model_len at most max-model-len")
    return LadderBounds(
        utilization_rungs=rungs,
        drop_fp8_kv_if_unsupported=r.setting(data, "ladder.drop_fp8_kv_if_unsupported"),
        min_model_len=min_len,
    )

def _require(r: KeyReader, data: dict[str, Any]) -> Requirements:
    return Requirements(
        min_sessions=r.setting(data, "require.min_sessions"),
        min_kv_tokens=r.setting(data, "require.min_kv_tokens"),
    )

def _restart(r: KeyReader, data: dict[str, Any]) -> RestartPolicy:
    low, high = r.setting(data, "restart.backoff")
    return RestartPolicy(
        max_restarts=r.setting(data, "restart.max"),
        window_s=r.setting(data, "restart.window"),
        backoff_min_s=low, backoff_max_s=high,
    )

def _health(r: KeyReader, data: dict[str, Any]) -> HealthPolicy:
    return HealthPolicy(
        interval_s=r.setting(data, "health.interval"),
        failures=r.setting(data, "health.failures"),
        timeout_s=r.setting(data, "health.timeout"),
        completion_probe=r.setting(data, "health.completion_probe"),
        completion_interval_s=r.setting(data, "health.completion_interval"),
        completion_timeout_s=r.setting(data, "health.completion_timeout"),
    )


def _metrics(r: KeyReader, launcher: dict[str, Any], vllm: Mapping[str, FlagValue]) -> MetricsSettings | None:
    if launcher.get("metrics") is None:
        return None
    data = r.section(launcher, "metrics")
    port = r.setting(data, "metrics.port")
    textfile = data.get("textfile")
    if (port is None) == (textfile is None):
        raise r.fail("launcher.metrics", "expected exactly one of port or textfile",
                     "write metrics: {port: 9400} (served on 127.0.0.1) or "
                     "metrics: {textfile: /var/lib/node_exporter/vllm.prom}")
    highest = setting("metrics.port").bounds[1]
    if port is not None and ((highest is not None and port > highest) or port == vllm.get("port", DEFAULT_PORT)):
        raise r.fail("launcher.metrics.port", f"{port} is not a free port of its own (vLLM serves on "
                     f"{vllm.get('port', DEFAULT_PORT)})", "pick another port, e.g. 9400")
    textfile = r.setting(data, "metrics.textfile")
    address = r.setting(data, "metrics.address")
    return MetricsSettings(port=port, address=address, textfile=_path(textfile))


def _path(written: str | None) -> Path | None:
    return Path(written) if written else None
