"""vLLM's torch.compile cache moved aside once: on tmp dirs, never deleted, never through a link, only our own."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from launcher.run import compilecache, ladder

NOW = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def test_where_vllm_keeps_it(tmp_path: Path) -> None:
    """vllm/envs.py: VLLM_CACHE_ROOT, else $XDG_CACHE_HOME/vllm, else ~/.cache/vllm; then torch_compile_cache."""
    assert Path("/c/torch_compile_cache") == compilecache.cache_dir({"VLLM_CACHE_ROOT": "/c", "HOME": "/h"})
    assert Path("/x/vllm/torch_compile_cache") == compilecache.cache_dir({"XDG_CACHE_HOME": "/x", "HOME": "/h"})
    assert Path("/h/.cache/vllm/torch_compile_cache") == compilecache.cache_dir({"HOME": "/h"})


def test_moved_aside_with_its_contents(tmp_path: Path) -> None:
    cache = tmp_path / "torch_compile_cache"
    (cache / "3f2fad2cbf" / "rank_0_0").mkdir(parents=True)
    (cache / "3f2fad2cbf" / "rank_0_0" / "artifact").write_text("half-written")
    moved = compilecache.move_aside(cache, now=lambda: NOW)
    assert tmp_path / "torch_compile_cache.corrupt-20260101T000000Z" == moved.to
    assert not cache.exists()
    assert "half-written" == (moved.to / "3f2fad2cbf" / "rank_0_0" / "artifact").read_text()


def test_a_second_move_in_the_same_second_keeps_both(tmp_path: Path) -> None:
    cache = tmp_path / "torch_compile_cache"
    cache.mkdir()
    first = compilecache.move_aside(cache, now=lambda: NOW)
    cache.mkdir()
    second = compilecache.move_aside(cache, now=lambda: NOW)
    assert first.to is not None and second.to is not None and first.to != second.to
    assert first.to.is_dir() and second.to.is_dir()


def test_a_link_is_never_followed(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "keep").write_text("x")
    link = tmp_path / "torch_compile_cache"
    link.symlink_to(target)
    moved = compilecache.move_aside(link, now=lambda: NOW)
    assert moved.to is None and "symbolic link" in str(moved.why)
    assert link.is_symlink() and (target / "keep").exists()


def test_another_users_directory_is_left(tmp_path: Path) -> None:
    cache = tmp_path / "torch_compile_cache"
    cache.mkdir()
    moved = compilecache.move_aside(cache, uid=os.geteuid() + 1, now=lambda: NOW)
    assert moved.to is None and "not to the service user" in str(moved.why)
    assert cache.is_dir()


@pytest.mark.parametrize("make", ["missing", "file"])
def test_nothing_to_move(tmp_path: Path, make: str) -> None:
    cache = tmp_path / "torch_compile_cache"
    if make == "file":
        cache.write_text("not a directory")
    moved = compilecache.move_aside(cache, now=lambda: NOW)
    assert moved.to is None and moved.why


def test_the_step_records_it_in_state_or_stops_with_75(tmp_path: Path) -> None:
    cache = tmp_path / "torch_compile_cache"
    cache.mkdir()
    recorded: dict[str, Any] = {}
    moved = compilecache.move_compile_cache(cache, 2, lambda **fields: recorded.update(fields))
    assert {"attempt": 2, "path": str(cache), "moved_to": str(moved.to), "why_not": None} == recorded["compile_cache"]
    with pytest.raises(ladder.Exhausted) as caught:  # nothing left at that path: said, not looped
        compilecache.move_compile_cache(cache, 3, lambda **fields: recorded.update(fields))
    assert 75 == caught.value.exit_code and str(cache) in str(caught.value)
    assert recorded["compile_cache"]["moved_to"] is None
