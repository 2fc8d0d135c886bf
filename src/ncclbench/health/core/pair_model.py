"""One model of a scan's pair measurements: which host or link limits them.

The per-round judgement (`round_judge.py`) compares a group with the other groups
of its round.  That fails where one component sits in a large share of the
groups: in a 4-host all-pairs scan one host is in half the pairs, so its slow
pairs are half the fleet and move the median and the MAD with them (every
pair of node2 at 0.47 GB/s against 0.92 GB/s for the others read "healthy").

Here every measurement of the phase (every round, re-run and control) enters
one estimate.  A pair's busbw is limited by its slowest component - either
host's NIC or the link between them - so in log space a pair's value is the
reference plus the lowest of its components' factors.  The estimate is made
one component at a time, the most certain first:

* a host is slow when even its *best* partner's pair sits below the pairs
  that do not hold it (the host common to all slow pairs), or when its pairs
  are consistently the slowest against their rounds (rank evidence, below); a link fault
  leaves its hosts' other pairs fast, so it cannot convict a host; nor can pairs
  of the host that disagree with each other over `round_judge.SCATTER_LIMIT` (a NIC
  limits all its pairs alike; a loaded CPU-backend host's pairs ranged
  0.06-1.2 GB/s in one scan, CI 2026-11-28);
* where the hosts' leaf switches are known (`scan_schedule.Leaves`, `--topology`), then
  the path between two leaves: slow when most pairs crossing it (two host-disjoint ones
  at least) sit below the other pairs of their rounds while their hosts are fast
  elsewhere (`_path_tests`); its pairs are then set aside too;
* once the slow hosts' pairs are set aside, a pair is a slow link when it sits
  below the remaining pairs while both its hosts have a pair among them that
  is not slow (both hosts fast elsewhere).

Confidence: the difference in log busbw over its standard error, where the
noise is the MAD-sigma of the reference pairs (one standard error up, as
`round_judge.robust_reference`), floored at the scan's noise floor
(`Thresholds.bw_floor`, whose sources `Thresholds.floor_source` cites), and
the standard error counts the independent measurements on both sides.  A
component is convicted past `Thresholds.confirm_z`, and only on two
independent measurements (two partners for a host, two rounds for a link),
as every other verdict of the scan.

Rank evidence: the z test assumes the healthy pairs' noise is roughly Gaussian around one
level.  Where it is not, it misses a host that is plainly slowest: 8 fake hosts time-sliced on
one H200 (2026-11-28) put healthy pairs in two modes 20 % apart and moved whole rounds by 25 %, so
the MAD-sigma was 8-9 % and node2, at half the others' link rate, read z -2.5 with its best pair at
0.8x - while its pair was the slowest of its round in 7 of 7 rounds ("8 healthy", exit 0).  So
beside the z test a host is convicted on its ranks, free of any noise distribution: each usable pair
(active, not censored) is set against its round - its log busbw less the median of the other pairs
of that round that do not hold the host (each pair its best round, as above) - and the host's k
pairs are compared with the N pairs without it by the Mann-Whitney U, whose exact null (all k + N
exchangeable: the host like the others) gives the chance of ranks that low (1 / C(N+k, k) when
its pairs are the k slowest).  Against its round, not the pooled values, because a round's level
moves for the whole machine: a pair of the low round beside one of the high round says nothing of
either host.  Not a rank within its round: with the host's pair one of m a round, no chance can
fall below (1/m)^k (6e-5 at 8 hosts, 1.4e-3 at 7), while the pooled ratios compare each of its
pairs with all N.  The others are referred to the median of their round less themselves (leave one
out), so they spread at least as much as the host's pairs do and the chance errs high (seeded
fleets of bimodal noise like the above, 6 to 16 hosts: under 0.04 % of hosts below 1e-3).  A
4-host round has one pair without the host, so the others have no reference: no rank evidence, the
z test alone, as before.  A host is convicted on its ranks when the chance is below RANK_ALPHA
(1e-3, the scan's false-alarm budget) over the number of hosts tested, its factor - the median of
its pairs' ratios to their rounds - is below what the z test needs at the noise floor (floor x
confirm_z: 0.966x on GPUs), and it has at least two such pairs (two partners).  The refusals hold
as for the z test (its reference scatters, its own pairs disagree), and one slow pair (a link) barely
moves a host's ranks.

A measurement can be censored (`upper_bound`): a group that had not finished
when the round's deadline passed gives only an upper bound on its busbw.  It
enters at that bound, which errs toward "faster than it was": it can convict
a component only when even the bound is slow, and it is never part of the
reference another component is compared with (its true value is unknown).

Shared devices: where ranks of different groups share one GPU (fake hosts on one
machine) or one crowded machine's CPUs, a pair's busbw depends on what else ran on
its device in that round (two pairs at 2 ranks a GPU and at 3 ranks a GPU differ by
3 %: 5 fake hosts on 2x H200, 2026-11-28; on a crowded 2-core machine a pair beside
a second busy pair ran 100x slower).  Each measurement carries its `load` (the most
ranks the round ran on one of its devices, 1 where every rank has its own), and a pair
is compared only through pairs measured at the same load: each load class enters
relative to its own median, and a class of fewer than three pairs is not judged.

Consistency: the model explains slow pairs by slow hosts and links.  When pairs that
hold no convicted host and are no confirmed link are as slow as a convicted host's best
pair, the slow pairs do not follow the components (an unsteady machine, or more faults
than the pairs can tell apart): the model then convicts nothing and says so, and the
round-by-round verdicts stand alone (a CPU-backend scan of 6 ranks on 2 busy cores put
4 of its 10 pairs at 0.01x with no host common to them, CI 2026-11-28).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from math import comb, erfc

import numpy as np

from .round_judge import MAD_SE, MAD_TO_SIGMA, SCATTER_LIMIT
from .scan_schedule import Leaves

HOST, LINK, PATH = "host", "link", "path"


@dataclass(frozen=True)
class Measurement:
    """One pair measurement: the two hosts, its busbw, where it was taken."""

    hosts: tuple[int, int]
    busbw: float  # GB/s
    label: str  # "pairs r2" - the round it came from, for the evidence
    upper_bound: bool = False  # censored: the true busbw is below this (a group past the deadline)
    load: int = 1  # the most ranks its round ran on one of its devices (1: every rank its own);
    # CONTROLLED: a later round already divided by its controls (same round, same load), so at the
    # fleet rounds' level: it joins the largest class


@dataclass(frozen=True)
class Conviction:
    """A component the model convicts (confirmed) or suspects (one measurement only)."""

    kind: str  # HOST, PATH or LINK
    hosts: tuple[int, ...]  # () for a path
    factor: float  # its pairs' busbw over the reference pairs' (median)
    z: float  # log difference over its standard error
    confirmed: bool
    measured: float  # GB/s, median of its pairs
    reference: float  # GB/s, median of the reference pairs
    evidence: list[str] = field(default_factory=list)
    best: float = float("nan")  # log busbw of its best measurement (a host: its best pair)
    noise: float = float("nan")  # the log spread it was judged with
    chance: float = float("nan")  # a host convicted on its ranks: the chance of ranks that low were it like the others
    path: tuple[int, int] | None = None  # a path: its two leaves (`Leaves` indices)
    pairs: tuple[tuple[int, int], ...] = ()  # a path: the host pairs crossing it


@dataclass
class ModelResult:
    convictions: list[Conviction]
    notes: list[str]  # what could not be judged, and why


@dataclass
class _Pairs:
    """log busbw per host pair (its best round), the number of rounds that measured it."""

    value: dict[tuple[int, int], float]  # the best round's log busbw
    rounds: dict[tuple[int, int], int]
    censored: set[tuple[int, int]]
    by_round: dict[str, dict[tuple[int, int], float]] = field(default_factory=dict)  # round -> pair -> log busbw


def _collect(measurements: Iterable[Measurement]) -> tuple[_Pairs, list[str]]:
    """The pairs' log busbw: per round the median over its measurements (the rails of one
    pair), then the best round: a pair is slow only when every round measured it slow, so a
    one-off dip in one round (noise) convicts nothing, as a fault must repeat to be named.
    Where the measurements ran at more than one load (shared devices, see the module),
    each enters relative to the median of its load class, and a class of fewer than three
    pairs is left out (said in the notes)."""
    ms = [m for m in measurements if np.isfinite(m.busbw) and m.busbw > 0]
    shift, notes = _load_shifts(ms)
    logs: dict[tuple[int, int], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    censored = set()
    for m in ms:
        if m.load not in shift:
            continue
        key = (min(m.hosts), max(m.hosts))
        logs[key][m.label].append(float(np.log(m.busbw)) - shift[m.load])
        if m.upper_bound:
            censored.add(key)
    value = {k: max(float(np.median(v)) for v in by_round.values()) for k, by_round in logs.items()}
    rounds: dict[str, dict[tuple[int, int], float]] = defaultdict(dict)
    for k, by_round in logs.items():
        for label, v in by_round.items():
            rounds[label][k] = float(np.median(v))
    return _Pairs(value, {k: len(v) for k, v in logs.items()}, censored, dict(rounds)), notes


UPPER_QUANTILE = 75  # percent
MIN_CLASS_PAIRS = 3  # as judge.Thresholds.min_groups: fewer pairs give no median to compare with


CONTROLLED = 0


def _load_shifts(ms: Sequence[Measurement]) -> tuple[dict[int, float], list[str]]:
    """Per load class, what to subtract from its log busbw: 0 where there is one class (every
    rank on its own device: the figures as measured); else the class's upper quartile less the
    largest class's, so values stay in the largest class's GB/s.  Classes of too few pairs are left out."""
    loads = {m.load for m in ms} - {CONTROLLED}
    if len(loads) <= 1:
        return {load: 0.0 for load in loads | {CONTROLLED}}, []
    by_load: dict[int, list[Measurement]] = defaultdict(list)
    for m in ms:
        if m.load != CONTROLLED:
            by_load[m.load].append(m)
    pairs = {load: {tuple(sorted(m.hosts)) for m in v} for load, v in by_load.items()}
    kept = {load for load in by_load if len(pairs[load]) >= MIN_CLASS_PAIRS}
    notes = [f"{len(pairs[load])} pair(s) measured with {load} ranks on one shared device (a GPU or a crowded "
             f"machine's CPUs): too few at that load to compare (pairs are compared only at equal load)"
             for load in sorted(set(by_load) - kept)]
    if not kept:
        return {}, notes
    main = max(kept, key=lambda load: (len(by_load[load]), -load))
    # a class's healthy level is its upper quartile: a fault only lowers a pair, and one slow host
    # sits in up to half a small class's pairs (its median would move with it)
    center = {load: float(np.percentile([np.log(m.busbw) for m in by_load[load] if not m.upper_bound] or [np.nan],
                                        UPPER_QUANTILE))
              for load in kept}
    shift = {load: center[load] - center[main] for load in kept if np.isfinite(center[load])}
    shift[CONTROLLED] = 0.0
    notes.append("ranks share devices (" + ", ".join(f"{len(pairs[load])} pairs at {load} rank(s) a device"
                                                     for load in sorted(kept)) +
                 "): each pair compared with pairs run at the same load")
    return shift, notes


def _noise(values: Sequence[float] | np.ndarray, floor: float) -> tuple[float, float]:
    """(spread used, raw MAD-sigma) of log values: one standard error up, floored."""
    v = np.asarray(values, dtype=float)
    raw = MAD_TO_SIGMA * float(np.median(np.abs(v - np.median(v)))) if v.size else 0.0
    return max(raw * (1 + MAD_SE / np.sqrt(max(v.size, 1))), floor), raw


def _fmt_pairs(pairs: Sequence[tuple[int, int]], p: _Pairs, names: Sequence[str]) -> str:
    return ", ".join(f"{names[a]}+{names[b]} {np.exp(p.value[(a, b)]):.3g}"
                     + (" (upper bound)" if (a, b) in p.censored else "") for a, b in pairs)


def _reference(values: Sequence[float] | np.ndarray, floor: float) -> tuple[float, float] | None:
    """(median, noise) of reference pairs' log busbw; None where they scatter past
    SCATTER_LIMIT (no telling what is normal among them)."""
    s, raw = _noise(values, floor)
    if raw > np.log1p(SCATTER_LIMIT):
        return None
    return float(np.median(values)), s


@dataclass(frozen=True)
class _Active:
    """The active pairs as arrays, so that a reference of thousands of pairs is one numpy call per
    host: each host's pairs (positions, in the order of `pairs`) and the usable (not censored) mask."""

    pairs: list[tuple[int, int]]
    of_host: dict[int, list[int]]
    values: np.ndarray  # log busbw (the best round's) per pair
    usable: np.ndarray  # not censored

    @classmethod
    def of(cls, active: Sequence[tuple[int, int]], p: _Pairs) -> _Active:
        of_host: dict[int, list[int]] = defaultdict(list)
        for i, q in enumerate(active):
            for h in q:
                of_host[h].append(i)
        return cls(list(active), dict(of_host), np.array([p.value[q] for q in active], dtype=float),
                   np.array([q not in p.censored for q in active], dtype=bool))

    def own(self, h: int) -> list[tuple[int, int]]:
        return [self.pairs[i] for i in self.of_host.get(h, ())]

    def others(self, h: int) -> np.ndarray:
        """The log values of the usable pairs without h."""
        keep = self.usable.copy()
        keep[self.of_host.get(h, [])] = False
        return self.values[keep]


def _host_test(h: int, active: _Active, p: _Pairs, floor: float, limit_z: float,
               rounds: dict[str, _Round], ntested: int, names: Sequence[str]) -> Conviction | None:
    """Host h against the pairs without it, convicted (None where not): its best pair over their
    median past limit_z (the z test), or its pairs consistently the slowest (`_rank_test`)."""
    own = active.own(h)
    others = active.others(h)
    if len(own) < 2 or not others.size:
        return None
    reference = _reference(others, floor)
    if reference is None:
        return None
    ref, s = reference
    own_vals = [p.value[q] for q in own]
    if _noise(own_vals, 0.0)[1] > np.log1p(SCATTER_LIMIT):
        return None  # its own pairs disagree: not one slow NIC (a NIC limits all its pairs alike)
    best = max(own_vals)
    z = (best - ref) / (s * np.sqrt(1.0 + 1.0 / len(others)))
    measured = float(np.exp(np.median([p.value[q] for q in own])))
    if z < -limit_z:
        factor = float(np.exp(best - ref))
        line = (f"{names[h]}: {len(own)} of {len(own)} pairs at {factor:.2f}x or less of the others' pairs "
                f"(its pairs: {_fmt_pairs(own, p, names)} GB/s; the {len(others)} pair(s) without it: median "
                f"{np.exp(ref):.3g} GB/s, noise {s:.1%}; best pair z {z:+.1f})")
        return Conviction(HOST, (h,), factor, float(z), True, measured, float(np.exp(ref)), [line], best, s)
    rank = _rank_test(h, rounds, floor * limit_z)
    if rank is None or rank.chance >= RANK_ALPHA / max(ntested, 1):
        return None
    line = (f"{names[h]}: {rank.text(names[h])} (chance {_one_in(rank.chance)} were it like the others), at "
            f"{np.exp(rank.factor):.2f}x of their rounds' medians (each pair against the pairs of its round "
            f"without {names[h]}); its best pair alone is short of the limit (z {z:+.1f} against the noise {s:.1%} "
            f"of the {len(others)} pair(s) without it), but its pairs are consistently the slowest (false-alarm "
            f"budget {RANK_ALPHA:g} over the {ntested} hosts; its pairs: {_fmt_pairs(own, p, names)} GB/s)")
    return Conviction(HOST, (h,), float(np.exp(rank.factor)), float(z), True, measured, float(np.exp(ref)), [line],
                      best, s, rank.chance)


RANK_ALPHA = 1e-3  # the rank evidence's false-alarm budget per scan, shared among the hosts tested (Bonferroni)


@dataclass(frozen=True)
class _Round:
    """One round's usable pairs (active, not censored): their log busbw, sorted, and each one's index."""

    pairs: list[tuple[int, int]]
    values: np.ndarray
    index: dict[tuple[int, int], int]
    loo: np.ndarray  # per pair, the median of the round's other pairs (nan where it is alone)
    by_host: dict[int, list[int]] = field(default_factory=dict)  # host -> indices of its pairs, in order


def _rounds(active: Sequence[tuple[int, int]], p: _Pairs) -> dict[str, _Round]:
    """The rounds of the usable pairs (active, not censored), for the rank evidence."""
    usable = set(active) - p.censored
    out = {}
    for label, by_pair in p.by_round.items():
        pairs = [q for q in by_pair if q in usable]
        if not pairs:
            continue
        values = np.array([by_pair[q] for q in pairs])
        by_host: dict[int, list[int]] = defaultdict(list)
        for i, q in enumerate(pairs):
            for h in q:
                by_host[h].append(i)
        out[label] = _Round(pairs, values, {q: i for i, q in enumerate(pairs)}, _loo_medians(values), dict(by_host))
    return out


def _loo_medians(values: np.ndarray) -> np.ndarray:
    """For each value, the median of the others (nan for a lone value)."""
    n = values.size
    if n < 2:
        return np.full(n, np.nan)
    order = np.argsort(values, kind="stable")
    s = values[order]
    rank = np.empty(n, dtype=int)
    rank[order] = np.arange(n)

    def reduced(j: int) -> np.ndarray:  # the j-th smallest of the others, per value
        return np.where(rank > j, s[j], s[min(j + 1, n - 1)])

    m = n - 1
    if m % 2:
        return reduced(m // 2)
    return (reduced(m // 2 - 1) + reduced(m // 2)) / 2


@dataclass(frozen=True)
class _Rank:
    """The rank evidence of one host: its pairs' log ratios to their rounds against the others'."""

    own: np.ndarray  # its pairs' log ratios (each to the median of its round's pairs without the host)
    others: np.ndarray  # the pairs without it, each to the median of its round's other pairs without the host
    chance: float  # P(its pairs rank this low | exchangeable with the others): Mann-Whitney, exact
    factor: float  # the median of `own`: how slow it typically is against its rounds

    def text(self, name: str) -> str:
        k, n = self.own.size, self.own.size + self.others.size
        ranks = sorted(1 + int(np.sum(self.others < v)) + int(np.sum(self.own < v)) for v in self.own)
        if ranks == list(range(1, k + 1)) and not np.any(self.others <= self.own.max()):
            return f"its {k} pairs are the {k} slowest of {n}"
        return f"its {k} pairs rank {', '.join(map(str, ranks[:-1]))} and {ranks[-1]} of {n}, slowest first"


def _rank_test(h: int, rounds: dict[str, _Round], gate: float) -> _Rank | None:
    """Host h's rank evidence (the module's docstring), or None where it has fewer than two
    pairs with a round reference, or its pairs are not `gate` (log) slower than their rounds."""
    own: dict[tuple[int, int], float] = {}
    for rnd in rounds.values():
        for i in rnd.by_host.get(h, ()):
            if np.isfinite(rnd.loo[i]):
                q = rnd.pairs[i]
                own[q] = max(own.get(q, -np.inf), float(rnd.values[i] - rnd.loo[i]))  # its best round
    if len(own) < 2:
        return None
    factor = float(np.median(list(own.values())))
    if factor >= -gate:
        return None  # not slow enough to matter at the scan's noise floor (the magnitude a z conviction needs)
    others: dict[tuple[int, int], float] = {}
    for rnd in rounds.values():
        keep = np.array([h not in q for q in rnd.pairs])
        if keep.sum() < 2:
            continue
        vals = rnd.values[keep]
        for q, r in zip([q for q in rnd.pairs if h not in q], vals - _loo_medians(vals)):
            others[q] = max(others.get(q, -np.inf), float(r))
    if not others:
        return None
    mine, theirs = np.array(list(own.values())), np.array(list(others.values()))
    # ties counted against the conviction: each of its pairs above every other pair at or below it
    u = int(np.sum(theirs[None, :] <= mine[:, None]))
    return _Rank(mine, theirs, _mann_whitney_tail(mine.size, theirs.size, u), factor)


def _mann_whitney_tail(k: int, n: int, u: int) -> float:
    """P(U <= u) for the Mann-Whitney U of k values against n (the count of (its, other) pairs where
    its value is the larger) when all k + n are exchangeable: the coefficients of the Gaussian
    binomial [n + k choose k]_q, prod_i (1 - q^(n+i)) / (1 - q^i), up to degree u, over C(n + k, k)."""
    if u >= k * n:
        return 1.0
    coef = [1] + [0] * u
    for i in range(1, k + 1):
        for d in range(u, n + i - 1, -1):  # times (1 - q^(n+i))
            coef[d] -= coef[d - n - i]
        for d in range(i, u + 1):  # over (1 - q^i)
            coef[d] += coef[d - i]
    return min(1.0, sum(coef) / comb(n + k, k))


def _one_in(chance: float) -> str:
    """'1 in 1.2 million', as a user reads a small chance."""
    x = 1.0 / max(chance, 1e-300)
    for scale, word in ((1e12, "trillion"), (1e9, "billion"), (1e6, "million")):
        if x >= scale:
            return f"1 in {x / scale:.2g} {word}"
    return f"1 in {x:,.0f}"


def _link_test(q: tuple[int, int], active: list[tuple[int, int]], p: _Pairs, floor: float, limit_z: float,
               names: Sequence[str]) -> Conviction | None:
    """Pair q against the other pairs, where both its hosts have a pair among them that is not slow."""
    others = [r for r in active if r != q and r not in p.censored]
    if len(others) < 2:
        return None
    reference = _reference([p.value[r] for r in others], floor)
    if reference is None:
        return None
    ref, s = reference
    n = p.rounds[q]
    z = (p.value[q] - ref) / (s * np.sqrt(1.0 / n + 1.0 / len(others)))
    if z >= -limit_z:
        return None
    a, b = q
    fine = {h: [r for r in others if h in r and (p.value[r] - ref) / s > -limit_z] for h in q}
    if not fine[a] or not fine[b]:
        return None
    factor = float(np.exp(p.value[q] - ref))
    line = (f"{names[a]} <-> {names[b]}: {np.exp(p.value[q]):.3g} GB/s over {n} round(s), {factor:.2f}x the "
            f"median of the other {len(others)} pairs ({np.exp(ref):.3g} GB/s, noise {s:.1%}, z {z:+.1f}); "
            f"both hosts fast elsewhere: {_fmt_pairs(fine[a][:2], p, names)}; {_fmt_pairs(fine[b][:2], p, names)}")
    if n < 2:
        line += "; measured in one round only: not confirmed"
    return Conviction(LINK, q, factor, float(z), n >= 2, float(np.exp(p.value[q])), float(np.exp(ref)), [line],
                      p.value[q], s)


def _link_candidates(active: Sequence[tuple[int, int]], p: _Pairs, floor: float,
                     limit_z: float) -> list[tuple[int, int]]:
    """The active pairs `_link_test` could convict, in their order: it needs a pair below the median
    of the others by limit_z standard errors, and its noise is the floor at least, so a pair not
    that far below even with the floor as the noise is passed over (the same verdicts; a
    thousand-host scan holds thousands of pairs, and each test takes the median of all the others)."""
    usable = [q for q in active if q not in p.censored]
    if len(usable) < 2:
        return []
    vals = np.array([p.value[q] for q in usable])
    loo = dict(zip(usable, _loo_medians(vals)))
    whole = float(np.median(vals))
    out = []
    for q in active:
        m = len(usable) - (q in loo)
        if m < 2:
            continue
        ref = loo.get(q, whole)
        if p.value[q] - ref < -limit_z * floor * np.sqrt(1.0 / p.rounds[q] + 1.0 / m) + 1e-9:
            out.append(q)
    return out


def judge_pairs(measurements: Iterable[Measurement], hosts: Sequence[int], names: Sequence[str],
                floor: float, limit_z: float, leaves: Leaves | None = None) -> ModelResult:
    """The slow hosts, then the slow paths between leaves (where `leaves` are known), then the slow
    links of a pair phase (see the module docstring).  hosts: the hosts the phase measured;
    names: index -> host name."""
    p, notes = _collect(measurements)
    active = sorted(p.value)
    out: list[Conviction] = []
    convicted: set[int] = set()
    ntested = len(hosts)
    while True:
        rounds = _rounds(active, p)
        arrays = _Active.of(active, p)
        tests = [c for h in hosts if h not in convicted
                 if (c := _host_test(h, arrays, p, floor, limit_z, rounds, ntested, names)) is not None]
        if not tests:
            break
        # the slowest first: a z conviction by its z, then one on ranks alone by its chance
        worst = min(tests, key=lambda c: (0, c.z) if c.z < -limit_z else (1, c.chance))
        out.append(worst)
        convicted.add(worst.hosts[0])
        active = [q for q in active if worst.hosts[0] not in q]
    if leaves is not None:
        paths = _path_tests(active, p, leaves, floor, limit_z, names)
        out.extend(paths)
        crossed = {c.path for c in paths}
        active = [q for q in active if leaves.path(*q) not in crossed]  # explained by their path
    for q in _link_candidates(active, p, floor, limit_z):
        c = _link_test(q, active, p, floor, limit_z, names)
        if c is not None:
            out.append(c)
    if len(active) < 3:
        notes.append(f"{len(active)} host pair(s) left to compare with each other: too few to tell a slow host "
                     "or link from the rest (a baseline or the line rate would judge them)")
    unexplained = _unexplained(out, active, p, limit_z, names)
    if unexplained:
        notes.append(unexplained)
        return ModelResult([], notes)
    return ModelResult(out, notes)


def _unexplained(out: Sequence[Conviction], active: Sequence[tuple[int, int]], p: _Pairs, limit_z: float,
                 names: Sequence[str]) -> str:
    """Why the convictions do not explain the slow pairs ("" when they do): pairs that hold no
    convicted host and are no confirmed link, slow in themselves and as slow as a convicted
    component's measurement (both within limit_z of its noise)."""
    explained = {c.hosts for c in out if c.kind == LINK and c.confirmed}
    free = [q for q in active if q not in explained and q not in p.censored]
    worst = ""
    for c in out:
        if not c.confirmed or not (np.isfinite(c.best) and np.isfinite(c.noise)):
            continue
        level = c.best + limit_z * c.noise  # as slow as it: within the limit of its best measurement
        slow = np.log(c.reference) - limit_z * c.noise  # and slow in itself
        alike = sorted((q for q in free if q != c.hosts and p.value[q] <= min(level, slow)), key=lambda q: p.value[q])
        if alike:
            who = (names[c.hosts[0]] if c.kind == HOST else c.evidence[0].split(":", 1)[0] if c.kind == PATH
                   else " <-> ".join(names[h] for h in c.hosts))
            worst = (f"pairs model not judged: {who} measured {np.exp(c.best):.3g} GB/s at best, but "
                     f"{len(alike)} pair(s) without a convicted host were as slow ({_fmt_pairs(alike[:3], p, names)} "
                     f"GB/s): the slow pairs do not follow one host or link (an unsteady machine, or more faults "
                     f"than the pairs tell apart); the round-by-round verdicts stand")
            break
    return worst


# -- paths between leaves ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _PathContext:
    """What every path of one scan is judged with (`_path_tests`): the usable pairs (active, not
    censored) in one order, their best-round log busbw, and each round's pairs as positions in it."""

    pairs: list[tuple[int, int]]
    best: np.ndarray  # per pair: its best round's log busbw (`_Pairs.value`)
    rounds: list[tuple[np.ndarray, np.ndarray]]  # per round: (positions of its usable pairs, their log busbw)
    by_host: dict[int, list[int]]  # host -> positions of its pairs
    floor: float
    limit_z: float  # one pair's limit (fast elsewhere)
    limit: float  # the z a path's median must pass
    p: _Pairs
    leaves: Leaves
    names: Sequence[str]


def _path_tests(active: Sequence[tuple[int, int]], p: _Pairs, leaves: Leaves, floor: float, limit_z: float,
                names: Sequence[str]) -> list[Conviction]:
    """The paths between leaves that their crossing pairs say are slow.

    For each path, each usable pair (active, not censored) is set against its round: its log
    busbw less the median of that round's usable pairs that do not cross the path, its best
    round (a fault repeats).  A round's level moves for the whole machine, and one round holds a
    path's crossing pairs together (`scan_schedule.leaf_rounds`), so pooled figures would take a
    slow round for a slow path.  A round with fewer than MIN_CLASS_PAIRS such pairs (a small
    fleet's round of every pair) is set against all of them, pooled (their best rounds' median).
    The pairs not crossing the path are the reference: their spread (MAD-sigma one standard error
    up, floored at the scan's floor) is the noise s of one pair; scattered past SCATTER_LIMIT,
    the path is not judged.

    A path limits every pair crossing it alike, so its figure is the median of its k crossing
    pairs, whose standard error is s x sqrt(pi/2 x (1/k + 1/n)) against the n reference pairs (the
    median's; pi/2 errs high for few pairs).  It is convicted when that median is below the
    reference by more than the limit: limit_z, or more where many paths are tested, the Gaussian
    tail that leaves RANK_ALPHA (the scan's false-alarm budget, 1e-3) over the number of paths (4.0
    for the 28 paths of 8 leaves, 4.6 for the 496 of 32); when more than half of its crossing pairs
    sit below half that median (the shortfall is shared, not one or two slow pairs pulling a mean);
    and when at least two of those share no host and have both hosts fast elsewhere (a reference
    pair not below limit_z x s x sqrt(1 + 1/n)): two independent measurements, as every verdict of
    the scan needs, and not a host's fault (hosts convicted before are out of `active` already).
    One slow pair among several crossing a path is no path: a link, judged after."""
    pairs = [q for q in sorted(active) if q not in p.censored]
    crossing: dict[tuple[int, int], list[int]] = defaultdict(list)
    by_host: dict[int, list[int]] = defaultdict(list)
    for i, q in enumerate(pairs):
        path = leaves.path(*q)
        if path is not None:
            crossing[path].append(i)
        for h in q:
            by_host[h].append(i)
    tested = {path: idx for path, idx in crossing.items() if len(idx) >= 2}
    if not tested or len(pairs) < MIN_CLASS_PAIRS + 2:
        return []
    position = {q: i for i, q in enumerate(pairs)}
    rounds = []
    for by_pair in p.by_round.values():
        idx = [position[q] for q in by_pair if q in position]
        if idx:
            rounds.append((np.array(idx), np.array([by_pair[pairs[i]] for i in idx])))
    ctx = _PathContext(pairs, np.array([p.value[q] for q in pairs]), rounds, dict(by_host), floor, limit_z,
                       max(limit_z, _tail_z(RANK_ALPHA / len(tested))), p, leaves, names)
    return [c for path, idx in sorted(tested.items()) if (c := _path_test(path, np.array(idx), ctx)) is not None]


def _tail_z(chance: float) -> float:
    """z with Phi(-z) = chance (bisection on erfc)."""
    lo, hi = 0.0, 40.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if 0.5 * erfc(mid / np.sqrt(2.0)) > chance else (lo, mid)
    return hi


def _relative(ctx: _PathContext, crossing: np.ndarray) -> np.ndarray:
    """Per usable pair: its best log ratio to its round's pairs that are not `crossing` (positions);
    to all those pairs pooled where the round holds fewer than MIN_CLASS_PAIRS of them."""
    out_of = np.zeros(len(ctx.pairs), dtype=bool)
    out_of[crossing] = True
    pooled = float(np.median(ctx.best[~out_of]))
    rel = np.full(len(ctx.pairs), -np.inf)
    for idx, values in ctx.rounds:
        keep = ~out_of[idx]
        level = float(np.median(values[keep])) if keep.sum() >= MIN_CLASS_PAIRS else pooled
        np.maximum.at(rel, idx, values - level)
    return rel


def _path_test(path: tuple[int, int], crossing: np.ndarray, ctx: _PathContext) -> Conviction | None:
    """One path (`_path_tests`): its crossing pairs against their rounds' pairs not crossing it."""
    rel = _relative(ctx, crossing)
    others = np.ones(len(ctx.pairs), dtype=bool)
    others[crossing] = False
    reference = _reference(rel[others], ctx.floor)
    if reference is None:
        return None
    center, s = reference
    n, k = int(others.sum()), len(crossing)
    mine = rel[crossing] - center
    median = float(np.median(mine))
    z = median / (s * np.sqrt(np.pi / 2 * (1.0 / k + 1.0 / n)))
    low = [int(i) for i, v in zip(crossing, mine) if v < median / 2]
    if z >= -ctx.limit or 2 * len(low) <= k:
        return None
    fine = others & (rel - center >= -ctx.limit_z * s * np.sqrt(1.0 + 1.0 / n))
    fast = {h: [j for j in ctx.by_host.get(h, ()) if fine[j]] for i in low for h in ctx.pairs[i]}
    independent: list[tuple[int, int]] = []
    for i in low:  # host-disjoint low pairs whose hosts are both fast elsewhere
        q = ctx.pairs[i]
        if fast[q[0]] and fast[q[1]] and not any(set(q) & set(r) for r in independent):
            independent.append(q)
    if len(independent) < 2:
        return None
    return _path_conviction(path, crossing, ctx, (median, z, s, len(low)), independent, fast)


def _path_conviction(path: tuple[int, int], crossing: np.ndarray, ctx: _PathContext,
                     figures: tuple[float, float, float, int], independent: list[tuple[int, int]],
                     fast: dict[int, list[int]]) -> Conviction:
    """A convicted path, with its evidence: how many crossing pairs, how far below, the hosts fast
    elsewhere, and every crossing pair's figure."""
    median, z, s, nlow = figures
    p, names, pairs = ctx.p, ctx.names, ctx.pairs
    mine = [pairs[i] for i in crossing]
    others = np.ones(len(pairs), dtype=bool)
    others[crossing] = False
    ref = float(np.median(ctx.best[others]))
    name = ctx.leaves.path_name(path)

    def partner(h: int, j: int) -> str:
        a, b = pairs[j]
        return names[b if a == h else a]

    elsewhere = "; ".join(f"{names[a]}+{names[b]}: {names[a]} fine with {partner(a, fast[a][0])} and {names[b]} "
                          f"with {partner(b, fast[b][0])}" for a, b in independent[:2])
    lines = [f"path {name}: {nlow} of {len(mine)} pairs crossing it at {np.exp(median):.2f}x of their rounds' other "
             f"pairs (median; z {z:+.1f} for the median of {len(mine)} at a noise of {s:.1%} a pair, limit "
             f"{-ctx.limit:.1f}), {len(independent)} of them with no host in common and both hosts fast elsewhere "
             f"({elsewhere}): the path, not the hosts",
             f"pairs crossing {name}: {_fmt_pairs(sorted(mine, key=lambda q: p.value[q]), p, names)} GB/s "
             f"(the other pairs: median {np.exp(ref):.3g} GB/s)"]
    logs = [p.value[q] for q in mine]
    return Conviction(PATH, (), float(np.exp(median)), float(z), True, float(np.exp(np.median(logs))),
                      float(np.exp(ref)), lines, float(np.median(logs)), s, path=path, pairs=tuple(sorted(mine)))
