"""The configurations `tune` measures: the grid, the default grid, expansion, pruning with `plan`, ordering.

Everything here is pure but `prune`, whose one outside call is the `plan_for` it is given: a candidate that
`plan` already knows cannot work is dropped, with its numbers, before any server starts.
"""

from __future__ import annotations

import difflib
import itertools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import yaml

from launcher.config.flags import FlagCatalog
from launcher.config.profile import FP8_KV_DTYPES, FlagValue, Profile
from launcher.errors import ConfigError, UsageError
from launcher.plan.problems import ERROR
from launcher.plan.report import PlanReport
from launcher.tune.vllm_defaults import chunked_prefill, effective

MAX_CANDIDATES = 64  # combinations of one --grid: each costs a server start and a search
DEFAULT_GRID_SIZE = 9  # the baseline's own combination and at most 8 others
MAX_NUM_SEQS_CAP = 1024  # vLLM 0.32's largest max-num-seqs default (H100 and up): doubling stops there
FP8_KV_MIN_CC = (8, 9)
SAME_CAPACITY = 0.9  # planned KV sessions within 10% of the best count as the same when ordering
# A value becomes one `--set vllm.FLAG=VALUE` word: a number or a plain word, never a space, a comma, quotes, YAML
# syntax or a leading '-' (vLLM's argparse would read it as an option of its own).
_VALUE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_FLAG = re.compile(r"[a-z0-9][a-z0-9._-]*")
_DECIMAL = re.compile(r"\d+\.\d*")
# A profile refuses these in vllm: (a secret on the command line, a second model or config file).
_NOT_TUNED = {"api-key": "the API key stays in api_key:", "model": "the model is the profile's model:",
              "config": "a config file would bypass the profile's checks"}


@dataclass(frozen=True, slots=True)
class Candidate:
    """One configuration: the profile as written plus these `vllm.<flag>` overrides (the baseline has none)."""

    overrides: tuple[tuple[str, str], ...] = ()  # (flag, value) pairs, flag without `vllm.`, sorted by flag

    @property
    def baseline(self) -> bool:
        return not self.overrides

    @property
    def label(self) -> str:
        return " ".join(f"{flag}={value}" for flag, value in self.overrides) or "baseline"

    def sets(self) -> tuple[str, ...]:
        return tuple(f"vllm.{flag}={value}" for flag, value in self.overrides)


def parse_grid(specs: Sequence[str], catalog: FlagCatalog) -> dict[str, tuple[str, ...]]:
    """`--grid FLAG=V1,V2,...` options as flag → values, checked against this vLLM's flag list."""
    grid: dict[str, tuple[str, ...]] = {}
    for spec in specs:
        flag, values = _parse_spec(spec, catalog)
        if flag in grid:
            raise _bad(spec, f"{flag} is given twice", f"put all its values in one --grid {flag}=A,B")
        grid[flag] = values
    combinations = math.prod(len(values) for values in grid.values())
    if combinations > MAX_CANDIDATES:
        sizes = " × ".join(f"{len(values)} {flag}" for flag, values in grid.items())
        raise UsageError(f"--grid: {sizes} make {combinations} combinations, more than {MAX_CANDIDATES}; "
                         "drop values or a --grid flag (each combination is one server start)")
    return grid


def _parse_spec(spec: str, catalog: FlagCatalog) -> tuple[str, tuple[str, ...]]:
    name, sep, text = spec.partition("=")
    if not sep or not name:
        raise _bad(spec, "expected FLAG=V1,V2,...", "write e.g. --grid max-num-seqs=64,128")
    if name.startswith("-"):
        raise _bad(spec, "the flag has leading dashes", f"write it without them: --grid {name.lstrip('-')}={text}")
    if not _FLAG.fullmatch(name):
        raise _bad(spec, "not a vllm serve flag name", "write the flag's long name, e.g. --grid max-num-seqs=64,128")
    flag_spec = catalog.lookup(name)
    if flag_spec is None:
        close = catalog.closest(name)
        hint = f"did you mean {close}?" if close else "see `vllm serve --help=all` for the flags"
        raise _bad(spec, f"vLLM {catalog.version} has no --{name} ({catalog.source} flag list)", hint)
    flag = flag_spec.name
    if name == f"no-{flag}":
        raise _bad(spec, f"--{name} is the off side of --{flag}", f"write --grid {flag}=true,false")
    if flag in _NOT_TUNED:
        raise _bad(spec, f"tune does not vary --{flag}", _NOT_TUNED[flag])
    values: list[str] = []
    for word in text.split(","):
        value = word
        if not value:
            raise _bad(spec, "an empty value", f"write the values with one comma between them, e.g. {flag}=64,128")
        if not _VALUE.fullmatch(value):
            raise _bad(spec, f"{_shown(value)} is not a plain value",
                       "write numbers or words (letters, digits, . _ -), without spaces or a leading '-'")
        misread = _misread(value) if flag_spec.takes_value else None
        if misread is not None:
            raise _bad(spec, f"{value!r} would reach vLLM as {misread}", "write the number or word itself, e.g. 2048")
        if not flag_spec.takes_value:
            if value.lower() not in ("true", "false"):
                raise _bad(spec, f"--{flag} is an on/off flag, got {value!r}", f"write --grid {flag}=true,false")
            value = value.lower()
        elif flag_spec.choices and value not in flag_spec.choices:
            near = difflib.get_close_matches(value, flag_spec.choices, n=1, cutoff=0.6)
            hint = f"did you mean {near[0]}? " if near else ""
            raise _bad(spec, f"{value!r} is not a valid --{flag} for vLLM {catalog.version}",
                       f"{hint}valid: {', '.join(flag_spec.choices)}")
        if value in values:
            raise _bad(spec, f"{value!r} is given twice", "list each value once")
        values.append(value)
    return flag, tuple(values)


def _misread(value: str) -> str | None:
    """What `--set` (YAML 1.1) would make of this word, where that is not the word: a boolean (yes, off: a
    value flag would lose its value), null (the flag removed), octal 010, hex 0x10, 1_000; None when it is."""
    typed = yaml.safe_load(value)
    if typed is None or isinstance(typed, bool):
        return "null (the flag removed)" if typed is None else f"the boolean {str(typed).lower()}"
    if isinstance(typed, int) and str(typed) != value:
        return f"the number {typed}"
    if isinstance(typed, float) and not _DECIMAL.fullmatch(value):
        return f"the number {typed}"
    return None


def _shown(text: str) -> str:
    """Hostile text stays on one line in the error: escapes instead of newlines or control characters."""
    return repr(text) if text.isprintable() else ascii(text)


def _bad(spec: str, problem: str, fix: str) -> UsageError:
    return UsageError(f"--grid {spec if spec.isprintable() else ascii(spec)}: {problem}; {fix}")


def default_grid(profile: Profile, plan_report: PlanReport, *, shared_prefix: bool = False) -> dict[str, tuple[str, ...]]:
    """A small grid around what this profile runs with on this GPU and vLLM: its own values where it sets the
    flags, else vLLM's defaults. Axes by expected effect, at most DEFAULT_GRID_SIZE combinations: max-num-seqs
    (half, centre, double), FP8 KV (twice the KV tokens, where the GPU has it), prefix caching (only for a
    workload that shares a prefix), max-num-batched-tokens (centre, 4x). When an axis does not fit, max-num-seqs
    first gives up its lower value (the search already lowers the number of users), then the axis is left out."""
    centre = effective(plan_report)
    seqs, batched = centre.max_num_seqs, centre.max_num_batched_tokens
    doubled = min(max(seqs, MAX_NUM_SEQS_CAP), 2 * seqs)  # a profile's own value above the cap stays the top
    axes: list[tuple[str, tuple[str, ...]]] = [("max-num-seqs", _distinct(max(1, seqs // 2), seqs, doubled))]
    gpu = plan_report.gpu
    if gpu is not None and gpu.model.cc >= FP8_KV_MIN_CC and profile.kv_cache_dtype == "auto":
        axes.append(("kv-cache-dtype", ("auto", "fp8")))
    if shared_prefix:
        on = centre.prefix_caching
        axes.append(("enable-prefix-caching", ("true", "false") if on else ("false", "true")))
    # The default and 4x: vLLM's serve default (2048 on most GPUs) favours inter-token latency, while agent turns
    # carry long prompts whose time to first token a larger prefill chunk cuts; a 2x step is within the noise
    # of the search, and half the default only slows prefill.
    axes.append(("max-num-batched-tokens", _distinct(batched, 4 * batched)))
    grid: dict[str, tuple[str, ...]] = {}
    for flag, values in axes:
        if _size(grid) * len(values) > DEFAULT_GRID_SIZE and len(grid.get("max-num-seqs", ())) == 3:
            grid["max-num-seqs"] = grid["max-num-seqs"][1:]
        if _size(grid) * len(values) <= DEFAULT_GRID_SIZE:
            grid[flag] = values
    return {flag: values for flag, values in grid.items() if len(values) > 1}


def _distinct(*numbers: int) -> tuple[str, ...]:
    return tuple(dict.fromkeys(str(n) for n in numbers))


def _size(grid: Mapping[str, tuple[str, ...]]) -> int:
    return math.prod(len(values) for values in grid.values())


def baseline_values(plan_report: PlanReport) -> dict[str, FlagValue]:
    """What the baseline runs with, for `expand` to recognise a candidate that only repeats it."""
    return {**effective(plan_report).as_flags(), **dict(plan_report.plan.flags)}


def expand(grid: Mapping[str, tuple[str, ...]], *,
           baseline: Mapping[str, FlagValue] | None = None) -> list[Candidate]:
    """The baseline, then every combination of the grid in the grid's own order of values. A combination
    that sets only what the baseline already runs with (`baseline`, see baseline_values) is the baseline."""
    flags = sorted(grid)
    found = [Candidate()]
    for combination in itertools.product(*(grid[flag] for flag in flags)):
        pairs = tuple(zip(flags, combination, strict=True))
        if not pairs:  # an empty grid's one combination sets nothing: it is the baseline
            continue
        if baseline is not None and all(flag in baseline and _same(value, baseline[flag]) for flag, value in pairs):
            continue
        found.append(Candidate(pairs))
    return found


def _same(text: str, value: FlagValue) -> bool:
    """A grid value against a typed profile value, as `--set` would type it: 0.90 is 0.9, true is True."""
    typed = yaml.safe_load(text)
    if isinstance(typed, bool) or isinstance(value, bool):
        return typed is value
    return bool(typed == value)


PlanFor = Callable[[tuple[str, ...]], PlanReport]


def prune(profile_path: str, candidates: Sequence[Candidate], *,
          plan_for: PlanFor) -> tuple[list[Candidate], list[tuple[Candidate, str]]]:
    """The candidates `plan` does not rule out, and those it does with a one-line reason. The baseline's own
    plan errors are raised as they are; a baseline the checks rule out is a ConfigError (nothing to tune).
    `plan_for` is called once per candidate: pass a cached one (functools.cache) and `order` reuses it."""
    kept: list[Candidate] = []
    pruned: list[tuple[Candidate, str]] = []
    for candidate in candidates:
        if candidate.baseline:
            reason = why_not(candidate, plan_for(()))
            if reason is not None:
                raise ConfigError(f"{profile_path}: the profile as written cannot work ({reason}); tuning it is "
                                  f"pointless: fix it first (`vllm-launch plan {profile_path}` shows the numbers)")
            kept.append(candidate)
            continue
        try:
            report = plan_for(candidate.sets())
        except (ConfigError, UsageError) as exc:
            pruned.append((candidate, " ".join(str(exc).split())))
            continue
        reason = why_not(candidate, report)
        if reason is None:
            kept.append(candidate)
        else:
            pruned.append((candidate, reason))
    return kept, pruned


def why_not(candidate: Candidate, report: PlanReport) -> str | None:
    """Why this candidate's plan cannot work, with its numbers; None when plan sees nothing against it."""
    dtype = dict(candidate.overrides).get("kv-cache-dtype")
    for problem in report.problems:
        # With drop_fp8_kv_if_unsupported the launcher would run it as auto: another candidate, not this one.
        if problem.code == "fp8_kv_unsupported" and dtype in FP8_KV_DTYPES:
            return problem.message
    errors = [p.message for p in report.problems if p.severity == ERROR]
    if errors:
        return errors[0]
    cap = report.capacity
    if cap is not None and (cap.verdict != "fits" or cap.kv_tokens < cap.max_model_len):
        return (f"the KV cache holds ~{cap.kv_tokens:,} tokens, below one full context of {cap.max_model_len:,} "
                f"(capacity: {cap.verdict})")
    batched = report.plan.flags.get("max-num-batched-tokens")
    context = cap.max_model_len if cap is not None else report.plan.max_model_len
    if (isinstance(batched, int) and context and batched < context
            and not chunked_prefill(report.plan.flags, report.version)):
        return (f"max-num-batched-tokens {batched:,} is below max-model-len {context:,} with chunked prefill off: "
                "vLLM refuses to start (a full-length prompt could never be scheduled)")
    return None


def order(candidates: Sequence[Candidate], reports: Mapping[Candidate, PlanReport]) -> list[Candidate]:
    """The baseline first, then the likeliest winners, so that a --budget that runs out has measured the best
    bets. Likeliest: more full sessions in the planned KV cache (more users fit before preemption), where
    counts within SAME_CAPACITY of each other are the same (the reserve of a larger batch moves them a few
    percent; an FP8 KV cache doubles them); then a higher max-num-seqs (more of those users run at once), then
    a larger max-num-batched-tokens (shorter prefill queues). Candidates without a report stay last, in order."""
    rest = [c for c in candidates if not c.baseline]
    known = [c for c in rest if c in reports]

    def sessions(candidate: Candidate) -> float:
        cap = reports[candidate].capacity
        return cap.sessions if cap is not None else 0.0

    def within(candidate: Candidate) -> tuple[int, int, str]:
        values = effective(reports[candidate])
        return -values.max_num_seqs, -values.max_num_batched_tokens, candidate.label

    ranked: list[Candidate] = []
    by_capacity = sorted(known, key=lambda c: (-sessions(c), c.label))
    while by_capacity:
        top = sessions(by_capacity[0])
        group = [c for c in by_capacity if sessions(c) >= top * SAME_CAPACITY]
        ranked += sorted(group, key=within)
        by_capacity = by_capacity[len(group):]
    return [c for c in candidates if c.baseline] + ranked + [c for c in rest if c not in reports]
