"""The launcher's own state as Prometheus metrics (`launcher.metrics`), read from state.json's data.

One source of truth: every metric is derived from the state the daemon already writes, at scrape time
(`port`) or at every state change (`textfile`, written atomically for node_exporter's textfile collector).
The port is served bounded (launcher/run/httpbounded.py), as the container page is: a capped number of
handler threads, each connection given a deadline to send its request, so idle or half-open connections
cannot pile up threads against the unit's TasksMax, which vLLM shares.
vLLM's own `/metrics` stays vLLM's; these say what the supervisor did: phase, attempts, restarts and ladder
steps by failure class, the served rung's capacity.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import structlog
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest, write_to_textfile
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from launcher.config.profile import MetricsSettings
from launcher.run.httpbounded import BoundedHandler, BoundedServer
from launcher.runstate import Capacity, Phase, State
from launcher.vllm.phases import BUCKETS, PHASES

log = structlog.get_logger("vllm_launch")



class StateCollector(Collector):
    """Turns the latest state into metric families; the state is swapped whole under a lock."""

    def __init__(self, profile: str) -> None:
        self.profile = profile
        self._lock = threading.Lock()
        self._state = State.from_dict({})

    def observe(self, data: Mapping[str, Any]) -> None:
        state = State.from_dict(data)
        with self._lock:
            self._state = state

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            state = self._state
        labels = ["profile"]
        phase = GaugeMetricFamily("vllm_launch_phase", "1 for the supervisor's current phase", labels=[*labels, "phase"])
        for name in Phase:
            phase.add_metric([self.profile, str(name)], 1.0 if state.phase is name else 0.0)
        yield phase
        yield _gauge("vllm_launch_attempt", "start-up attempt number of this run", self.profile, state.attempt)
        for key, help_text in (("restarts", "engine restarts after READY, by failure class"),
                               ("ladder_steps", "ladder steps (a changed flag after a failed start), by failure class")):
            family = CounterMetricFamily(f"vllm_launch_{key}", help_text, labels=[*labels, "class"])
            for cls, count in sorted((state.counts.get(key) or {}).items()):
                family.add_metric([self.profile, cls], float(count))
            yield family
        capacity = state.capacity or Capacity()
        yield _gauge("vllm_launch_kv_tokens", "KV-cache tokens of the served rung (vLLM's log)", self.profile,
                     capacity.kv_tokens)
        yield _gauge("vllm_launch_kv_sessions", "full max-model-len sessions the KV cache holds", self.profile,
                     capacity.sessions)
        yield _gauge("vllm_launch_time_to_ready_seconds", "seconds from launch to READY of the last start",
                     self.profile, state.time_to_ready_s)
        agent = GaugeMetricFamily("vllm_launch_agent_probe", "1 for the agent probe's verdict before the last READY "
                                  "(pass, fail, inconclusive)", labels=[*labels, "verdict"])
        if state.agent_verdict is not None:
            for verdict in ("pass", "fail", "inconclusive"):
                agent.add_metric([self.profile, verdict], 1.0 if state.agent_verdict == verdict else 0.0)
        yield agent
        parser_errors = CounterMetricFamily("vllm_launch_tool_parser_errors", "tool-call parser errors vLLM logged "
                                            "since the served vLLM started", labels=labels)
        parser_errors.add_metric([self.profile], float(state.tool_parser_errors or 0))
        yield parser_errors
        phases = HistogramMetricFamily("vllm_launch_startup_phase_seconds", "seconds each start-up phase took, over "
                                       "every attempt (download, weights, compile, profiling, cuda_graphs, warmup, "
                                       "api_server)", labels=[*labels, "phase"])
        for phase_name, observed in sorted(state.phase_histogram.items()):
            if phase_name in PHASES and len(observed.buckets) == len(BUCKETS):
                bounds = [(f"{bound:g}", float(n)) for bound, n in zip(BUCKETS, observed.buckets, strict=True)]
                phases.add_metric([self.profile, phase_name], [*bounds, ("+Inf", float(observed.count))], observed.sum)
        yield phases
        failures = [d for d in state.decisions if d.cls != "last_known_good"]
        last = InfoMetricFamily("vllm_launch_last_failure", "the latest failure class", labels=labels)
        if failures:
            last.add_metric([self.profile], {"class": failures[-1].cls})
        yield last
        info = InfoMetricFamily("vllm_launch", "what is served", labels=labels)
        info.add_metric([self.profile], {"vllm_version": state.vllm_version or "unknown", "rung": ",".join(
            f"{k}={v}" for k, v in sorted(state.rung.items())) or "as written"})
        yield info


def _gauge(name: str, help_text: str, profile: str, value: Any) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, help_text, labels=["profile"])
    if isinstance(value, int | float) and not isinstance(value, bool):
        family.add_metric([profile], float(value))
    return family


class Exporter:
    """Started with the daemon when the profile asks for metrics; every failure to export is a warning,
    never a reason to stop serving."""

    def __init__(self, settings: MetricsSettings, profile: str) -> None:
        self.settings = settings
        self.collector = StateCollector(profile)
        self.registry = CollectorRegistry()
        self.registry.register(self.collector)
        self._server: BoundedServer | None = None
        self.error: str | None = None

    def start(self) -> None:
        if self.settings.port is not None:
            # Raises OSError when the port is taken: the caller reports it as a config error (exit 78).
            self._server = BoundedServer((self.settings.address, self.settings.port), _scrape_handler(self.render))
            self._server.serve_in_thread("metrics")

    def observe(self, data: Mapping[str, Any]) -> None:
        self.collector.observe(data)
        if self.settings.textfile is not None:
            try:
                write_to_textfile(str(self.settings.textfile), self.registry)
                self.error = None
            except OSError as exc:
                error = f"launcher.metrics.textfile {self.settings.textfile}: {exc.strerror or exc}"
                if error != self.error:  # once per distinct failure, not once per state change
                    log.warning("metrics.textfile_failed", error=error)
                self.error = error

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None


def _scrape_handler(render: Callable[[], bytes]) -> type[BoundedHandler]:
    class Scrape(BoundedHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            data = render()  # any path, as prometheus_client's own server answers
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE_LATEST)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Scrape
