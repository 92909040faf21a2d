"""The package's shape: stage folders that import only downwards, no import cycles, small modules.

Layers, lowest first: the ground floor (errors, units) ← config, gpu ← vllm ← plan ← run, deploy ← observe, bench ←
tune ← cli.
A module may import its own folder and any lower layer; `config` and `gpu` are siblings that
know nothing of each other. Every import counts, also the lazy ones inside functions and those
under TYPE_CHECKING: a cycle that only shows at run time is still a cycle.
"""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.helpers.layers import LAYERS, PACKAGE

MAX_LINES = 400


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def stage(module: str) -> str:
    """launcher.plan.capacity → plan; the ground-floor modules (errors, units, oneline, safefile, …) → ground."""
    parts = module.split(".")
    if len(parts) == 1 or parts[1] in ("errors", "units", "statedir", "runstate", "procstat", "oneline", "safefile"):
        return "ground"
    if parts[1] in ("cli", "__main__", "completion"):
        return "cli"
    return parts[1]


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(path: Path) -> set[str]:
    """The launcher modules a file imports (`from launcher.x import y` counts y when y is a module)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("launcher"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("launcher") \
                and node.level == 0:
            for alias in node.names:
                child = f"{node.module}.{alias.name}"
                found.add(child if child in MODULES else node.module)
    return {name for name in found if name in MODULES and name != "launcher"}


GRAPH = {name: imports_of(path) for name, path in MODULES.items()}


def test_the_walk_sees_the_package() -> None:
    """A guard for the checks below: they must be looking at the real tree."""
    assert {"launcher.cli", "launcher.run.daemon", "launcher.plan.preflight", "launcher.vllm.signatures"} <= set(GRAPH)
    assert "launcher.run.supervisor" in GRAPH["launcher.run.startup"]


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_imports_go_only_downwards(module: str) -> None:
    here = stage(module)
    upward = sorted(dep for dep in GRAPH[module] if stage(dep) != here and LAYERS[stage(dep)] >= LAYERS[here])
    assert not upward, f"{module} ({here}) imports {upward}: a layer may import only lower layers"


def test_no_import_cycles() -> None:
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1 on the current path, 2 done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for dep in sorted(GRAPH[node]):
            if state.get(dep) == 1:
                cycles.append([*path[path.index(dep):], dep])
            elif dep not in state:
                visit(dep, [*path, dep])
        state[node] = 2

    for name in sorted(GRAPH):
        if name not in state:
            visit(name, [name])
    assert not cycles, "import cycles: " + "; ".join(" → ".join(c) for c in cycles)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_modules_stay_small(module: str) -> None:
    lines = MODULES[module].read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_LINES, f"{module} has {lines} lines: split it by job (aim for 60–300)"


@pytest.mark.parametrize("folder", sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py")))
def test_each_folder_says_what_it_may_import(folder: str) -> None:
    doc = ast.get_docstring(ast.parse((PACKAGE / folder / "__init__.py").read_text(encoding="utf-8")))
    assert doc and "May import" in doc, f"launcher/{folder}/__init__.py needs a docstring: what lives here, what it may import"


def tracked_files() -> list[Path]:
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [ROOT / name for name in listed.decode().split("\0") if name]


def test_the_repository_stands_on_its_own() -> None:
    """No tracked file points at material outside the repository."""
    outside = ("../" + "shared", "shared/" + "reference")
    offenders = []
    for path in tracked_files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        offenders += [f"{path.relative_to(ROOT)}: {word}" for word in outside if word in text]
    assert not offenders, offenders
