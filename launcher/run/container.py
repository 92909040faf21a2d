"""Container mode (a RunPod-style pod, the launcher as PID 1): a pod that can never work stays up and says why.

A pod whose profile can never work must not crash-loop: each restart downloads the model again
and fails the same way. So a failure no restart can fix (exit 78: a bad profile, flag, parser or
model; no GPU) keeps the launcher up: state says `failed`, the reason is logged once a minute,
and the profile's port answers `/health` with 503 and `/` with a plain page giving the failure
and the fix, which the operator sees at the pod's public URL. A failure a later try may fix
(exit 75) shows the same page while it waits, then tries again with backoff. SIGTERM ends it
with exit 0.

The page's address: `VLLM_LAUNCH_HOST` / `VLLM_LAUNCH_PORT` from the pod's environment when set, else the
profile's host and port when the profile loaded, else 0.0.0.0:8000 (vLLM's default port, the one the
image publishes); the log says which. The page is on a public URL, so it is served bounded
(launcher/run/httpbounded.py): at most `MAX_CONNECTIONS` connections at once, each with `READ_TIMEOUT_S`
to send its request, so a flood of half-sent requests cannot keep `/health` from answering.
"""

from __future__ import annotations

import html
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import structlog

from launcher.config.profile import DEFAULT_PORT
from launcher.errors import EXIT_CODES, LauncherError, Outcome, UsageError
from launcher.run.httpbounded import MAX_CONNECTIONS, READ_TIMEOUT_S, BoundedHandler, BoundedServer
from launcher.run.retry import Backoff

log = structlog.get_logger("vllm_launch")

REPEAT_S = 60.0  # how often a pod that stays up repeats why
RETRY = Backoff(60.0, 900.0)  # between tries after a failure a later try may fix
WORKSPACE = Path("/workspace")
DEFAULT_ADDRESS = ("0.0.0.0", DEFAULT_PORT)  # noqa: S104 - the address vLLM itself would have served


def enabled(environ: Mapping[str, str], flag: bool) -> bool:
    """--container, a RunPod pod, or the launcher as a container's PID 1."""
    return flag or bool(environ.get("RUNPOD_POD_ID")) or os.getpid() == 1


def arguments(profile: str | None, sets: tuple[str, ...], environ: Mapping[str, str]) -> tuple[str, tuple[str, ...]]:
    """The profile (the argument, else VLLM_LAUNCH_PROFILE) and the overrides (VLLM_LAUNCH_SET, `;`-separated,
    before the command line's --set, which win)."""
    path = profile or environ.get("VLLM_LAUNCH_PROFILE")
    if not path:
        raise UsageError("up needs a PROFILE: pass one, or set VLLM_LAUNCH_PROFILE in the pod's environment")
    from_env = tuple(item.strip() for item in environ.get("VLLM_LAUNCH_SET", "").split(";") if item.strip())
    return path, from_env + sets


def cache_environment(environ: Mapping[str, str], workspace: Path = WORKSPACE) -> dict[str, str]:
    """Caches on the pod's persistent volume when it has one, unless already set: a restart must not
    download the model again."""
    if not workspace.is_dir():
        return {}
    wanted = {"HF_HOME": workspace / ".cache" / "huggingface", "VLLM_CACHE_ROOT": workspace / ".cache" / "vllm",
              "XDG_CACHE_HOME": workspace / ".cache"}
    return {name: str(path) for name, path in wanted.items() if not environ.get(name)}


@dataclass(frozen=True, slots=True)
class Failure:
    message: str
    outcome: Outcome

    @classmethod
    def of(cls, exc: Exception) -> Failure:
        """The launcher's own errors say what they mean; anything else is a bug, on one line, tried again."""
        if isinstance(exc, LauncherError):
            return cls(str(exc), exc.outcome)
        return cls(f"{type(exc).__name__}: {' '.join(str(exc).split())}", Outcome.FAILED)

    @property
    def permanent(self) -> bool:
        return self.outcome is Outcome.CONFIG

    @property
    def exit_code(self) -> int:
        """The code the launcher would exit with, for the log line (the pod's launcher does not exit)."""
        return EXIT_CODES[self.outcome]

    def page(self) -> str:
        what = "can never work as configured" if self.permanent else "failed; the launcher will try again"
        return (f"vllm-launch: the server {what}.\n\n{self.message}\n\n"
                "Fix the profile (or the pod's VLLM_LAUNCH_PROFILE / VLLM_LAUNCH_SET), then restart the pod.\n")


class StatusPage:
    """The failure, served on the page's address: /health 503, / the failure and the fix as plain text."""

    def __init__(self, host: str, port: int, failure: Failure, *, limit: int = MAX_CONNECTIONS,
                 timeout_s: float = READ_TIMEOUT_S) -> None:
        body = failure.page().encode()
        html_body = f"<html><body><pre>{html.escape(failure.page())}</pre></body></html>".encode()

        class Handler(BoundedHandler):
            timeout = timeout_s  # each read and write on the connection

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.path.startswith("/health"):
                    self.send_response(503)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                plain = "text/html" not in (self.headers.get("Accept") or "")
                data = body if plain else html_body
                self.send_response(503)
                self.send_header("Content-Type", "text/plain; charset=utf-8" if plain else "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server: BoundedServer | None = None
        try:
            self.server = BoundedServer((host, port), Handler, limit=limit, timeout_s=timeout_s)
        except OSError as exc:
            log.error("container.page_unavailable", host=host, port=port, error=str(exc))
            return
        self.server.serve_in_thread("status-page")

    def close(self) -> None:
        if self.server is not None:
            self.server.close()


def stay_up(failure: Failure, stop: threading.Event, host: str, port: int, wait_s: float | None) -> bool:
    """Serve the page and repeat the reason until stopped (True) or `wait_s` passes (False: try again)."""
    page = StatusPage(host, port, failure)
    waited = 0.0
    try:
        while True:
            log.error("container.failed", exit_code=failure.exit_code, error=failure.message, port=port,
                      next_try_s=None if wait_s is None else round(wait_s - waited))
            step = REPEAT_S if wait_s is None else min(REPEAT_S, wait_s - waited)
            if stop.wait(step):
                return True
            waited += step
            if wait_s is not None and waited >= wait_s:
                return False
    finally:
        page.close()


def page_address(host: str | None, port: int | None, environ: Mapping[str, str]) -> tuple[str, int]:
    """The page's host and port: the pod's VLLM_LAUNCH_HOST / VLLM_LAUNCH_PORT, else the profile's (None when
    it did not load), else vLLM's default; the log says where each came from. A port that is not one is
    logged and skipped: the pod must still show its page."""
    raw_port = environ.get("VLLM_LAUNCH_PORT", "").strip()
    env_port: int | None = None
    if raw_port.isdigit() and 0 < int(raw_port) < 65536:
        env_port = int(raw_port)
    elif raw_port:
        log.warning("container.bad_page_port", variable="VLLM_LAUNCH_PORT", value=raw_port[:40],
                    fix="set VLLM_LAUNCH_PORT to a port number from 1 to 65535")
    env_host = environ.get("VLLM_LAUNCH_HOST", "").strip()
    chosen_host, host_from = ((env_host, "VLLM_LAUNCH_HOST") if env_host else (host, "profile") if host
                              else (DEFAULT_ADDRESS[0], "default"))
    chosen_port, port_from = ((env_port, "VLLM_LAUNCH_PORT") if env_port else (port, "profile") if port
                              else (DEFAULT_ADDRESS[1], "default"))
    log.info("container.page_address", host=chosen_host, port=chosen_port, host_from=host_from, port_from=port_from)
    return chosen_host, chosen_port
