"""The one reader: a FIFO, a device, a directory, a link, an oversized or deep file is one Unreadable line."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from launcher import safefile

LIMIT = 1 << 20


def fifo(path: Path) -> None:
    os.mkfifo(path)


def to_dev_zero(path: Path) -> None:
    path.symlink_to("/dev/zero")


def directory(path: Path) -> None:
    path.mkdir()


def too_big(path: Path) -> None:
    path.write_bytes(b"{}" + b" " * LIMIT)


def deep(path: Path) -> None:
    path.write_text("[" * 200_000)


def fairly_deep(path: Path) -> None:  # within the interpreter's recursion limit, beyond any file of ours
    path.write_text("[" * 500 + "]" * 500)


def latin1(path: Path) -> None:
    path.write_bytes(b'{"a": "r\xe9sum\xe9"}')


def a_list(path: Path) -> None:
    path.write_text("[1, 2]")


def null(path: Path) -> None:
    path.write_text("null")


def not_json(path: Path) -> None:
    path.write_text("{")


@pytest.mark.timeout(60)  # a FIFO opened without O_NONBLOCK would wait here for a writer forever
@pytest.mark.parametrize(("plant", "words"), [
    (fifo, "is a FIFO (named pipe), not a regular file"),
    (to_dev_zero, "is a symbolic link, which vllm-launch does not follow here"),
    (directory, "is a directory, not a regular file"),
    (too_big, "more than the 1,048,576 this file may hold"),
    (deep, "nests deeper than 64 levels"),
    (fairly_deep, "nests deeper than 64 levels"),
    (latin1, "byte 0xe9 at offset 8 is not UTF-8"),
    (a_list, "holds a list, not an object"),
    (null, "holds null, not an object"),
    (not_json, "is not JSON"),
])
def test_every_bad_file_is_one_unreadable_line(tmp_path: Path, plant: Callable[[Path], None], words: str) -> None:
    path = tmp_path / "state.json"
    plant(path)
    with pytest.raises(safefile.Unreadable) as caught:
        safefile.read_json(path, LIMIT)
    assert str(caught.value).startswith(f"{path}: ") and words in str(caught.value)
    assert "\n" not in str(caught.value)


@pytest.mark.timeout(60)
def test_a_followed_link_is_still_checked_for_what_it_points_to(tmp_path: Path) -> None:
    """The operator's files (a profile, a model directory) may be links; /dev/zero behind one is still refused."""
    path = tmp_path / "config.json"
    to_dev_zero(path)
    with pytest.raises(safefile.Unreadable, match="is a character device, not a regular file"):
        safefile.read_bytes(path, LIMIT, follow=True)
    real = tmp_path / "real.json"
    real.write_text('{"a": 1}')
    (tmp_path / "link.json").symlink_to(real)
    assert {"a": 1} == safefile.read_json(tmp_path / "link.json", LIMIT, follow=True)


def test_a_missing_file_is_missing(tmp_path: Path) -> None:
    with pytest.raises(safefile.Missing):
        safefile.read_bytes(tmp_path / "nothing", LIMIT)


def test_a_good_file_reads_whole(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text('{"phase": "serving", "decisions": [{"attempt": 1}]}')
    assert {"phase": "serving", "decisions": [{"attempt": 1}]} == safefile.read_json(path, LIMIT)
    assert (b'{"ph', path.stat().st_size) == safefile.read_head(path, 4)
