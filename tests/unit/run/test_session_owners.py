"""Each field of the run's mutable Session has one writer: following a change through `up` means reading one
module for it, not ten. Read from the source: an assignment, augmented assignment or in-place call
(`append`, `extend`, `clear`, …) on a list, set or dict field `session.FIELD` (or `self.FIELD` inside
session.py) counts as a write. Calling an owned object (the StateStore, the Events) is not a write."""

from __future__ import annotations

import ast
from collections import defaultdict
from dataclasses import fields

from launcher.run.session import Session
from tests.conftest import ROOT

RUN = ROOT / "launcher" / "run"
IN_PLACE = {"append", "extend", "clear", "pop", "remove", "insert", "update", "add", "discard"}


CONTAINERS = {f.name for f in fields(Session) if str(f.type).startswith(("list", "set", "dict"))}


def writers() -> dict[str, set[str]]:
    found: dict[str, set[str]] = defaultdict(set)
    for path in sorted(RUN.glob("*.py")):
        owner = "self" if path.name == "session.py" else "session"
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = [t for target in node.targets for t in (target.elts if isinstance(target, ast.Tuple)
                                                                   else [target])]
            elif isinstance(node, ast.AugAssign | ast.AnnAssign):
                targets = [node.target]
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in IN_PLACE:
                targets = [t for t in [node.func.value] if isinstance(t, ast.Attribute) and t.attr in CONTAINERS]
            for target in targets:
                if (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                        and target.value.id == owner):
                    found[target.attr].add(path.stem)
    return found


def test_every_session_field_has_one_writer() -> None:
    session_fields = {f.name for f in fields(Session)}
    written = {name: modules for name, modules in writers().items() if name in session_fields}
    shared = {name: sorted(modules) for name, modules in written.items() if len(modules) > 1}
    assert not shared, f"Session fields written by more than one module: {shared}"
    assert {"ready", "config", "installed"} <= set(written) and written["ready"] == {"daemon"}


def test_the_run_configuration_and_the_installed_vllm_are_frozen() -> None:
    from launcher.run.session import Installed, Ready, RunConfig

    for kind in (RunConfig, Installed, Ready):
        assert kind.__dataclass_params__.frozen, kind  # type: ignore[attr-defined]
