"""Users at the SLO: the most concurrent users whose measured run meets the target, found with few runs.

One round: 1 user, then 2, 4, 8 ... until a level misses the target or `most` is reached (the bracket),
then bisection between the last level that met it and the first that missed. Latency rises with users,
but a measurement is noisy and a curve need not be monotonic (a batch size that suddenly fits, a
preemption), so one round's answer is a claim, not a finding. Every round searches on its own; the
answer is the largest level that met the target in *every* round: the smallest round's answer, checked
in the other rounds, and searched again below in any round where it missed. The spread (largest minus
smallest round answer) is how far the rounds disagree.

Pure: `meets(round, users)` is the only contact with the world (the command measures, or replays a
cached measurement); nothing here knows about servers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

Meets = Callable[[int, int], bool]  # (round index, users) -> the measured level met the SLO


@dataclass
class Round:
    index: int
    meets: Meets
    tried: dict[int, bool] = field(default_factory=dict)  # users → met, in the order measured

    def probe(self, users: int) -> bool:
        if users not in self.tried:
            self.tried[users] = self.meets(self.index, users)
        return self.tried[users]

    def search(self, most: int) -> int:
        """This round's answer in [0, most]: 0 when even one user misses."""
        if not self.probe(1):
            return 0
        low = 1
        while low < most:
            step = min(low * 2, most)
            if not self.probe(step):
                return self.bisect(low, step)
            low = step
        return low

    def bisect(self, low: int, high: int) -> int:
        """`low` met the target, `high` missed: the boundary between them."""
        while high - low > 1:
            middle = (low + high) // 2
            if self.probe(middle):
                low = middle
            else:
                high = middle
        return low

    def below(self, users: int) -> int:
        """`users` missed in this round: search again under it, from the largest level that met it."""
        met = [n for n, ok in self.tried.items() if ok and n < users]
        if not met:
            return 0 if users == 1 or not self.probe(1) else self.bisect(1, users)
        return self.bisect(max(met), users)


@dataclass(frozen=True, slots=True)
class Answer:
    users: int  # met the target in every round (0: not even one user)
    round_answers: tuple[int, ...]  # each round's own search result, before the cross-check
    capped: bool  # `users` reached `most`: the box may serve more than was tried
    tried: tuple[tuple[int, int, bool], ...]  # (round, users, met) in measuring order within each round

    @property
    def spread(self) -> int:
        return max(self.round_answers) - min(self.round_answers) if self.round_answers else 0


def users_at_slo(meets: Meets, *, most: int, rounds: int = 2) -> Answer:
    if most < 1 or rounds < 1:
        raise ValueError("most and rounds must be at least 1")
    searched = [Round(index, meets) for index in range(rounds)]
    answers = tuple(r.search(most) for r in searched)
    users = min(answers)
    while users > 0:
        missed = [r for r in searched if not r.probe(users)]
        if not missed:
            break
        users = min(r.below(users) for r in missed)
    tried = tuple((r.index, n, ok) for r in searched for n, ok in r.tried.items())
    return Answer(users, answers, users == most, tried)
