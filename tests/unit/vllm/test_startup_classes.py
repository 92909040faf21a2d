"""The classes a remedy exists for: a corrupted torch.compile cache, a group that never formed, a missing package."""

from __future__ import annotations

import pytest

from launcher.vllm.diagnose import diagnose_lines

TRACEBACK = "(EngineCore_DP0 pid=7) ERROR 11-29 10:54:13 [core.py:708] Traceback (most recent call last):"
STARTED = "(APIServer pid=1) INFO 11-29 10:55:00 [launcher.py:46] Application startup complete."
E = "(EngineCore_DP0 pid=7) ERROR 11-29 10:54:13 [core.py:708] "


@pytest.mark.parametrize(("line", "cls", "reason", "package"), [
    (E + "RuntimeError: vLLM failed to compile the model. The most likely reason for this is that a previous "
     "compilation failed, leading to a corrupted compilation artifact.", "compile_cache", None, None),
    (E + "AssertionError: failed to get the hash of the compiled graph", "compile_cache", None, None),
    (E + "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)",
     "distributed_init", None, None),
    (E + "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1333, internal error",
     "distributed_init", None, None),
    (E + "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.",
     "distributed_init", None, None),
    (E + "torch.distributed.DistNetworkError: The client socket has timed out after 600000ms while trying to "
     "connect to (172.17.0.9, 46229).", "distributed_init", None, None),
    (E + "ModuleNotFoundError: No module named 'torchvision'", "config", "missing_dependency", "torchvision"),
    (E + "ModuleNotFoundError: No module named 'cv2'", "config", "missing_dependency", "opencv-python-headless"),
    (E + "ImportError: This modeling file requires the following packages that were not found in your environment: "
     "flash_attn, einops. Run `pip install flash_attn einops`", "config", "missing_dependency", "flash-attn einops"),
    (E + "LlamaTokenizer requires the SentencePiece library but it was not found in your environment. Checkout the "
     "instructions on the installation page of its repo", "config", "missing_dependency", "sentencepiece"),
])
def test_before_ready(line: str, cls: str, reason: str | None, package: str | None) -> None:
    """A traceback that ends in the line decides the start-up's class, with the package named."""
    d = diagnose_lines([TRACEBACK, line])
    assert (cls, reason) == (d.cls, d.reason)
    assert package == d.numbers.get("package")
    if "Error: " in line:  # transformers' library message stands on the line after its `ImportError:`
        assert "traceback" == d.evidence


def test_nccl_while_serving_is_an_engine_death() -> None:
    """Once vLLM served, NCCL failing is the engine dying under load, not a start-up class."""
    d = diagnose_lines([STARTED, TRACEBACK, E + "RuntimeError: NCCL error: remote process exited or there was a "
                        "network error, NCCL version 2.21.5"])
    assert "engine_dead" == d.cls


def test_vllms_own_module_is_not_a_model_dependency() -> None:
    """`No module named 'vllm._C'` is a broken vLLM build: no package for the profile to install."""
    d = diagnose_lines([TRACEBACK, E + "ModuleNotFoundError: No module named 'vllm._C'"])
    assert "missing_dependency" != d.reason


def test_the_warning_that_vllm_recompiles_is_no_failure() -> None:
    """vLLM recovers from an unreadable AOT artifact by compiling again: a warning, never the class."""
    d = diagnose_lines([
        "(EngineCore pid=7) WARNING 11-29 10:54:13 [decorators.py:335] Compiling model again due to a load failure "
        "from /root/.cache/vllm/torch_compile_cache/torch_aot_compile/ab/rank_0_0/model, reason: Compile cache "
        "file corrupted.", STARTED])
    assert "ok" == d.cls
