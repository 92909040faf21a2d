"""Broken model directories (a failed copy, a full disk, a Git LFS checkout without `git lfs pull`, a config
someone wrote by hand): `plan` and `up` give no estimate and say why in one line, never a traceback, never a
negative size."""

from __future__ import annotations

import json
import os
import re
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from launcher import cli
from launcher.config.load import loads
from launcher.gpu.catalog import parse_gpu_spec
from launcher.gpu.match import inventory_from_spec
from launcher.plan import facts, hostfacts, modelinfo
from launcher.vllm.command import build_plan
from launcher.vllm.versions import semantics

GOOD = {"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 1000, "intermediate_size": 512, "max_position_embeddings": 4096,
        "torch_dtype": "bfloat16"}
LFS = ("version https://git-lfs.github.com/spec/v1\n"
       "oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 2337367568\n")


def safetensors(header: bytes = b'{"__metadata__": {}}', data: int = 1024, length: int | None = None) -> bytes:
    return struct.pack("<Q", len(header) if length is None else length) + header + b"\0" * data


Plant = Callable[[Path], None]


def files(**named: str | bytes | Plant) -> Plant:
    """A model directory holding `named` (text, bytes, or a function that makes the entry); config.json is the
    good one unless named."""
    def make(directory: Path) -> None:
        directory.mkdir()
        entries = {"config.json": json.dumps(GOOD), **{name.replace("__", "."): c for name, c in named.items()}}
        for name, content in entries.items():
            path = directory / name
            if callable(content):
                content(path)
            elif isinstance(content, bytes):
                path.write_bytes(content)
            else:
                path.write_text(content)
    return make


def fifo(path: Path) -> None:
    os.mkfifo(path)


def dev_zero(path: Path) -> None:
    path.symlink_to("/dev/zero")


def config(**changes: object) -> str:
    return json.dumps({**GOOD, **changes})


# name → (the directory, words the reason holds)
CASES: dict[str, tuple[Plant, str]] = {
    "config-deep": (files(config__json="[" * 200_000), "nests deeper than"),
    "config-a-list": (files(config__json="[1, 2]"), "holds a list, not an object"),
    "config-null": (files(config__json="null"), "holds null, not an object"),
    "config-not-json": (files(config__json="{"), "is not JSON"),
    "config-latin1": (files(config__json=b'{"model_type": "r\xe9sum\xe9"}'), "is not UTF-8"),
    "config-fifo": (files(config__json=fifo), "is a FIFO"),
    "config-dev-zero": (files(config__json=dev_zero), "is a character device"),
    "config-huge": (files(config__json=" " * (9 * 2**20) + "{}"), "more than the"),
    "layers-1e308": (files(config__json=config(num_hidden_layers=1e308)), "num_hidden_layers"),
    "layers-negative": (files(config__json=config(num_hidden_layers=-4)), "num_hidden_layers"),
    "hidden-a-word": (files(config__json=config(hidden_size="big")), "hidden_size"),
    "bits-1e308": (files(config__json=config(quantization_config={"quant_method": "gptq", "bits": 1e308})), "bits"),
    "weights-empty": (files(model__safetensors=b""), "model.safetensors is empty"),
    "weights-cut-short": (files(model__safetensors=b"\x10\x00\x00"), "model.safetensors is not a safetensors file"),
    "weights-header-past-the-end": (files(model__safetensors=safetensors(length=10**9, data=10)),
                                    "model.safetensors is not a safetensors file"),
    "weights-not-a-header": (files(model__safetensors=safetensors(header=b"\x00\x01\x02\x03")),
                             "model.safetensors is not a safetensors file"),
    "weights-lfs-pointer": (files(model__safetensors=LFS), "is a Git LFS pointer, not the weights"),
    "weights-fifo": (files(model__safetensors=fifo), "is a FIFO"),
    "index-metadata-a-list": (files(model__safetensors__index__json='{"metadata": [1], "weight_map": {}}'),
                              "model.safetensors.index.json"),
    "index-size-negative": (files(model__safetensors__index__json='{"metadata": {"total_size": -5}}'),
                            "model.safetensors.index.json"),
    "index-deep": (files(model__safetensors__index__json="[" * 200_000), "nests deeper than"),
}

L40S = inventory_from_spec(parse_gpu_spec("l40s"))
VERSION = semantics("0.32.0")


@pytest.mark.timeout(60)  # a FIFO in the directory used to wait for a writer
@pytest.mark.parametrize("case", sorted(CASES))
class TestBrokenModelDirectory:
    def model(self, tmp_path: Path, case: str) -> Path:
        plant, _ = CASES[case]
        plant(tmp_path / "model")
        return tmp_path / "model"

    def test_up_goes_on_without_an_estimate_and_says_why(self, tmp_path: Path, case: str) -> None:
        """What `up`'s preflight reads (the capacity facts and the host's view of the model) never raises."""
        model = self.model(tmp_path, case)
        prof = loads(f"model: {model}\nvllm: {{host: 127.0.0.1}}\n")
        found = facts.gather(prof, build_plan(prof), L40S, version=VERSION, environ={"HF_HOME": str(tmp_path / "hf")})
        assert found.estimate is None and found.no_estimate is not None
        assert CASES[case][1] in found.no_estimate and "\n" not in found.no_estimate, found.no_estimate
        host = hostfacts.host_facts(prof, environ={"HF_HOME": str(tmp_path / "hf")}, process_iter=lambda *a, **k: [])
        assert host.model_bytes is None or host.model_bytes >= 0

    def test_plan_says_no_estimate_in_one_line(self, tmp_path: Path, case: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
        model = self.model(tmp_path, case)
        profile = tmp_path / "p.yaml"
        profile.write_text(f"model: {model}\nvllm: {{host: 127.0.0.1}}\n")
        code = cli.main(["plan", str(profile), "--gpu", "l40s"])
        captured = capsys.readouterr()
        said = captured.out + captured.err
        assert 0 == code and "Traceback" not in said, said
        assert "fits" not in said and not re.search(r"weights\s+-", said), said
        assert 1 == len([line for line in said.splitlines() if CASES[case][1] in line]), said


def test_an_lfs_pointer_is_named_with_the_fix(tmp_path: Path) -> None:
    files(model__safetensors=LFS)(tmp_path / "model")
    with pytest.raises(modelinfo.ConfigError) as caught:
        modelinfo.safetensors_bytes(tmp_path / "model")
    message = str(caught.value)
    assert f"{tmp_path / 'model' / 'model.safetensors'} is a Git LFS pointer, not the weights" in message
    assert f"git -C {tmp_path / 'model'} lfs pull" in message and "huggingface-cli download" in message


def test_a_good_directory_is_sized_from_its_headers(tmp_path: Path) -> None:
    """The guard for the table: the same directory with sound files gives an exact weight size."""
    files(model__safetensors=safetensors(data=4096))(tmp_path / "model")
    assert 4096 == modelinfo.safetensors_bytes(tmp_path / "model")
    found = modelinfo.find_model(str(tmp_path / "model"))
    assert (4096, GOOD["hidden_size"]) == (found.weights_bytes, found.config["hidden_size"])
