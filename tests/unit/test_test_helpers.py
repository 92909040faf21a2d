"""A test module imports no other test module: what two of them share lives in tests/helpers/ (or tests/fakes,
a tier's harness), so that moving, renaming or deleting a test never breaks another one, and pytest never
imports a test module for its helpers alone. And the shared profile builder writes what its callers mean."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from launcher.errors import ProfileError
from tests.conftest import ROOT
from tests.helpers.profiles import load_profile, profile_yaml, write_profile, yaml_lines

TESTS = ROOT / "tests"


def imported(path: Path) -> set[str]:
    """Every module `path` imports, also inside functions (conftest's lazy ones count too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)  # `from tests.unit import test_x`
    return found


def test_no_test_module_is_imported() -> None:
    crossing = sorted(f"{path.relative_to(ROOT)} imports {name}"
                      for path in TESTS.rglob("*.py")
                      for name in imported(path)
                      if name.startswith("tests.") and name.rsplit(".", 1)[-1].startswith("test_"))
    assert not crossing, "move what they share to tests/helpers/:\n" + "\n".join(crossing)


def test_the_rule_sees_an_import_of_a_test_module(tmp_path: Path) -> None:
    module = tmp_path / "test_a.py"
    module.write_text("from tests.unit.test_b import x\n\ndef f() -> None:\n    from tests.unit import test_c\n")
    assert {"tests.unit.test_b", "tests.unit.test_c"} <= imported(module)


def test_a_profile_from_data_keeps_every_value_as_written_in_python() -> None:
    template = "{% for m in messages %}\n{{ m.content }}: {% endfor %}"
    p = load_profile(model="org/m", vllm={"port": 8001, "chat-template": template, "max-model-len": None},
                     launcher={"ladder": {"gpu_memory_utilization": [0.9, 0.8]}}, api_key={"env": "K"})
    assert ("org/m", "127.0.0.1", 8001, template) == (p.model, p.vllm["host"], p.vllm["port"], p.vllm["chat-template"])
    assert "max-model-len" not in p.vllm
    assert (0.9, 0.8) == p.launcher.ladder.utilization_rungs
    assert "host" not in load_profile(vllm={"host": None}, api_key={"env": "K"}).vllm


def test_yaml_lines_are_read_by_yaml_and_keep_their_line_numbers(tmp_path: Path) -> None:
    assert {"host": "127.0.0.1", "enforce-eager": True, "served-model-name": ("a", "b")} == dict(load_profile(
        vllm=yaml_lines({"enforce-eager": "yes", "served-model-name": "[a, b]"})).vllm)
    with pytest.raises(ProfileError, match=r"^p\.yaml:5: vllm\.gpu-memory-utilization: must be a fraction"):
        load_profile(vllm="  port: 8000\n  gpu-memory-utilization: 2\n")
    path = write_profile(tmp_path, name="q", model="org/m")
    assert ("q.yaml", profile_yaml("org/m")) == (path.name, path.read_text())
