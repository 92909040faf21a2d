"""A test module imports no other test module: what two of them share lives in tests/helpers/ (or tests/fakes,
a tier's harness), so that moving, renaming or deleting a test never breaks another one, and pytest never
imports a test module for its helpers alone."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

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
