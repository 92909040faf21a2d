"""The kernel's OOM killer behind a silent start-up: the cgroup's memory.events, read from files in tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.run import oomkill
from launcher.vllm.diagnosis import Diagnosis

EVENTS = "low 0\nhigh 0\nmax 12\noom 3\noom_kill {n}\noom_group_kill 0\n"


def cgroup(tmp_path: Path, line: str = "0::/system.slice/vllm-launch@qwen3.service\n") -> tuple[Path, Path]:
    proc = tmp_path / "cgroup"
    proc.write_text(line)
    return proc, tmp_path / "fs"


def test_the_own_cgroups_memory_events(tmp_path: Path) -> None:
    proc, root = cgroup(tmp_path)
    path = oomkill.events_path(proc, root)
    assert root / "system.slice/vllm-launch@qwen3.service/memory.events" == path
    path.parent.mkdir(parents=True)
    path.write_text(EVENTS.format(n=4))
    assert 4 == oomkill.oom_kills(path)


@pytest.mark.parametrize("line", ["0::/\n", "12:memory:/docker/abc\n0::/\n"])
def test_a_container_at_the_root_of_its_namespace(tmp_path: Path, line: str) -> None:
    proc, root = cgroup(tmp_path, line)
    assert root / "memory.events" == oomkill.events_path(proc, root)


@pytest.mark.parametrize("line", ["12:memory:/docker/abc\n", "0::/../../etc\n", ""])
def test_no_cgroup_v2_or_a_strange_path_cannot_tell(tmp_path: Path, line: str) -> None:
    proc, root = cgroup(tmp_path, line)
    assert oomkill.events_path(proc, root) is None


def test_unreadable_files_cannot_tell(tmp_path: Path) -> None:
    assert oomkill.events_path(tmp_path / "nope", tmp_path) is None
    assert oomkill.oom_kills(tmp_path / "nope") is None
    assert oomkill.oom_kills(None) is None
    (tmp_path / "memory.events").write_text("low 0\n")
    assert oomkill.oom_kills(tmp_path / "memory.events") is None


SILENT = Diagnosis("unknown", None, "RuntimeError: Engine core initialization failed. See root cause above. "
                   "Failed core proc(s): {}", {}, "starting", 9, (), "engine_start_failed")


def test_a_rise_makes_a_silent_failure_host_memory() -> None:
    d = oomkill.explain_oom(SILENT, 3, 4)
    assert ("startup_memory", "host_oom_killer", "oom_kill") == (d.cls, d.reason, d.evidence)
    assert "OOM killer" in str(d.root_cause) and "3 → 4" in str(d.root_cause) and "host RAM" in str(d.root_cause)


@pytest.mark.parametrize(("d", "before", "after"), [
    (SILENT, 3, 3),  # no kill during the attempt
    (SILENT, None, 4),  # no count before
    (SILENT, 3, None),
    (Diagnosis("config", "model_not_found", "RepositoryNotFoundError"), 3, 4),  # the log names another cause
    (Diagnosis("startup_memory", None, "CUDA out of memory"), 3, 4),
])
def test_otherwise_the_log_decides(d: Diagnosis, before: int | None, after: int | None) -> None:
    assert d is oomkill.explain_oom(d, before, after)


def test_a_dead_worker_or_an_exit_with_a_clean_log_counts_too() -> None:
    for d in (Diagnosis("engine_dead", None, "Worker proc VllmWorker-0 died unexpectedly"), Diagnosis("ok")):
        assert "host_oom_killer" == oomkill.explain_oom(d, 0, 1).reason
