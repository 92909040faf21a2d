"""The tune cache: keys that change with everything a measurement depends on, and files read as hostile."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from launcher.errors import ConfigError
from launcher.tune.cache import MAX_FILE_BYTES, Level, Record, Store, key_of

BASE = {"profile_bytes": b"model: m\n", "overrides": (("max-num-seqs", "64"),), "workload": {"users": 1, "seed": 0},
        "slo": "ttft_p95<=2000", "vllm_version": "0.32.0", "gpu": "NVIDIA H100 80GB HBM3 x1"}


@pytest.mark.parametrize(("field", "other"), [
    ("profile_bytes", b"model: m\n# a comment\n"), ("overrides", (("max-num-seqs", "128"),)),
    ("workload", {"users": 1, "seed": 1}), ("slo", "ttft_p95<=1000"), ("vllm_version", "0.33.0"),
    ("gpu", "NVIDIA L4 x1"),
])
def test_every_input_of_a_measurement_is_in_its_key(field: str, other: object) -> None:
    assert key_of(**BASE) != key_of(**{**BASE, field: other})  # type: ignore[arg-type]


def test_the_key_does_not_depend_on_the_order_things_are_given_in() -> None:
    two = (("max-num-seqs", "64"), ("max-num-batched-tokens", "8192"))
    assert key_of(**{**BASE, "overrides": two}) == key_of(**{**BASE, "overrides": tuple(reversed(two))})
    assert key_of(**{**BASE, "workload": {"seed": 0, "users": 1}}) == key_of(**BASE)


def _record(key: str) -> Record:
    record = Record(key)
    record.levels[(0, 4)] = Level(0, 4, True, {"ttft_p95_ms": 120.5, "output_tokens_per_s": 90.0}, ())
    record.levels[(1, 8)] = Level(1, 8, False, {"ttft_p95_ms": 2500.0}, ("ttft_p95 2500.0 (target <= 2000)",))
    return record


def test_a_saved_record_reads_back_whole(tmp_path: Path) -> None:
    store = Store(tmp_path / "tune")
    key = key_of(**BASE)
    store.save(_record(key))
    back = store.load(key)
    assert back.levels == _record(key).levels and back.verdict is None
    assert (store.path(key).stat().st_mode & 0o777) == 0o600


def test_a_verdict_is_kept_with_its_diagnosis(tmp_path: Path) -> None:
    store = Store(tmp_path)
    record = Record("k" * 64, verdict="infeasible", diagnosis="kv_insufficient: 0.4 sessions of 32,768")
    store.save(record)
    assert (store.load("k" * 64).verdict, store.load("k" * 64).diagnosis) == ("infeasible", record.diagnosis)


def test_nothing_cached_is_an_empty_record(tmp_path: Path) -> None:
    assert Store(tmp_path).load("a" * 64).levels == {}


def _tampered(tmp_path: Path, edit: object) -> Record:
    store = Store(tmp_path)
    key = key_of(**BASE)
    store.save(_record(key))
    data = json.loads(store.path(key).read_text())
    if callable(edit):
        edit(data)
        store.path(key).write_text(json.dumps(data))
    else:
        store.path(key).write_bytes(edit)  # type: ignore[arg-type]
    return store.load(key)


@pytest.mark.parametrize("edit", [
    b"\xff\xfe not utf-8", b"{not json", b"[]", b'{"format": 1, "key": "x", "levels": []}',
    b"[" * 100_000, b'{"format": 1, "levels": [NaN]}',
    lambda d: d.update(format=2),
    lambda d: d["levels"][0].update(met="yes"),
    lambda d: d["levels"][0].update(users=True),
    lambda d: d["levels"][0].update(users=-1),
    lambda d: d["levels"][0].update(users=0),
    lambda d: d["levels"][0]["figures"].update(ttft_p95_ms="fast"),
    lambda d: d["levels"][0]["figures"].update(ttft_p95_ms=-5),
    lambda d: d["levels"][0]["figures"].update(evil=1.0),
    lambda d: d["levels"][0].update(broken=[1]),
    lambda d: d.update(verdict="winner"),
    lambda d: d.update(diagnosis=7),
    lambda d: d.update(levels={"0": 1}),
])
def test_a_file_that_cannot_be_trusted_is_ignored_whole(tmp_path: Path, edit: object) -> None:
    """Not trusted in part: one bad level and the candidate is measured again from scratch."""
    assert _tampered(tmp_path, edit).levels == {}


def test_a_file_too_large_is_not_read(tmp_path: Path) -> None:
    key = key_of(**BASE)
    store = Store(tmp_path)
    store.save(_record(key))
    store.path(key).write_bytes(store.path(key).read_bytes() + b" " * MAX_FILE_BYTES)
    assert store.load(key).levels == {}


class TestTheCacheFolder:
    """The folder is checked like the state directory: tune writes there as whoever runs it (maybe root)."""

    def test_a_link_there_is_refused_and_its_target_untouched(self, tmp_path: Path) -> None:
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir(mode=0o700)
        (tmp_path / "tune").symlink_to(elsewhere)
        with pytest.raises(ConfigError) as caught:
            Store.private(tmp_path / "tune")
        assert f"the tune cache {tmp_path / 'tune'} is a symbolic link" in str(caught.value)
        assert [] == list(elsewhere.iterdir())

    def test_a_folder_others_can_write_is_refused(self, tmp_path: Path) -> None:
        (tmp_path / "tune").mkdir(mode=0o700)
        (tmp_path / "tune").chmod(0o777)
        with pytest.raises(ConfigError, match="writable by group or others"):
            Store.private(tmp_path / "tune")

    @pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a folder to another user")
    def test_another_users_folder_is_refused(self, tmp_path: Path) -> None:
        (tmp_path / "tune").mkdir(mode=0o700)
        os.chown(tmp_path / "tune", 65534, 65534)
        with pytest.raises(ConfigError, match="owned by uid 65534"):
            Store.private(tmp_path / "tune")

    def test_a_link_put_there_while_tune_runs_is_refused_at_the_next_save(self, tmp_path: Path) -> None:
        store = Store.private(tmp_path / "tune")
        assert 0o700 == (store.directory.stat().st_mode & 0o777)
        store.directory.rmdir()
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        store.directory.symlink_to(tmp_path / "elsewhere")
        with pytest.raises(ConfigError, match="symbolic link"):
            store.save(_record(key_of(**BASE)))
        assert [] == list((tmp_path / "elsewhere").iterdir())

    @pytest.mark.timeout(60)  # a FIFO as a record used to wait for a writer
    @pytest.mark.parametrize("plant", ["fifo", "link"])
    def test_a_record_that_is_not_a_file_is_measured_again(self, tmp_path: Path, plant: str) -> None:
        store = Store.private(tmp_path / "tune")
        key = key_of(**BASE)
        if plant == "fifo":
            os.mkfifo(store.path(key))
        else:
            other = tmp_path / "other.json"
            Store(tmp_path).save(_record(key))
            Store(tmp_path).path(key).rename(other)
            store.path(key).symlink_to(other)
        assert {} == store.load(key).levels
