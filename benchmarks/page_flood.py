"""The container failure page under a flood of half-sent requests: /health latency during the flood against
the latency without one, measured in the same run.

The page runs in its own process (as in a pod); one client opens `--connections` connections on loopback,
each sending a request line and one header but never the blank line that ends the request, holding at
most `--hold` open at a time (the oldest is closed beyond that). While it floods, /health is asked over
and over, one after the other (`--probes` times without the flood, for the baseline). Everything is
bounded: the flood stops after its connections (or MAX_FLOOD_S), the probes with it, and the page process
is stopped at the end. Goal: every /health answered during
the flood, p95 ≤ 1 s; the page's threads at most its cap plus a few (it prints their peak and the
page process's peak RSS).

    .venv/bin/python benchmarks/page_flood.py [--connections 5000] [--hold 1000] [--probes 50]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from launcher.run import container  # noqa: E402
from tests.integration.harness import free_port, poll_for  # noqa: E402

FAILURES: list[str] = []  # why a /health went unanswered
MAX_FLOOD_S = 300.0  # the flood stops here even if its connections are not all made

PAGE = """\
import logging, signal, threading
import structlog
from launcher.run import container
structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.INFO))
page = container.StatusPage("127.0.0.1", {port}, container.Failure("the benchmark's failure", 78))
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
stop.wait(600)  # bounded even if nobody stops it
page.close()
"""


def health_s(port: int) -> float | None:
    """Seconds to a /health answer (None: none within 10 s)."""
    start = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/health")
        conn.getresponse().read()
        return time.perf_counter() - start
    except OSError as exc:
        FAILURES.append(f"{type(exc).__name__}: {exc}")
        return None
    finally:
        conn.close()


def probe(port: int, count: int, gap_s: float = 0.05) -> list[float | None]:
    out: list[float | None] = []
    for _ in range(count):
        out.append(health_s(port))
        time.sleep(gap_s)
    return out


def flood(port: int, connections: int, hold: int, done: threading.Event) -> int:
    """Half-sent requests, `hold` at a time; the count that connected."""
    held: deque[socket.socket] = deque()
    opened = 0
    try:
        for _ in range(connections):
            if done.is_set():
                break
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=5)
                sock.sendall(b"GET / HTTP/1.1\r\nHost: flood\r\n")
            except OSError:
                continue
            opened += 1
            held.append(sock)
            if len(held) > hold:
                held.popleft().close()
    finally:
        while held:
            held.popleft().close()
    return opened


def threads_of(pid: int) -> int:
    try:
        return sum(1 for _ in Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return -1


def rss_mb(pid: int) -> float:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return -1.0
    kib = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), -1)
    return round(kib / 1024, 1)


def summary(latencies: list[float | None]) -> dict[str, float | int | None]:
    answered = sorted(x for x in latencies if x is not None)
    p95 = answered[min(len(answered) - 1, round(0.95 * (len(answered) - 1)))] if answered else None
    return {"probes": len(latencies), "answered": len(answered),
            "p50_ms": round(statistics.median(answered) * 1000, 2) if answered else None,
            "p95_ms": round(p95 * 1000, 2) if p95 is not None else None,
            "max_ms": round(answered[-1] * 1000, 2) if answered else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--connections", type=int, default=5000)
    parser.add_argument("--hold", type=int, default=1000)
    parser.add_argument("--probes", type=int, default=50)
    args = parser.parse_args()
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    page = subprocess.Popen([sys.executable, "-c", PAGE.format(port=port)], env=env)
    try:
        poll_for(lambda: health_s(port) is not None, 30, "the page")
        FAILURES.clear()  # refusals while the page was starting
        quiet = probe(port, args.probes)
        done = threading.Event()
        flooded: list[int] = []
        peak, rss_peak = 0, 0.0
        flooder = threading.Thread(target=lambda: flooded.append(flood(port, args.connections, args.hold, done)))
        flooder.start()
        time.sleep(0.5)  # the flood is under way before the first probe
        during: list[float | None] = []
        give_up = time.monotonic() + MAX_FLOOD_S
        while flooder.is_alive() and time.monotonic() < give_up:  # probes for as long as the flood lasts
            during.extend(probe(port, 1))
            peak = max(peak, threads_of(page.pid))
            rss_peak = max(rss_peak, rss_mb(page.pid))
        done.set()
        flooder.join()
        quiet_s, flood_s = summary(quiet), summary(during)
        after_s = health_s(port)
    finally:
        page.terminate()
        page.wait(timeout=30)
    def ratio(key: str) -> float | None:
        during_ms, quiet_ms = flood_s[key], quiet_s[key]
        return round(during_ms / quiet_ms, 2) if during_ms is not None and quiet_ms else None

    print(json.dumps({"connections_opened": flooded[0] if flooded else 0, "hold": args.hold,
                      "page_threads_peak": peak, "page_rss_peak_mb": rss_peak,
                      "health_without_flood": quiet_s, "health_during_flood": flood_s,
                      "p50_ratio_flood_over_quiet": ratio("p50_ms"), "p95_ratio_flood_over_quiet": ratio("p95_ms"),
                      "health_after_flood_ms": None if after_s is None else round(after_s * 1000, 2),
                      "unanswered_because": sorted(set(FAILURES))}, indent=2))
    threads_cap = getattr(container, "MAX_CONNECTIONS", 0) + 8  # the handlers, serve_forever, the main thread
    ok = (flood_s["answered"] == flood_s["probes"] and flood_s["p95_ms"] is not None and flood_s["p95_ms"] <= 1000
          and after_s is not None and 0 < peak <= threads_cap)
    print(f"goal (every /health answered during the flood, p95 <= 1 s, page threads <= {threads_cap}):",
          "met" if ok else "NOT met")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
