"""The order `ncclbench tune` measures in: interleaved, so drift is shared.

A slow minute (another job, a thermal step, a noisy neighbour) must not
land on one candidate only.  So each size is measured in `rounds`; every
round measures every candidate once, the default included, in an order
that rotates from round to round (A B C, B C A, C A B, ...), so no
candidate always runs right after the same neighbour or always first.  The
default is in every round: each candidate has its own default measurement
a few calls away, A/B/A/B.

The timed iterations (-n) are split across the rounds, so one tune does the
timed work of one plain sweep per candidate, not `rounds` times that.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Step:
    size: int  # requested bytes
    round: int  # 0-based
    candidate: int  # index into the candidate list (0 = default)


def round_order(ncandidates: int, rnd: int) -> list[int]:
    """Candidate indices for round `rnd`: 0..n-1 rotated left by rnd."""
    if ncandidates < 1:
        return []
    k = rnd % ncandidates
    order = list(range(ncandidates))
    return order[k:] + order[:k]


def interleaved(sizes: Sequence[int], ncandidates: int, rounds: int) -> Iterator[Step]:
    """Size by size, `rounds` rounds of every candidate (see module doc)."""
    if rounds < 1:
        raise ValueError("rounds must be at least 1")
    for size in sizes:
        for r in range(rounds):
            for c in round_order(ncandidates, r):
                yield Step(size, r, c)


def iterations_per_round(iters: int, rounds: int) -> int:
    """-n split over the rounds (at least 1 timed iteration per measurement)."""
    if rounds < 1:
        raise ValueError("rounds must be at least 1")
    return max(1, iters // rounds)


MIN_CLAIM_ROUNDS = 5  # the fewest rounds whose sign test can reach p <= 0.05 (5 of 5: 1/32)


def default_rounds(iters: int) -> int:
    """Rounds when the user gives none: 5, the fewest with which a gain can be
    claimed at all (candidate_judge.py's sign test); with -n below 5 each round still
    times one iteration."""
    return MIN_CLAIM_ROUNDS


def few_rounds_note(rounds: int) -> str | None:
    if rounds >= MIN_CLAIM_ROUNDS:
        return None
    return (f"with {rounds} rounds no gain can be claimed (the paired sign test needs at least "
            f"{MIN_CLAIM_ROUNDS} rounds to reach p <= 0.05): use --rounds {MIN_CLAIM_ROUNDS} or more")
