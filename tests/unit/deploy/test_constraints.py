"""constraints.txt: every runtime dependency pinned to one tested version, and the installer installs with it."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from launcher.deploy.install import main
from tests.conftest import ROOT

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def pins() -> dict[str, str]:
    found: dict[str, str] = {}
    for raw in (ROOT / "constraints.txt").read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version and name.strip() and " " not in version, f"not an exact pin: {line!r}"
            assert canonicalize_name(name) not in found, f"pinned twice: {name}"
            found[canonicalize_name(name)] = version.strip()
    return found


def test_every_runtime_dependency_has_a_pin_its_range_allows() -> None:
    pinned = pins()
    for text in PYPROJECT["project"]["dependencies"]:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"{requirement.name} is a runtime dependency without a line in constraints.txt"
        assert requirement.specifier.contains(pinned[name]), f"{name}=={pinned[name]} is outside {requirement}"


def test_the_installer_installs_with_the_constraints(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    profile = tmp_path / "qwen3.yaml"
    profile.write_text((ROOT / "configs" / "qwen3.yaml").read_text())
    assert 0 == main([str(profile), "--dry-run"], environ={"VLLM_API_KEY": "k"})
    assert f"/opt/vllm-launch/venv/bin/pip install '{ROOT}[vllm]' -c {ROOT}/constraints.txt\n" in capsys.readouterr().out


def test_the_project_names_where_it_lives() -> None:
    urls = PYPROJECT["project"]["urls"]
    assert {"Homepage", "Documentation", "Issues"} <= set(urls)
    assert all(url.startswith(urls["Homepage"]) for url in urls.values())
    assert "Operating System :: POSIX :: Linux" in PYPROJECT["project"]["classifiers"]
