"""Judging the measurements: per size, the best candidate against the default,
and a gain only where it is bigger than the noise measured in the same job.

For one size, each candidate has one time per round (rounds interleaved, so
round r of the default and of a candidate were measured moments apart).

* time: the median over rounds;
* gain: default median / candidate median - 1 (+0.25 = 25 % less time);
* spread: the run-to-run noise of one candidate at one size in this job:
  1.4826 x the median absolute deviation over the rounds, relative to the
  median (a standard deviation where the noise is normal; with two rounds,
  (max - min) / median).  The median deviation, not the range: on a shared
  host a round now and then is hit by a descheduled process and takes ten
  to a hundred times as long (bench/results/tune-cpu.md), and one such round must neither
  hide a real gain nor fake one;
* wins: in how many rounds the candidate beat the default of the same round,
  and `p`, the one-sided sign-test probability of that many wins if the two
  were equally fast (5 of 5: 1/32).

A gain is *claimed* only when it exceeds the larger spread of the two (the
candidate's and the default's) and the paired rounds agree (p <= 0.05: with
5 rounds all five won, with 8 at least seven); otherwise the default stays,
and the report says why.  Tune picks the best of many candidates, so a
claimed gain can still be luck: --verify re-measures it in separate jobs.
Sizes in a row with the same verdict form a *band*: the unit the emitters
write (one tuner-config line, one env setting) and --verify checks.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..core.robust import MAD_TO_SIGMA


@dataclass(frozen=True)
class Series:
    """One candidate at one size: its time in each round, in round order.
    (A candidate is judged at a size only if it was measured in every round.)"""

    times_us: tuple[float, ...]

    @property
    def median_us(self) -> float:
        return statistics.median(self.times_us)

    @property
    def spread(self) -> float:
        """Robust relative spread (module doc); 0 with one round (no noise measured)."""
        return relative_spread(self.times_us)

    @property
    def range(self) -> float:
        """(max - min) / median, for the record."""
        med = self.median_us
        return (max(self.times_us) - min(self.times_us)) / med if med > 0 else float("inf")



SIGN_TEST_LEVEL = 0.05


def relative_spread(values: Sequence[float]) -> float:
    """1.4826 x MAD / median for three or more values, (max - min) / median
    for two, 0 for one."""
    if len(values) < 2:
        return 0.0
    med = statistics.median(values)
    if med <= 0:
        return float("inf")
    if len(values) == 2:
        return (max(values) - min(values)) / med
    mad = statistics.median(abs(v - med) for v in values)
    return MAD_TO_SIGMA * mad / med


def sign_test_p(wins: int, rounds: int) -> float:
    """P(at least `wins` of `rounds` fair coin flips): one-sided sign test."""
    from math import comb

    if rounds <= 0:
        return 1.0
    return sum(comb(rounds, k) for k in range(wins, rounds + 1)) / (1 << rounds)


@dataclass(frozen=True)
class Verdict:
    """The judgement at one size."""

    size: int
    default_us: float
    best: str  # label of the fastest candidate ('default' if none was faster)
    best_us: float
    gain: float  # of `best` over the default (0 when best is the default)
    noise: float  # max(spread of default, spread of best)
    wins: int  # rounds in which `best` beat the default
    rounds: int
    claimed: bool  # gain > noise and p <= 0.05
    p: float = 1.0  # sign-test probability of `wins` by chance

    @property
    def reason(self) -> str:
        """Why the verdict is what it is, in a few words."""
        if self.best == "default":
            return "default is fastest"
        if self.claimed:
            return "faster"
        if self.gain <= self.noise:
            return "within noise"
        return "rounds disagree"

    @property
    def winner(self) -> str:
        """What this size should use: the best candidate if its gain is claimed, else the default."""
        return self.best if self.claimed else "default"


def paired_wins(default: Sequence[float], other: Sequence[float]) -> int:
    """Rounds in which `other` took less time than the default of the same round."""
    return sum(1 for d, o in zip(default, other) if o < d)


def judge_size(size: int, series: Mapping[str, Series], default: str = "default") -> Verdict:
    """The verdict for one size from every measured candidate's series."""
    if default not in series:
        raise ValueError(f"no default measurement at size {size}")
    d = series[default]
    best, best_s = default, d
    for label, s in series.items():
        if label != default and s.times_us and s.median_us < best_s.median_us:
            best, best_s = label, s
    if best == default:
        return Verdict(size, d.median_us, default, d.median_us, 0.0, d.spread, 0, len(d.times_us), False)
    gain = d.median_us / best_s.median_us - 1.0 if best_s.median_us > 0 else 0.0
    noise = max(d.spread, best_s.spread)
    wins = paired_wins(d.times_us, best_s.times_us)
    rounds = min(len(d.times_us), len(best_s.times_us))
    p = sign_test_p(wins, rounds)
    claimed = gain > noise and p <= SIGN_TEST_LEVEL
    return Verdict(size, d.median_us, best, best_s.median_us, gain, noise, wins, rounds, claimed, p)


@dataclass
class Band:
    """Consecutive sizes with the same winner."""

    winner: str
    sizes: list[int] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)

    @property
    def lo(self) -> int:
        return self.sizes[0]

    @property
    def hi(self) -> int:
        return self.sizes[-1]

    @property
    def gains(self) -> list[float]:
        """Gain of the band's winner at each size (0 for a default band)."""
        return [v.gain if v.claimed else 0.0 for v in self.verdicts]

    @property
    def min_gain(self) -> float:
        return min(self.gains)

    @property
    def median_gain(self) -> float:
        return statistics.median(self.gains)


def bands(verdicts: Sequence[Verdict]) -> list[Band]:
    """Group sizes (in the order given, ascending) into bands of one winner."""
    out: list[Band] = []
    for v in verdicts:
        if not out or out[-1].winner != v.winner:
            out.append(Band(v.winner))
        out[-1].sizes.append(v.size)
        out[-1].verdicts.append(v)
    return out


def plugin_ranges(band_list: Sequence[Band]) -> list[tuple[int, int]]:
    """Inclusive byte ranges for the bands as a tuner reads them: each band
    from its first measured size up to just below the next band's first
    size, the last one up to its last measured size.  Sizes outside the
    measured range are left to the library (nothing was measured there)."""
    out = []
    for i, b in enumerate(band_list):
        hi = band_list[i + 1].lo - 1 if i + 1 < len(band_list) else b.hi
        out.append((b.lo, hi))
    return out
