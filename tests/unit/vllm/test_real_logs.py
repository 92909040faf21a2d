"""The diagnosis on real logs people posted: every class, reason, number and root cause right, and no success misread.

The corpus (tests/data/logs/real/, see INDEX.md there) is evidence, not fixtures written for the
classifier: its expectations were read from each log and its thread.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter

import pytest

from tests.conftest import ROOT
from tests.corpus import REAL, corpus, mismatches
from tests.corpus_score import score

LOGS = corpus()
CLASS_REASONS = {
    "startup_memory": {"free_below_utilization", "weights", "profiling", "cuda_graphs", "sampler_warmup", "memory_changed"},
    "config": {"unknown_flag", "tool_parser", "reasoning_parser", "max_model_len_above_model", "model_not_found",
               "gated_repo", "port_in_use", "not_enough_gpus", "bad_argument", "unsupported_model"},
}


KNOWN_MISSES = [log for log in LOGS if log.miss]
CASES = [pytest.param(log, id=log.file, marks=[pytest.mark.xfail(strict=True, reason=log.miss)] if log.miss else [])
         for log in LOGS]


@pytest.mark.parametrize("log", CASES)
def test_each_real_log_is_diagnosed_right(log: object) -> None:
    """A log marked `miss:` in the index is an expected failure; a fix makes it XPASS, which fails until the marker goes."""
    assert [] == mismatches(log)  # type: ignore[arg-type]


def test_accuracy_is_total_and_no_success_is_read_as_a_failure() -> None:
    result = score([log for log in LOGS if not log.miss])
    assert [] == result.false_failures, "a working start-up read as a failure would be killed"
    assert sum(result.total.values()) == sum(result.right.values()), result.table()


class TestCorpus:
    def test_size_and_spread(self) -> None:
        sources = {log.source for log in LOGS}
        minors = {m.group(1) for log in LOGS if (m := re.match(r"(\d+\.\d+)", str(log.expected.get("vllm_version"))))}
        assert len(LOGS) >= 60
        assert len(sources) >= 30
        assert len(minors) >= 10, sorted(minors)
        assert sum(log.expected["class"] == "ok" for log in LOGS) >= 20
        assert {"V0", "V1"} <= {log.expected.get("engine") for log in LOGS}

    def test_every_class_and_reason_has_real_evidence(self) -> None:
        classes = Counter(log.expected["class"] for log in LOGS)
        for cls in ("startup_memory", "fp8_unsupported", "kv_insufficient", "no_cache_blocks", "engine_dead", "config"):
            assert classes[cls] >= 3, cls
        for cls, reasons in CLASS_REASONS.items():
            seen = {log.expected.get("reason") for log in LOGS if log.expected["class"] == cls}
            assert reasons <= seen, sorted(reasons - seen)

    def test_every_file_is_indexed_and_names_its_source(self) -> None:
        files = {path.name for path in REAL.glob("*.log")}
        assert files == {log.file for log in LOGS}
        for log in LOGS:
            first = log.path.read_text(encoding="utf-8", errors="replace").split("\n", 1)[0]
            assert f"# source: {log.source}" == first, log.file
            assert log.source.startswith("https://"), log.file

    def test_known_misses_say_why_and_are_few(self) -> None:
        for log in KNOWN_MISSES:
            assert "\n" not in str(log.miss) and len(str(log.miss)) >= 10, log.file
        # About one log in 25: each batch is scored before anything is fitted to it, and what no general rule reads
        # stays visible here rather than fitted with the log's own string.
        assert len(KNOWN_MISSES) <= len(LOGS) // 25, "fix the classifier rather than marking more misses"

    def test_index_md_is_current(self) -> None:
        done = subprocess.run([sys.executable, "scripts/corpus_index.py", "--check"], cwd=ROOT, capture_output=True,
                              text=True, check=False)
        assert 0 == done.returncode, done.stderr


def test_the_signature_docs_are_current() -> None:
    """docs/vllm-logs.md is generated from the signature table and the real logs."""
    done = subprocess.run([sys.executable, "scripts/signature_docs.py", "--check"], cwd=ROOT, capture_output=True,
                          text=True, check=False)
    assert 0 == done.returncode, done.stderr
