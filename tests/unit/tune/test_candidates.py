"""Candidates: --grid parsing (hostile values included), the default grid per GPU, expansion, pruning with real
plan reports, and the order in which they are measured."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from launcher.config.flags import FlagCatalog, shipped_catalog
from launcher.config.load import load
from launcher.errors import ConfigError, ProfileError, UsageError
from launcher.gpu.catalog import parse_gpu_spec
from launcher.gpu.match import inventory_from_spec
from launcher.plan.report import PlanReport, PlanRequest, run_plan
from launcher.tune.candidates import (
    MAX_CANDIDATES,
    Candidate,
    PlanFor,
    baseline_values,
    default_grid,
    expand,
    order,
    parse_grid,
    prune,
)
from launcher.tune.vllm_defaults import BatchDefaults, batch_defaults, effective
from tests.conftest import CONFIGS, DATA
from tests.helpers.profiles import write_profile

INVENTORIES = DATA / "inventories"
QWEN3 = str(CONFIGS / "qwen3.yaml")
LLAMA_TP2 = str(CONFIGS / "llama3-8b-tp2.yaml")
LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"


@pytest.fixture
def catalog() -> FlagCatalog:
    return shipped_catalog()


@pytest.fixture(autouse=True)
def _offline(no_installed_vllm: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Plans from the shipped flag list and no start-up records of this box."""
    monkeypatch.setenv("VLLM_LAUNCH_STATE_DIR", str(tmp_path / "state"))


def plan(profile: str, gpu: str | None = None, inventory: str | None = None, sets: tuple[str, ...] = ()) -> PlanReport:
    return run_plan(PlanRequest(profile, sets=sets, gpu=gpu,
                                gpu_inventory=str(INVENTORIES / inventory) if inventory else None))


def planner(profile: str, gpu: str | None = None, inventory: str | None = None) -> PlanFor:
    """What the tune command passes as plan_for: one plan per candidate, remembered."""
    @functools.cache
    def plan_for(sets: tuple[str, ...]) -> PlanReport:
        return plan(profile, gpu, inventory, sets)
    return plan_for


# --- the candidate type ---------------------------------------------------------------------------------------

def test_a_candidate_is_its_overrides() -> None:
    candidate = Candidate((("max-num-batched-tokens", "8192"), ("max-num-seqs", "64")))
    assert not candidate.baseline
    assert "max-num-batched-tokens=8192 max-num-seqs=64" == candidate.label
    assert ("vllm.max-num-batched-tokens=8192", "vllm.max-num-seqs=64") == candidate.sets()
    assert Candidate().baseline and "baseline" == Candidate().label and () == Candidate().sets()


# --- --grid ----------------------------------------------------------------------------------------------------

def test_a_grid_is_flags_and_their_values(catalog: FlagCatalog) -> None:
    grid = parse_grid(["max-num-seqs=32,64,128", "max-num-batched-tokens=2048,8192", "enable-prefix-caching=True,false",
                       "kv-cache-dtype=fp8,auto", "device-memory-utilization=0.88,0.92"], catalog)
    assert {"max-num-seqs": ("32", "64", "128"), "max-num-batched-tokens": ("2048", "8192"),
            "enable-prefix-caching": ("true", "false"), "kv-cache-dtype": ("fp8", "auto"),
            "gpu-memory-utilization": ("0.88", "0.92")} == grid  # the alias is vLLM's canonical name


@pytest.mark.parametrize(("specs", "says"), [
    (["max-num-seqs"], "expected FLAG=V1,V2"),
    (["=64"], "expected FLAG=V1,V2"),
    (["max-num-seqs="], "an empty value"),
    (["max-num-seqs=32,,64"], "an empty value"),
    (["max-num-seqs=32,"], "an empty value"),
    (["max-num-seqs=32", "max-num-seqs=64"], "max-num-seqs is given twice"),
    (["max-num-seqs=32,32"], "'32' is given twice"),
    (["max-num-seqz=32"], "did you mean max-num-seqs?"),
    (["--max-num-seqs=32"], "write it without them: --grid max-num-seqs=32"),
    (["Max Num Seqs=32"], "not a vllm serve flag name"),
    (["no-enable-prefix-caching=true"], "write --grid enable-prefix-caching=true,false"),
    (["enable-prefix-caching=maybe"], "--enable-prefix-caching is an on/off flag"),
    (["kv-cache-dtype=fp9"], "'fp9' is not a valid --kv-cache-dtype"),
    (["api-key=abc"], "the API key stays in api_key:"),
    (["model=other/model"], "tune does not vary --model"),
])
def test_a_bad_grid_is_one_usage_line(specs: list[str], says: str, catalog: FlagCatalog) -> None:
    with pytest.raises(UsageError) as caught:
        parse_grid(specs, catalog)
    message = str(caught.value)
    assert says in message
    assert message.startswith(f"--grid {specs[-1]}: ")
    assert "\n" not in message and 2 == caught.value.exit_code


def test_more_combinations_than_the_limit_are_refused(catalog: FlagCatalog) -> None:
    seqs = ",".join(str(n) for n in range(1, 9))
    assert MAX_CANDIDATES == 64
    assert 64 == len(expand(parse_grid([f"max-num-seqs={seqs}", f"max-num-batched-tokens={seqs}"], catalog))) - 1
    with pytest.raises(UsageError) as caught:
        parse_grid([f"max-num-seqs={seqs}", f"max-num-batched-tokens={seqs}", "enable-prefix-caching=true,false"],
                   catalog)
    assert "make 128 combinations, more than 64" in str(caught.value) and 2 == caught.value.exit_code


@pytest.mark.parametrize("spec", [
    "max-num-seqs=64 --api-key x", "max-num-batched-tokens=1\n--foo", "max-num-seqs=-1", "max-num-batched-tokens=--api-key",
    "max-num-seqs=64,-5", "max-num-seqs=[1, 2]", "max-num-seqs={a: 1}", "max-num-seqs=64;rm -rf /",
    "max-num-seqs='64'", "max-num-seqs=64\t", "kv-cache-dtype=fp8\x00", "max-num-seqs=*a", "max-num-seqs=" + "9" * 65,
])
def test_a_value_that_is_not_one_plain_word_is_refused(spec: str, catalog: FlagCatalog) -> None:
    """A value becomes `--set vllm.FLAG=VALUE`: it must never carry a flag, YAML, a null or a second word."""
    with pytest.raises(UsageError) as caught:
        parse_grid([spec], catalog)
    message = str(caught.value)
    assert "is not a plain value" in message and message.isprintable()


@pytest.mark.parametrize(("spec", "says"), [
    ("max-num-batched-tokens=yes", "would reach vLLM as the boolean true"),  # a bare --max-num-batched-tokens
    ("max-num-batched-tokens=2048,off", "'off' would reach vLLM as the boolean false"),
    ("max-num-seqs=null", "would reach vLLM as null (the flag removed)"),
    ("max-num-seqs=010", "'010' would reach vLLM as the number 8"),
    ("max-num-seqs=0x10", "'0x10' would reach vLLM as the number 16"),
    ("max-num-batched-tokens=1_000", "'1_000' would reach vLLM as the number 1000"),
    ("gpu-memory-utilization=1_0.5", "'1_0.5' would reach vLLM as the number 10.5"),
])
def test_a_word_that_set_would_read_as_something_else_is_refused(spec: str, says: str, catalog: FlagCatalog) -> None:
    """`--set` reads values as YAML 1.1: yes/off are booleans, 010 is octal; the grid keeps what was written."""
    with pytest.raises(UsageError) as caught:
        parse_grid([spec], catalog)
    assert says in str(caught.value)
    assert {"gpu-memory-utilization": ("0.90", "1")} == parse_grid(["gpu-memory-utilization=0.90,1"], catalog)


@pytest.mark.parametrize("assignment", ["vllm.max-num-seqs=64 --api-key x", "vllm.max-num-batched-tokens=--api-key",
                                        "vllm.max-num-batched-tokens=[1, --foo]", "vllm.kv-cache-dtype=fp8 --foo"])
def test_the_profile_refuses_a_set_value_that_carries_an_option(assignment: str) -> None:
    """The second wall, under the grid's own check: `--set` values go through the profile's validation."""
    with pytest.raises(ProfileError):
        load(QWEN3, [assignment])


@pytest.mark.parametrize("assignment", ["vllm.max-num-batched-tokens=64 --api-key x",
                                        "vllm.max-num-batched-tokens=1\n--foo"])
def test_a_set_value_the_profile_lets_through_stays_one_argv_word(assignment: str) -> None:
    """Where the profile does not type a flag's value, the value is still one argv word: no flag is smuggled."""
    argv = plan(QWEN3, gpu="l40s", sets=(assignment,)).plan.argv
    assert not {"--api-key", "--foo"} & set(argv)
    assert 1 == argv.count("--max-num-batched-tokens")


# --- vLLM's defaults and the default grid -----------------------------------------------------------------------

@pytest.mark.parametrize(("gpu", "expected"), [
    ("b200", BatchDefaults(1024, 16384)), ("h200", BatchDefaults(1024, 8192)), ("h100", BatchDefaults(1024, 8192)),
    ("a100-80gb", BatchDefaults(256, 2048)), ("l40s", BatchDefaults(256, 2048)), ("l4", BatchDefaults(256, 2048)),
])
def test_vllms_serve_defaults_follow_gpu_memory_and_name(gpu: str, expected: BatchDefaults) -> None:
    """vLLM 0.32 get_batch_defaults: ≥ 160 GiB, ≥ 70 GiB but not an A100, everything else."""
    spec = parse_gpu_spec(gpu)
    assert inventory_from_spec(spec) is not None
    assert expected == batch_defaults(spec, cpu=False, world_size=1)


def test_the_cpu_backends_defaults_grow_with_the_ranks() -> None:
    assert BatchDefaults(256, 4096) == batch_defaults(None, cpu=True, world_size=2)
    assert BatchDefaults(256, 2048) == batch_defaults(None, cpu=False, world_size=1)  # a device vLLM cannot query


def test_without_chunked_prefill_vllm_raises_the_default_batch_to_the_context(tmp_path: Path) -> None:
    profile = str(write_profile(tmp_path, name="nochunk", model=LLAMA_8B,
                                vllm={"max-model-len": 32768, "enable-chunked-prefill": False}))
    values = effective(plan(profile, gpu="l40s"))
    assert 32768 == values.max_num_batched_tokens and not values.chunked_prefill
    assert 2048 == effective(plan(LLAMA_TP2, gpu="l40s x2")).max_num_batched_tokens


def test_the_default_grid_on_an_h100_class_gpu() -> None:
    """max-num-seqs around the profile's 256, batches around vLLM's 8192 for ≥ 70 GiB, FP8 KV (CC 9.0); three
    axes only fit with max-num-seqs' lower value dropped."""
    report = plan(LLAMA_TP2, inventory="h100x2.yaml")
    grid = default_grid(report.profile, report)
    assert {"max-num-seqs": ("256", "512"), "kv-cache-dtype": ("auto", "fp8"),
            "max-num-batched-tokens": ("8192", "32768")} == grid
    candidates = expand(grid, baseline=baseline_values(report))
    assert 8 == len(candidates)  # the baseline and 7: kv auto, seqs 256, batch 8192 is the baseline itself
    assert Candidate((("kv-cache-dtype", "auto"), ("max-num-batched-tokens", "8192"), ("max-num-seqs", "256"))) \
        not in candidates


def test_vllms_own_max_num_seqs_is_the_centre_and_doubling_stops_at_1024(tmp_path: Path) -> None:
    profile = str(write_profile(tmp_path, name="plain", model=LLAMA_8B, vllm={"max-model-len": 8192}))
    report = plan(profile, gpu="h100")
    grid = default_grid(report.profile, report)
    assert ("512", "1024") == grid["max-num-seqs"]


def test_the_default_grid_on_an_l4_class_gpu() -> None:
    """24 GB: vLLM's small row (2048 tokens); the L4 is Ada (CC 8.9), so FP8 KV is an axis."""
    report = plan(LLAMA_TP2, inventory="l4x2.json")
    assert {"max-num-seqs": ("256", "512"), "kv-cache-dtype": ("auto", "fp8"),
            "max-num-batched-tokens": ("2048", "8192")} == default_grid(report.profile, report)


def test_below_compute_capability_8_9_there_is_no_fp8_axis() -> None:
    report = plan(LLAMA_TP2, gpu="a10 x2")  # Ampere, CC 8.6
    grid = default_grid(report.profile, report)
    assert {"max-num-seqs": ("128", "256", "512"), "max-num-batched-tokens": ("2048", "8192")} == grid
    assert 6 == len(expand(grid, baseline=baseline_values(report)))


def test_a_profile_that_pins_its_kv_dtype_keeps_it(tmp_path: Path) -> None:
    pinned = str(write_profile(tmp_path, name="bf16", model=LLAMA_8B, vllm={"max-model-len": 8192, "kv-cache-dtype": "bfloat16"}))
    report = plan(pinned, gpu="h100")
    assert "kv-cache-dtype" not in default_grid(report.profile, report)
    fp8 = plan(QWEN3, gpu="l40s")  # already FP8
    assert "kv-cache-dtype" not in default_grid(fp8.profile, fp8)


def test_prefix_caching_is_an_axis_only_for_a_shared_prefix() -> None:
    report = plan(QWEN3, gpu="l40s")
    assert "enable-prefix-caching" not in default_grid(report.profile, report)
    grid = default_grid(report.profile, report, shared_prefix=True)
    assert {"max-num-seqs": ("256", "512"), "enable-prefix-caching": ("true", "false"),
            "max-num-batched-tokens": ("2048", "8192")} == grid


@pytest.mark.parametrize(("profile", "gpu"), [(QWEN3, "l40s"), (QWEN3, "h100"), (LLAMA_TP2, "h100 x2"),
                                              (LLAMA_TP2, "l4 x2"), (LLAMA_TP2, "a100-80gb x2")])
@pytest.mark.parametrize("shared_prefix", [False, True])
def test_a_default_grid_stays_small(profile: str, gpu: str, shared_prefix: bool) -> None:
    report = plan(profile, gpu=gpu)
    candidates = expand(default_grid(report.profile, report, shared_prefix=shared_prefix),
                        baseline=baseline_values(report))
    assert 1 <= len(candidates) - 1 <= 8  # the baseline and at most 8 others


# --- expansion -------------------------------------------------------------------------------------------------

def test_expansion_is_the_baseline_then_the_product_sorted_by_flag() -> None:
    candidates = expand({"max-num-seqs": ("64", "128"), "enable-prefix-caching": ("false",)})
    assert [Candidate(),
            Candidate((("enable-prefix-caching", "false"), ("max-num-seqs", "64"))),
            Candidate((("enable-prefix-caching", "false"), ("max-num-seqs", "128")))] == candidates
    assert [Candidate()] == expand({})


def test_a_combination_of_the_baselines_own_values_is_the_baseline() -> None:
    baseline = {"max-num-seqs": 256, "gpu-memory-utilization": 0.9, "enable-prefix-caching": True}
    candidates = expand({"max-num-seqs": ("128", "256"), "gpu-memory-utilization": ("0.90",),
                         "enable-prefix-caching": ("true", "false")}, baseline=baseline)
    labels = [c.label for c in candidates]
    assert ["baseline",
            "enable-prefix-caching=true gpu-memory-utilization=0.90 max-num-seqs=128",
            "enable-prefix-caching=false gpu-memory-utilization=0.90 max-num-seqs=128",
            "enable-prefix-caching=false gpu-memory-utilization=0.90 max-num-seqs=256"] == labels
    # A flag the baseline leaves unset is never "the same": max-num-seqs=1 is not enable-prefix-caching=true.
    assert 2 == len(expand({"max-num-batched-tokens": ("1",)}, baseline={"enable-prefix-caching": True}))


# --- pruning ---------------------------------------------------------------------------------------------------

def test_each_reason_prunes_with_its_numbers(tmp_path: Path) -> None:
    fp8 = Candidate((("kv-cache-dtype", "fp8"),))
    four_gpus = Candidate((("tensor-parallel-size", "4"),))
    no_chunks = Candidate((("enable-chunked-prefill", "false"), ("max-num-batched-tokens", "2048")))
    invalid = Candidate((("max-num-seqs", "0"),))
    fine = Candidate((("max-num-seqs", "512"),))
    kept, pruned = prune(LLAMA_TP2, [Candidate(), fp8, four_gpus, no_chunks, invalid, fine],
                         plan_for=planner(LLAMA_TP2, gpu="a100-80gb x2"))
    assert [Candidate(), fine] == kept
    reasons = dict(pruned)
    assert [fp8, four_gpus, no_chunks, invalid] == [c for c, _ in pruned]
    assert "compute capability 8.0: kv-cache-dtype fp8 needs 8.9" in reasons[fp8]
    assert "tensor-parallel-size 4 needs 4 GPUs, 2 visible" in reasons[four_gpus]
    assert "max-num-batched-tokens 2,048 is below max-model-len 8,192 with chunked prefill off" in reasons[no_chunks]
    assert "vllm.max-num-seqs: expected a whole number ≥ 1, got 0" in reasons[invalid]
    assert all("\n" not in reason for reason in reasons.values())


def test_fp8_kv_stays_a_candidate_where_the_gpu_has_it() -> None:
    fp8 = Candidate((("kv-cache-dtype", "fp8"),))
    kept, pruned = prune(LLAMA_TP2, [Candidate(), fp8], plan_for=planner(LLAMA_TP2, inventory="h100x2.yaml"))
    assert [Candidate(), fp8] == kept and [] == pruned


def test_a_kv_cache_below_one_context_prunes(tmp_path: Path) -> None:
    profile = str(write_profile(tmp_path, name="qwen", model="Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8",
                                vllm={"max-model-len": 65536, "kv-cache-dtype": "fp8"}))
    tight = Candidate((("gpu-memory-utilization", "0.72"),))
    plan_for = planner(profile, gpu="l40s")
    cap = plan_for(tight.sets()).capacity
    assert cap is not None and cap.kv_tokens < 65536
    kept, pruned = prune(profile, [Candidate(), tight], plan_for=plan_for)
    assert [Candidate()] == kept
    assert [tight] == [c for c, _ in pruned]
    assert f"the KV cache holds ~{cap.kv_tokens:,} tokens, below one full context of 65,536" in pruned[0][1]


def test_chunked_prefill_off_in_the_profile_prunes_a_small_batch(tmp_path: Path) -> None:
    profile = str(write_profile(tmp_path, name="nochunk", model=LLAMA_8B,
                                vllm={"max-model-len": 8192, "enable-chunked-prefill": False}))
    small, enough = Candidate((("max-num-batched-tokens", "4096"),)), Candidate((("max-num-batched-tokens", "8192"),))
    kept, pruned = prune(profile, [Candidate(), small, enough], plan_for=planner(profile, gpu="l40s"))
    assert [Candidate(), enough] == kept
    assert [(small, "max-num-batched-tokens 4,096 is below max-model-len 8,192 with chunked prefill off: vLLM refuses "
                    "to start (a full-length prompt could never be scheduled)")] == pruned


def test_a_baseline_that_cannot_work_is_a_config_error(tmp_path: Path) -> None:
    profile = str(write_profile(tmp_path, name="doomed", model=LLAMA_8B, vllm={
        "max-model-len": 8192, "enable-chunked-prefill": False, "max-num-batched-tokens": 2048}))
    with pytest.raises(ConfigError) as caught:
        prune(profile, [Candidate(), Candidate((("max-num-batched-tokens", "8192"),))],
              plan_for=planner(profile, gpu="l40s"))
    assert 78 == caught.value.exit_code
    assert f"{profile}: the profile as written cannot work (max-num-batched-tokens 2,048 is below max-model-len 8,192" \
        in str(caught.value)


# --- ordering --------------------------------------------------------------------------------------------------

def test_the_likeliest_winners_run_first() -> None:
    """FP8 KV doubles the planned sessions: those go first; within the same capacity, more sequences first."""
    fewer = Candidate((("max-num-seqs", "128"),))
    more = Candidate((("max-num-seqs", "512"),))
    fp8 = Candidate((("kv-cache-dtype", "fp8"),))
    fp8_more = Candidate((("kv-cache-dtype", "fp8"), ("max-num-seqs", "512")))
    plan_for = planner(LLAMA_TP2, gpu="h100 x2")
    candidates = [Candidate(), fewer, more, fp8, fp8_more]
    reports = {c: plan_for(c.sets()) for c in candidates}
    assert [Candidate(), fp8_more, fp8, more, fewer] == order(candidates, reports)
    # Without a report a candidate keeps its place, after those ranked.
    unknown = Candidate((("max-num-seqs", "64"),))
    assert [Candidate(), more, unknown] == order([unknown, Candidate(), more], {more: reports[more]})
