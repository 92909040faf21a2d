"""Container mode (a RunPod-style pod, the launcher as PID 1): a pod that can never work stays up and says why.

A pod whose profile can never work must not crash-loop: each restart downloads the model again
and fails the same way. So a failure no restart can fix (exit 78: a bad profile, flag, parser or
model; no GPU) keeps the launcher up: state says `failed`, the reason is logged once a minute,
and the profile's port answers `/health` with 503 and `/` with a plain page giving the failure
and the fix, which the operator sees at the pod's public URL. A failure a later try may fix
(exit 75) shows the same page while it waits, then tries again with backoff. SIGTERM ends it
with exit 0.
"""

from __future__ import annotations

import html
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import structlog

from launcher.errors import EX_CONFIG, UsageError

log = structlog.get_logger("vllm_launch")

REPEAT_S = 60.0  # how often a pod that stays up repeats why
RETRY_S = (60.0, 900.0)  # the backoff between tries after a failure a later try may fix
WORKSPACE = Path("/workspace")


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
    exit_code: int

    @property
    def permanent(self) -> bool:
        return self.exit_code == EX_CONFIG

    def page(self) -> str:
        what = "can never work as configured" if self.permanent else "failed; the launcher will try again"
        return (f"vllm-launch: the server {what}.\n\n{self.message}\n\n"
                "Fix the profile (or the pod's VLLM_LAUNCH_PROFILE / VLLM_LAUNCH_SET), then restart the pod.\n")


class StatusPage:
    """The failure, served on the profile's port: /health 503, / the failure and the fix as plain text."""

    def __init__(self, host: str, port: int, failure: Failure) -> None:
        body = failure.page().encode()
        html_body = f"<html><body><pre>{html.escape(failure.page())}</pre></body></html>".encode()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
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

            def log_message(self, fmt: str, *args: object) -> None:
                pass  # the page is for people; its requests need no log

        self.server: ThreadingHTTPServer | None = None
        try:
            self.server = ThreadingHTTPServer((host, port), Handler)
        except OSError as exc:
            log.error("container.page_unavailable", port=port, error=str(exc))
            return
        threading.Thread(target=self.server.serve_forever, name="status-page", daemon=True).start()

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


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


def page_address(host: str | None, port: int | None) -> tuple[str, int]:
    return (host or "0.0.0.0", port or 8000)  # noqa: S104 - the address vLLM itself would have served


