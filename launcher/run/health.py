"""HTTP probes of a vLLM server: /health, /v1/models, a 1-token completion. No retries here.

The probes go straight to the server, never through a proxy: `http_proxy` is set for model
downloads, and a proxy would both break readiness and receive the API key.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from launcher.vllm import prometheus


@dataclass(frozen=True, slots=True)
class Probe:
    ok: bool
    detail: str
    max_model_len: int | None = None  # what /v1/models reports (the effective context, e.g. after `auto`)


# An opener with no proxy handler from the environment (urllib's default reads http_proxy/https_proxy).
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
# What a probe treats as "nothing answered": sockets, bad URLs, and broken HTTP (not OSError subclasses).
# A probe reads at most this much of an answer: a server that streams without end cannot fill our memory.
MAX_BODY_BYTES = 16 * 1024 * 1024
PROBE_ERRORS = (OSError, ValueError, http.client.HTTPException)


def _request(url: str, timeout: float, api_key: str | None = None, body: dict[str, Any] | None = None
             ) -> tuple[int, bytes]:
    headers = {"Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(url, data=data, headers=headers)  # noqa: S310 - http(s) URLs we built
    try:
        with _DIRECT.open(request, timeout=timeout) as response:
            return int(response.status), response.read(MAX_BODY_BYTES)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(MAX_BODY_BYTES) if exc.fp else b""


def get(url: str, timeout: float = 2.0, api_key: str | None = None) -> tuple[int, bytes]:
    """(status, body); raises OSError when nothing answers."""
    return _request(url, timeout, api_key)


def check_health(base_url: str, timeout: float = 2.0) -> Probe:
    try:
        status, _ = _request(f"{base_url}/health", timeout)
    except PROBE_ERRORS as exc:
        return Probe(False, f"/health: {exc}")
    return Probe(status == 200, f"/health {status}")


def check_models(base_url: str, served_name: str, api_key: str | None, timeout: float = 5.0) -> Probe:
    """/v1/models must answer (with the key) and list the served name."""
    try:
        status, body = _request(f"{base_url}/v1/models", timeout, api_key)
    except PROBE_ERRORS as exc:
        return Probe(False, f"/v1/models: {exc}")
    if status != 200:
        return Probe(False, f"/v1/models {status}")
    try:
        models = {m.get("id"): m for m in json.loads(body).get("data", [])}
    except (ValueError, AttributeError):
        return Probe(False, "/v1/models: not JSON")
    if served_name not in models:
        return Probe(False, f"/v1/models lists {sorted(map(str, models))}, not {served_name!r}")
    length = models[served_name].get("max_model_len")
    return Probe(True, "/v1/models lists the served name", length if isinstance(length, int) else None)


def check_completion(base_url: str, served_name: str, api_key: str | None, timeout: float = 30.0) -> Probe:
    """A 1-token completion: the engine really generates."""
    body = {"model": served_name, "prompt": "ping", "max_tokens": 1, "temperature": 0}
    try:
        status, data = _request(f"{base_url}/v1/completions", timeout, api_key, body)
    except PROBE_ERRORS as exc:
        return Probe(False, f"/v1/completions: {exc}")
    if status != 200:
        return Probe(False, f"/v1/completions {status}: {data[:200]!r}")
    return Probe(True, "1-token completion answered")


def metrics(base_url: str, timeout: float = 2.0) -> dict[str, float]:
    """The few Prometheus gauges `status` shows (KV usage, running and waiting requests)."""
    wanted = {*prometheus.KV_USAGE, prometheus.RUNNING, prometheus.WAITING}
    try:
        status, body = _request(f"{base_url}/metrics", timeout)
    except PROBE_ERRORS:
        return {}
    if status != 200:
        return {}
    found = prometheus.sums(body.decode(errors="replace"), wanted)
    return {name: value for name, value in found.items() if name in wanted}
