"""vLLM's raise sites (launcher/vllm/raise_sites.py): an exception no signature knows, judged by its message in the
catalogue of vLLM's own messages, else by the module that raised it; and the fold that hands it the final exception
and its innermost frame."""

from __future__ import annotations

import pytest

from launcher.vllm.diagnose import diagnose_lines
from launcher.vllm.raise_sites import context_limit, judge

SITE = "/usr/local/lib/python3.12/dist-packages/"
NEW = "ValueError: the frobnication level 7 is not one of low, high"  # a message no catalogued version raises
# (exception line, the file of its innermost frame, expected (class, reason, how) or None)
ROWS = [
    (NEW, f"{SITE}vllm/config/parallel.py", ("config", "bad_argument", "module")),
    (NEW, f"{SITE}vllm/config/frobnication.py", ("config", "bad_argument", "module")),  # a new module: its folder
    (NEW, f"{SITE}vllm/model_executor/layers/quantization/newquant.py", ("config", "unsupported_model", "module")),
    (NEW, "C:\\venv\\Lib\\site-packages\\vllm\\engine\\arg_utils.py", ("config", "bad_argument", "module")),
    (NEW, f"{SITE}vllm/v1/worker/gpu_model_runner.py", None),  # no catalogued refusal there: nothing inferred
    (NEW, f"{SITE}vllm/sampling_params.py", None),  # directly under vllm/: the package as a whole says nothing
    (NEW, f"{SITE}transformers/configuration_utils.py", None),  # not vLLM's
    (NEW, None, None),  # no traceback: no module
    ("RuntimeError: the frobnication failed", f"{SITE}vllm/config/parallel.py", None),  # a failure, not a refusal
    ("torch.OutOfMemoryError: CUDA out of memory.", f"{SITE}vllm/config/model.py", None),
    # The message wins over the module: each is a row of the catalogue, its class decided by hand.
    ("ValueError: Total number of attention heads (64) must be divisible by tensor parallel size (3).",
     f"{SITE}vllm/v1/worker/gpu_model_runner.py", ("config", "heads_not_divisible", "message")),
    ("NotImplementedError: Unsupported OS", None, ("unknown", None, "message")),
    ("ValueError: Unsupported OS", None, None),  # the message, but not the type its row raises
    ("not an exception line", f"{SITE}vllm/config/parallel.py", None),
    # A checkpoint tensor no model code knows: another checkpoint or another vLLM, not a retry.
    ("KeyError: 'layers.0.mlp.experts.w2_weight_scale_inv'", None, ("config", "unsupported_model", "parameter")),
    ("KeyError: 'model_type'", None, None),
    # torch.distributed raising while it forms the process group: the group never formed, whatever the words.
    ("RuntimeError: Resource temporarily unavailable",
     f"{SITE}torch/distributed/distributed_c10d.py:_new_process_group_helper", ("distributed_init", None, "module")),
    ("RuntimeError: Resource temporarily unavailable", f"{SITE}torch/cuda/__init__.py:_lazy_init", None),
    # A bare exception line that tells the operator to set or drop one of vLLM's flags: the fix is in the profile.
    ("AssertionError: Decode Context Parallelism (DCP) requires attention implementations to return the softmax LSE "
     "during decode, but FlashInferMLASparseSM120Impl does not. Try a different backend by setting --attention-backend "
     "or disable DCP.", None, ("config", "bad_argument", "flag")),
]


@pytest.mark.parametrize(("exception", "module", "expected"), ROWS, ids=[f"{r[0][:30]}|{r[1]}" for r in ROWS])
def test_judge(exception: str, module: str | None, expected: tuple[str, str | None, str] | None) -> None:
    verdict = judge(exception, module)
    assert (None if verdict is None else (verdict.cls, verdict.reason, verdict.how)) == expected


def _engine(*lines: str) -> list[str]:
    return [f"(EngineCore_DP0 pid=77) ERROR 12-01 10:00:0{i % 10} [core.py:866] {line}" for i, line in enumerate(lines)]


FRAME = f'  File "{SITE}vllm/config/scheduler.py", line 210, in __post_init__'
STARTED = ["(APIServer pid=70) INFO 12-01 09:59:58 [utils.py:253] non-default args: {'model': 'x'}"]


def test_a_log_ending_in_an_unknown_refusal_is_config_from_its_module() -> None:
    lines = [*STARTED, *_engine("Traceback (most recent call last):", FRAME, NEW)]
    d = diagnose_lines(lines)
    assert (d.cls, d.reason, d.evidence) == ("config", "bad_argument", "log_end, raise site by module")
    assert d.root_cause == NEW


def test_the_engines_root_cause_above_its_generic_failure_is_judged() -> None:
    """vLLM's "Engine core initialization failed. See root cause above": the engine's own chain is judged."""
    lines = [*STARTED, *_engine("Traceback (most recent call last):", FRAME, NEW),
             "(APIServer pid=70) RuntimeError: Engine core initialization failed. See root cause above. "
             "Failed core proc(s): {}"]
    d = diagnose_lines(lines)
    assert (d.cls, d.reason) == ("config", "bad_argument") and d.root_cause == NEW
    assert d.evidence is not None and d.evidence.startswith("engine_start_failed")


def test_the_frame_of_an_earlier_traceback_is_not_the_module_of_a_later_one() -> None:
    """A second traceback of the same process starts afresh: the first one's frames never name its module."""
    lines = [*STARTED, *_engine("Traceback (most recent call last):", FRAME, "KeyError: 'x'",
                                "Traceback (most recent call last):", NEW)]
    assert diagnose_lines(lines).cls == "unknown"


def test_a_handled_refusal_that_progress_follows_is_no_failure() -> None:
    lines = [*STARTED, *_engine("Traceback (most recent call last):", FRAME, NEW),
             "(EngineCore_DP0 pid=77) INFO 12-01 10:00:09 [gpu_model_runner.py:2653] Model loading took 1.2 GiB and "
             "3.1 seconds"]
    assert diagnose_lines(lines).cls == "ok"


def test_a_refusal_raised_inside_vllm_that_names_a_setting_is_config() -> None:
    """Third, after the message and the module: vLLM's refusals name the setting to change (its flag list)."""
    raised = f"{SITE}vllm/v1/core/encoder_cache_manager.py"  # a folder whose catalogued messages disagree
    named = ("ValueError: Chunked MM input disabled but max_tokens_per_mm_item (2496) is larger than "
             "max_num_batched_tokens (2048). Please increase max_num_batched_tokens.")
    verdict = judge(named, raised)
    assert verdict is not None and (verdict.cls, verdict.reason, verdict.how) == ("config", "bad_argument", "setting")
    assert judge("ValueError: the dtype of the block table is odd", raised) is None, "one-word flags name nothing"
    assert judge(named, None) is None, "without a frame inside vLLM nothing says it is vLLM's refusal"


# (a refusal's message, what context_limit reads of it: the length asked and the limit, where stated)
LIMITS = [
    # A platform plugin's own wording: the limit first, the length asked after it.
    ("TT-LLama8B and TT-Llama11B do not support max_model_len greater than 32768 on N150 (received 65536). "
     "Set --max_model_len to 32768 or lower in vLLM.", {"max_model_len": 65536, "derived_max_model_len": 32768}),
    ("User-specified max_model_len (65536) is greater than the derived max_model_len (max_position_embeddings=32768 "
     "or model_max_length=None in model's config.json).", {"max_model_len": 65536, "derived_max_model_len": 32768}),
    ("The requested max_model_len exceeds 4096", {"derived_max_model_len": 4096}),  # one number: the limit
    ("max_model_len 8192 exceeds the limit", {}),  # no word says which number: none claimed
    # Not a context limit: another setting's, or a prompt's length (a request, not the profile).
    ("max_num_batched_tokens (2048) is smaller than max_model_len (8192)", None),
    ("Input prompt (5000 tokens) is too long and exceeds limit of 4096", None),
    ("max_model_len. The model is larger than the GPU", None),  # the limit words in another sentence
]


@pytest.mark.parametrize(("message", "expected"), LIMITS, ids=[m[:40] for m, _ in LIMITS])
def test_context_limit(message: str, expected: dict[str, int] | None) -> None:
    assert context_limit(message) == expected


def test_a_platforms_context_limit_is_config_with_both_lengths() -> None:
    d = diagnose_lines(["ValueError: TT-LLama8B and TT-Llama11B do not support max_model_len greater than 32768 on "
                        "N150 (received 65536). Set --max_model_len to 32768 or lower in vLLM."])
    assert (d.cls, d.reason) == ("config", "max_model_len_above_model")
    assert (d.numbers["max_model_len"], d.numbers["derived_max_model_len"]) == (65536, 32768)
    # A failure, not a refusal, with the same words is no configuration to change.
    assert judge("RuntimeError: max_model_len greater than 32768 (received 65536)") is None


def test_raised_inside_vllm_a_validators_refusal_or_a_flag_instruction_is_bad_argument() -> None:
    chat_utils = f"{SITE}vllm/entrypoints/chat_utils.py:validate_chat_template"
    refusal = "ValueError: The supplied chat template string (tool_use) appears path-like, but doesn't exist!"
    verdict = judge(refusal, chat_utils)
    assert verdict is not None and (verdict.cls, verdict.reason, verdict.how) == ("config", "bad_argument", "validator")
    # The same refusal from a function that validates nothing says nothing by itself.
    assert judge(refusal, f"{SITE}vllm/entrypoints/chat_utils.py:load_chat_template") is None
    numa = ("RuntimeError: NUMA binding was requested, but vLLM could not detect the GPU-to-NUMA topology "
            "automatically. Pass --numa-bind-nodes explicitly or disable --numa-bind.")
    verdict = judge(numa, f"{SITE}vllm/utils/numa_utils.py:_get_numa_node")
    assert verdict is not None and (verdict.cls, verdict.reason, verdict.how) == ("config", "bad_argument", "flag")
    # Not vLLM's flag, or not raised inside vLLM: no configuration to change.
    assert judge("RuntimeError: pass --frobnicate to continue", f"{SITE}vllm/utils/numa_utils.py:f") is None
    assert judge(numa, f"{SITE}torch/distributed/run.py:main") is None


def test_an_assertion_refuses_settings_only_where_a_validator_or_pydantic_made_it() -> None:
    """An AssertionError is vLLM's internal check, except in a function that validates settings, or in pydantic's
    validation of vLLM's config (`Assertion failed, …`): those refuse the configuration as set."""
    asserted = "AssertionError: In Mamba cache align mode, block_size (2096) must be <= max_num_batched_tokens (2048)."
    verdict = judge(asserted, f"{SITE}vllm/config/vllm.py:validate_block_size")
    assert verdict is not None and (verdict.cls, verdict.reason, verdict.how) == ("config", "bad_argument", "validator")
    assert judge(asserted, f"{SITE}vllm/v1/worker/gpu_model_runner.py:_dummy_run") is None, "an internal check"
    verdict = judge("Assertion failed, Maximum cudagraph size should be greater than or equal to 1 when using cuda "
                    "graph.", "vllm/config/vllm.py")
    assert verdict is not None and (verdict.cls, verdict.reason) == ("config", "bad_argument")
    d = diagnose_lines(["pydantic_core._pydantic_core.ValidationError: 1 validation error for VllmConfig",
                        "  Assertion failed, Maximum cudagraph size should be greater than or equal to 1 when using "
                        "cuda graph. [type=assertion_error, input_value=ArgsKwargs((), {}), input_type=ArgsKwargs]"])
    assert (d.cls, d.reason) == ("config", "bad_argument")
    assert d.root_cause is not None and d.root_cause.startswith("Assertion failed, Maximum cudagraph size")
    # The same words with no pydantic report around them are no refusal of vLLM's config.
    assert diagnose_lines(["Assertion failed, index out of bounds"]).cls != "config"


@pytest.mark.parametrize("inner", [
    "Hybrid KV cache manager is disabled but failed to convert the KV cache specs to one unified type.",
    "ValueError: Hybrid KV cache manager is disabled but failed to convert the KV cache specs to one unified type.",
])
def test_a_workers_failure_re_raised_by_the_engine_is_judged_as_the_workers(inner: str) -> None:
    """vLLM's engine re-raises a worker's exception as text (`Worker failed with error '…'`): the text is judged, with
    its type where it carries one."""
    verdict = judge(f"RuntimeError: Worker failed with error '{inner}', please check the stack trace above for the "
                    "root cause")
    assert verdict is not None and ("config", "bad_argument") == (verdict.cls, verdict.reason)
    assert judge("RuntimeError: Worker failed with error 'boom', please check the stack trace above") is None


def test_an_exception_raised_by_an_artifact_loaded_from_the_compile_cache_is_the_cache() -> None:
    """An AOT artifact an earlier build saved calls an op this run lacks: loaded from the cache, the cache is at fault;
    compiled and saved by this very start-up, it is not (what failed in it is judged as any other exception)."""
    message = "AttributeError: '_OpNamespace' 'vllm' object has no attribute 'flashinfer_mm_fp4'"
    verdict = judge(message, "/venv/lib/python3.12/site-packages/torch/_ops.py:__getattr__", from_cache=True)
    assert verdict is not None and "compile_cache" == verdict.cls
    assert judge(message, "/venv/lib/python3.12/site-packages/torch/_ops.py:__getattr__") is None


def test_only_a_traceback_through_an_artifact_loaded_from_the_cache_blames_the_cache() -> None:
    artifact = '  File "/root/.cache/vllm/torch_compile_cache/torch_aot_compile/03b7/inductor_cache/l6/cl6g.py", line 9, in call'
    ops = '  File "/venv/lib/python3.12/site-packages/torch/_ops.py", line 1, in __getattr__'
    error = "AttributeError: '_OpNamespace' 'vllm' object has no attribute 'flashinfer_mm_fp4'"
    loaded = "(EngineCore pid=1) INFO 08-23 22:59:26 [decorators.py:311] Directly load AOT compilation from path /x"
    saved = "(EngineCore pid=1) INFO 08-14 08:00:06 [decorators.py:708] saved AOT compiled function to /x"
    assert "compile_cache" == diagnose_lines([loaded, "Traceback (most recent call last):", artifact, ops, error]).cls
    assert "unknown" == diagnose_lines([saved, "Traceback (most recent call last):", artifact, ops, error]).cls
    assert "unknown" == diagnose_lines([loaded, "Traceback (most recent call last):", ops, error]).cls
