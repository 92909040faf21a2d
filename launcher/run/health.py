"""HTTP probes of a vLLM server: /health, /v1/models, a 1-token completion. No retries here.

The probes go straight to the server, never through a proxy: `http_proxy` is set for model
downloads, and a proxy would both break readiness and receive the API key. Each probe's timeout bounds
its whole exchange; `ca_file` is the profile's ssl-ca-certs for an https server (api.tls_context). Given
`verify` (launcher/run/listener.py), a probe first proves that the server end of its connection is our
own vLLM; a stranger on the port gets nothing, and the probe says who it is (`not_ours`).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from dataclasses import dataclass

from launcher.run.listener import NotOurServer
from launcher.vllm import api, prometheus

Verify = Callable[[socket.socket], None]


@dataclass(frozen=True, slots=True)
class Probe:
    ok: bool
    detail: str
    max_model_len: int | None = None  # what /v1/models reports (the effective context, e.g. after `auto`)
    not_ours: str | None = None  # who holds the port, when it is not our vLLM (nothing was sent)


PROBE_ERRORS = api.ERRORS  # what a probe treats as "nothing answered"


def get(url: str, timeout: float = 2.0, api_key: str | None = None, *, ca_file: str | None = None
        ) -> tuple[int, bytes]:
    """(status, body); raises OSError when nothing answers."""
    return api.request(url, timeout, api_key=api_key, ca_file=ca_file)


def _stranger(path: str, exc: NotOurServer) -> Probe:
    return Probe(False, f"{path}: {exc}", not_ours=exc.holder)


def check_health(base_url: str, timeout: float = 2.0, *, ca_file: str | None = None,
                 verify: Verify | None = None) -> Probe:
    try:
        status, _ = api.request(f"{base_url}/health", timeout, ca_file=ca_file, verify=verify)
    except NotOurServer as exc:
        return _stranger("/health", exc)
    except PROBE_ERRORS as exc:
        return Probe(False, f"/health: {exc}")
    return Probe(status == 200, f"/health {status}")


def check_models(base_url: str, served_name: str, api_key: str | None, timeout: float = 5.0, *,
                 ca_file: str | None = None, verify: Verify | None = None) -> Probe:
    """/v1/models must answer (with the key) and list the served name."""
    try:
        status, body = api.request(f"{base_url}/v1/models", timeout, api_key=api_key, ca_file=ca_file,
                                   verify=verify)
    except NotOurServer as exc:
        return _stranger("/v1/models", exc)
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


def check_completion(base_url: str, served_name: str, api_key: str | None, timeout: float = 30.0, *,
                     ca_file: str | None = None, verify: Verify | None = None) -> Probe:
    """A 1-token completion: the engine really generates."""
    body = {"model": served_name, "prompt": "ping", "max_tokens": 1, "temperature": 0}
    try:
        status, data = api.request(f"{base_url}/v1/completions", timeout, api_key=api_key, body=body,
                                   ca_file=ca_file, verify=verify)
    except NotOurServer as exc:
        return _stranger("/v1/completions", exc)
    except PROBE_ERRORS as exc:
        return Probe(False, f"/v1/completions: {exc}")
    if status != 200:
        return Probe(False, f"/v1/completions {status}: {data[:200]!r}")
    return Probe(True, "1-token completion answered")


def metrics(base_url: str, timeout: float = 2.0, *, ca_file: str | None = None) -> dict[str, float]:
    """The few Prometheus gauges `status` shows (KV usage, running and waiting requests)."""
    text = metrics_text(base_url, timeout, ca_file=ca_file)
    return {} if text is None else gauges(text)


def metrics_text(base_url: str, timeout: float = 2.0, *, ca_file: str | None = None) -> str | None:
    """vLLM's whole /metrics text; None when it does not answer 200 (all of it within `timeout`)."""
    try:
        status, body = api.request(f"{base_url}/metrics", timeout, ca_file=ca_file)
    except PROBE_ERRORS:
        return None
    return body.decode(errors="replace") if status == 200 else None


def gauges(text: str) -> dict[str, float]:
    """The gauges `status` shows (`live`), from a /metrics text."""
    wanted = {*prometheus.KV_USAGE, prometheus.RUNNING, prometheus.WAITING}
    found = prometheus.sums(text, wanted)
    return {name: value for name, value in found.items() if name in wanted}
