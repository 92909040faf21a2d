"""The classifier against vLLM's own start-up failure messages (launcher/data/vllm-source-messages.yaml).

Each message of the three newest minors is rendered as vLLM logs it, its `{placeholders}` filled
with sample values, and diagnosed: the class (and config reason) must be the one the catalogue
gives it from the message's meaning. A message no signature knows (a generic ValueError with no phrase of its
own) is read through the catalogue itself at run time (launcher/vllm/raise_sites.py).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from launcher.vllm.classify import classify, classify_every_signature
from launcher.vllm.diagnose import diagnose_lines
from launcher.vllm.signatures import CONFIG, OK, UNKNOWN

ROOT = Path(__file__).resolve().parents[3]
CATALOGUE = yaml.safe_load((ROOT / "launcher" / "data" / "vllm-source-messages.yaml").read_text(encoding="utf-8"))
PREFIX = "(EngineCore_DP0 pid=123) "
STAMP = "11-29 15:41:39"
CLASSES = {"ok", "startup_memory", "fp8_unsupported", "kv_insufficient", "no_cache_blocks", "engine_dead", "config",
           "unknown", "compile_cache", "distributed_init"}
REASONS = {"tool_parser", "reasoning_parser", "unknown_flag", "bad_argument", "max_model_len_above_model",
           "model_not_found", "gated_repo", "unsupported_model", "port_in_use", "not_enough_gpus",
           "missing_dependency", "heads_not_divisible", "dtype_unsupported", "batch_below_context"}


def _vkey(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version))


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


NEWEST = sorted({_minor(v) for v in CATALOGUE["versions"]}, key=_vkey)[-3:]
ROWS = [row for row in CATALOGUE["messages"] if any(_minor(v) in NEWEST for v in row["where"])]

# Placeholder names that stand for a number; the rest stand for a name.
_FLOAT = re.compile(r"gib|gb\b|_gb|memory|utilization|ratio|capability|version_str|fraction")
_INT = re.compile(r"len|size|num|count|tokens|blocks|rank|world|heads|port|steps|slots|threshold|bits|max|min|"
                  r"_id$|idx|index|interval|level|^i$|^n_|seqs|batched|limit|concurrency|threads|layers|prefills|"
                  r"offload|mins|numel|timeout|^bs$")


def sample(name: str) -> str:
    if name in ("device_str", "device_name"):
        return "GPU"
    if name == "device_":
        return "cuda:0"
    if _FLOAT.search(name.lower()):
        return "0.9" if "util" in name.lower() or "fraction" in name.lower() else "7.5" if "capab" in name else "12.5"
    if _INT.search(name.lower()):
        return "4096"
    return f"sample_{name}"[:40]


def fill(template: str) -> str:
    return re.sub(r"\{([^{}]*)\}", lambda m: sample(m.group(1)), template)


def render(row: dict[str, Any]) -> list[str]:
    """The lines vLLM prints for the message: the exception line of a traceback, or a logger record."""
    text = fill(row["message"]).split("\n")
    kind = row["kinds"][0]
    if kind.startswith("raise "):
        exc = kind.removeprefix("raise ")
        if exc == "ArgumentTypeError":  # argparse reports a type's error as a usage error
            return [f"vllm serve: error: argument --sample-flag: {' '.join(text)}"]
        if exc == "KeyError":  # str(KeyError) is the repr of its argument
            return [f"{PREFIX}ERROR {STAMP} [core.py:700] KeyError: {' '.join(text)!r}"]
        # As vLLM's engine logs it: the traceback's header, the raising frame (its file from `where`), the exception.
        where, line = row["where"][max(row["where"], key=_vkey)].rsplit(":", 1)
        head = f"{PREFIX}ERROR {STAMP} [core.py:700] "
        first = f"{head}{exc}: {text[0]}"
        return [f"{head}Traceback (most recent call last):",
                f'{head}  File "/usr/local/lib/python3.12/dist-packages/{where}", line {line}, in sample_function',
                first, *(f"{head}{line}" for line in text[1:])]
    if kind == "sys.exit":
        return text
    level = "CRITICAL" if kind == "logger.critical" else "ERROR"
    where = row["where"][max(row["where"], key=_vkey)].rsplit("/", 1)[-1]
    return [f"{level} {STAMP} [{where}] {line}" for line in text]


def _id(row: dict[str, Any]) -> str:
    return row["message"][:60]


def test_the_catalogue_covers_three_newest_minors_with_reviewed_rows() -> None:
    assert len(NEWEST) == 3
    assert len(ROWS) > 100
    for row in CATALOGUE["messages"]:
        assert row["class"] in CLASSES, row["message"]
        assert (row.get("reason") in REASONS) if row["class"] == CONFIG else row.get("reason") is None, row["message"]
        if row["class"] == UNKNOWN:
            assert row.get("note"), f"an unknown row says why: {row['message']}"


@pytest.mark.parametrize("row", [r for r in ROWS if r["class"] != UNKNOWN], ids=_id)
def test_a_message_reads_as_its_class(row: dict[str, Any]) -> None:
    lines = render(row)
    diagnosis = diagnose_lines(lines)
    assert (row["class"], row.get("reason") if row["class"] == CONFIG else None) == (
        diagnosis.cls, diagnosis.reason if diagnosis.cls == CONFIG else None), lines


def test_no_message_is_left_undecided() -> None:
    """Every message of the catalogue has a class decided by hand (unknown with its why), and the launcher reads
    each as that class: none is left for want of a signature."""
    assert all(row.get("class") for row in CATALOGUE["messages"])
    assert not [row["message"] for row in CATALOGUE["messages"] if "known_gap" in row]


@pytest.mark.parametrize("row", [r for r in ROWS if r["class"] == UNKNOWN], ids=_id)
def test_an_unknown_message_is_no_specific_failure(row: dict[str, Any]) -> None:
    lines = render(row)
    assert diagnose_lines(lines).cls in (UNKNOWN, OK), lines


def test_the_gates_change_nothing_on_the_rendered_messages() -> None:
    lines = [line for row in ROWS for line in render(row)]
    differ = [line[:200] for line in lines if classify(line) != classify_every_signature(line)]
    assert not differ, differ[:5]


def test_the_table_is_current() -> None:
    done = subprocess.run([sys.executable, "scripts/vllm-source-messages", "render", "--check"], cwd=ROOT,
                          capture_output=True, text=True, check=False)
    assert 0 == done.returncode, done.stderr
