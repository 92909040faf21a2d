"""line_gate: a search built from words finds exactly the lines that hold one of them; the index misses none."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from launcher.vllm import line_gate
from launcher.vllm.line_gate import WordIndex, any_of, rarest

ALPHABET = "ab (Q#█xz:"  # few characters: words overlap, repeat and share their rarest character
WORDS = st.lists(st.text(ALPHABET, min_size=1, max_size=5), min_size=1, max_size=8)


def test_a_word_starts_its_match_at_its_rarest_character() -> None:
    assert rarest("in world size") == "in world size".index("z")
    assert rarest("aaaa") == 0
    assert any_of(["in world size"]).pattern.startswith("z")


@settings(max_examples=600, deadline=None)
@given(WORDS, st.text(ALPHABET, max_size=30))
def test_any_of_finds_exactly_the_lines_holding_a_word(words: list[str], line: str) -> None:
    assert (any_of(words).search(line) is not None) == any(word in line for word in words)


@settings(max_examples=600, deadline=None)
@given(WORDS, WORDS, WORDS, st.text(ALPHABET, max_size=30))
def test_a_marked_word_found_first_is_known_by_its_letter(words: list[str], first: list[str], second: list[str],
                                                          line: str) -> None:
    found = any_of(words, marked={"f": first, "s": second}).search(line)
    assert (found is not None) == any(word in line for word in [*words, *first, *second])
    if found is None:
        return
    letter = found.lastgroup[0] if found.lastgroup else ""
    group = {"f": first, "s": second, "": words}[letter]
    assert any(line[found.start() - rarest(word):].startswith(word) for word in group)
    # No word stands at an earlier place, nor at the same place with a letter found before this one's.
    before = {"f": [], "s": first, "": [*first, *second]}[letter]
    assert not any(word in line[:found.start() - rarest(word) + len(word) - 1] for word in [*words, *first, *second])
    assert not any(word in line[:found.start() - rarest(word) + len(word)] for word in before)


@settings(max_examples=600, deadline=None)
@given(WORDS, st.text(ALPHABET, max_size=30))
def test_the_index_lists_every_word_the_line_holds_in_order(words: list[str], line: str) -> None:
    candidates = list(WordIndex(words).candidates(line))
    assert candidates == sorted(set(candidates))
    assert {index for index, word in enumerate(words) if word in line} <= set(candidates)


@settings(max_examples=600, deadline=None)
@given(WORDS, st.text(ALPHABET, max_size=30), st.integers(0, 30))
def test_the_index_lists_every_word_standing_after_start(words: list[str], line: str, start: int) -> None:
    candidates = list(WordIndex(words).candidates(line, start))
    assert candidates == sorted(set(candidates))
    assert {index for index, word in enumerate(words) if line.find(word, start) >= 0} <= set(candidates)


def test_a_word_of_common_characters_is_found_without_the_search() -> None:
    # `error`'s rarest character is `o`: a search stopping there would stop at most places of a line.
    index = WordIndex(["rror", "in world size", "nccl"])
    assert [word for word, _ in index._plain] == ["rror", "nccl"]
    assert list(index.candidates("RuntimeError: nccl in world size 2")) == [0, 1, 2]
    assert list(index.candidates("an error", 4)) == [0]
    assert list(index.candidates("an error", 5)) == []
    assert list(index.candidates("in world size 2")) == [1]
    assert list(WordIndex(["rror"]).candidates("no such word")) == []


def test_an_empty_word_is_refused() -> None:
    with pytest.raises(ValueError):
        any_of(["a", ""])
    with pytest.raises(ValueError):
        WordIndex(["", "a"])



def test_merged_candidates_are_remembered_within_a_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """A line shape seen before gets the same candidates from memory; a stream of new shapes cannot grow it."""
    monkeypatch.setattr(line_gate, "_MERGED", 4)
    words = ["aQ", "aZ", "aJ", "aX"]  # each at its own rare character
    index = WordIndex(words)
    line = "aQ and aZ"
    first = index.candidates(line)
    assert [words[i] for i in first] == ["aQ", "aZ"] and index.candidates(line) == first
    shapes = [" ".join(pair) for pair in itertools.permutations(words, 2)]  # 12 shapes, 12 sets of places
    for shape in shapes:
        assert sorted(words[i] for i in index.candidates(shape)) == sorted(shape.split())
        assert len(index._merged) <= 4
    assert index.candidates(line) == first
