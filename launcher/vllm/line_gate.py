"""One regex that says whether a line holds any of many literal words, at C speed: the classifier's first gate.

Python's regex engine, searching an alternation whose every branch starts with a literal character, skips
in C every position whose character starts no branch. So each word is rewritten to start at its rarest
character, the part before it checked by a lookbehind: `in world size` becomes `z(?<=in world siz)e`,
which matches exactly where the word occurs. The engine then stops only at the few rare characters of a
line instead of at every space and vowel, and a line that holds none of the words costs one pass in C.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

# The ASCII characters of vLLM's logs, most frequent first (counted over tests/data/logs). A word starts its
# match at its character that comes last here; one not listed at all (non-ASCII) counts as rarer still.
_COMMON = " etrnioas0p:1ldc_u2.mg,h/345v=6I89-y7Pfk[ON(F)]Ab'\"STECw^R|\\xDMU;WL<%qGKHzV>B`{}j*#+Q?~YJX!&Z$@"
_RANK = {char: rank for rank, char in enumerate(_COMMON)}


def rarest(word: str) -> int:
    """The index of the word's rarest character (the first of equals)."""
    ranks = [_RANK.get(char, len(_COMMON)) for char in word]
    return ranks.index(max(ranks))


def _commonest_first(item: tuple[str, list[str]]) -> tuple[int, str]:
    """Branches in the order of their character's frequency: at each stop the engine compares the line's character
    with each branch's in turn, and most stops are at the commoner characters."""
    return _RANK.get(item[0], len(_COMMON)), item[0]


def _tail(word: str) -> tuple[str, str]:
    """(rarest character, the regex that must follow it for the word to stand there)."""
    at = rarest(word)
    behind = f"(?<={re.escape(word[:at + 1])})" if at else ""
    return word[at], behind + re.escape(word[at + 1:])


def any_of(words: Iterable[str], marked: Mapping[str, Iterable[str]] | None = None) -> re.Pattern[str]:
    """One compiled search that finds a line holding any of the words (and only such a line).

    `marked` names further words by a letter: a match of one has that letter first in its `lastgroup` (an empty
    named group closes its branch), a match of a plain word has no `lastgroup`. Where words stand at the same
    place, the marked ones are found first, in the order of `marked`. The branches are grouped by their first
    character: at each place it stops, the engine compares that character with each group's.
    """
    tails: dict[str, list[str]] = {}
    ordered = [(f"{letter}{number}", word) for letter, group in (marked or {}).items()
               for number, word in enumerate(sorted(set(group)))]
    ordered += [("", word) for word in sorted(set(words))]  # sorted: the same pattern on every run
    for name, word in ordered:
        if not word:
            raise ValueError("an empty word would match every line")
        char, tail = _tail(word)
        tails.setdefault(char, []).append(f"{tail}(?P<{name}>)" if name else tail)
    branches = [re.escape(char) if group == [""] else f"{re.escape(char)}(?:{'|'.join(group)})"
                for char, group in sorted(tails.items(), key=_commonest_first)]  # "": a one-character word
    return re.compile("|".join(branches))


_MERGED = 4096  # sets of found characters remembered by a WordIndex
# A word whose rarest character is among this many commonest is found by `str.find`: a search that stopped at that
# character would stop at most places of a line (measured by benchmarks/classifier.py: `o`, `l`, `c`, `u`, `.`).
_PLAIN_RANK = 20


class WordIndex:
    """Which of many words a line may hold, in one pass: `candidates(line)` lists, in their order, the indices of
    the words that share their rarest character with a place in the line where one of them stands. Every word
    the line holds is among them; a caller still tests each one with `in` (two words can share a character).

    A word whose rarest character is still common (`error`'s `o`, `nccl`'s `c`) would stop the search at most
    places of a line; such a word is looked for on its own, with `str.find` (a scan in C), instead.
    """

    def __init__(self, words: Sequence[str]) -> None:
        by_char: dict[str, list[int]] = {}
        looks: dict[str, list[str]] = {}
        plain: list[tuple[str, int]] = []
        for index, word in enumerate(words):
            if not word:
                raise ValueError("an empty word would match every line")
            at = rarest(word)
            if _RANK.get(word[at], len(_COMMON)) < _PLAIN_RANK:
                plain.append((word, index))
                continue
            by_char.setdefault(word[at], []).append(index)
            # Zero-width around the character: the search goes on at the next one, so no place is skipped.
            behind = f"(?<={re.escape(word[:at + 1])})" if at else ""
            ahead = f"(?={re.escape(word[at + 1:])})" if at + 1 < len(word) else ""
            looks.setdefault(word[at], []).append(behind + ahead)
        self._by_char = {char: tuple(indices) for char, indices in by_char.items()}
        self._plain = tuple(plain)
        # The candidates of the places found, by those places' characters: a log repeats a few line shapes (progress
        # bars, every rank's line), so most lines find a set already merged. Bounded: emptied when full.
        self._merged: dict[tuple[str | int, ...], tuple[int, ...]] = {}
        self._regex = re.compile("|".join(
            re.escape(char) if "" in group else f"{re.escape(char)}(?:{'|'.join(dict.fromkeys(group))})"
            for char, group in sorted(looks.items(), key=_commonest_first)))

    def candidates(self, line: str, start: int = 0) -> Sequence[int]:
        """The words that may stand in `line[start:]` (a word's characters before `start` are still read)."""
        found: list[str | int] = self._regex.findall(line, start) if self._by_char else []
        for word, index in self._plain:
            if line.find(word, start) >= 0:
                found.append(index)
        if not found:
            return ()
        if len(found) == 1:
            first = found[0]
            return self._by_char[first] if isinstance(first, str) else (first,)
        key = tuple(found)
        merged = self._merged.get(key)
        if merged is None:
            if len(self._merged) >= _MERGED:
                self._merged.clear()
            merged = self._merged[key] = tuple(sorted({index for item in set(found) for index in (
                self._by_char[item] if isinstance(item, str) else (item,))}))
        return merged
