"""Per host and per link of the pair phase: which measurements were good or bad, on which rail.

Kept in numpy arrays (a thousand-host round has thousands of groups); only
bad measurements become `Obs` objects, since only they are evidence.  Also
the whole-host view of a rails round (`pair_aggregate`): per pair, the
median of its rails, judged as a measurement of its own.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from .localize import BAD, PARTNER_DEAD, PhaseScan, Recorded, is_fleet
from .round_judge import CONTROL, NO_ANSWER, OK, SLOW, UNJUDGED, WRONG, RoundResult, symptoms
from .scan_schedule import Group, Round

AGGREGATE = "median of rails"


# A record with its groups' hosts a and b, unit, and status codes (health/core/localize.CODE).
_RawRecord = tuple[Recorded, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


@dataclass
class Obs:
    rec: Recorded
    index: int  # group index in its round
    partner: int
    unit: int | None
    status: str
    symptom: str = ""  # what was bad (round_judge.symptoms)


CODE = {OK: 0, SLOW: 1, NO_ANSWER: 2, WRONG: 3, UNJUDGED: 4, CONTROL: 6}  # a control is evidence of nothing
CODE_NAME = {v: k for k, v in CODE.items()} | {5: PARTNER_DEAD}
BAD_CODES = np.array([CODE[s] for s in BAD])


class PairState:
    """Per host and per link: which measurements were good or bad, on which rail.

    Kept in numpy arrays (a thousand-host round has thousands of groups); only
    bad measurements become `Obs` objects, since only they are evidence."""

    # host pairs whose measurements something else explains (`explain`): evidence of nothing here
    explained: frozenset[tuple[int, int]] = frozenset()

    def __init__(self, scan: PhaseScan):
        self.scan = scan
        thr, H = scan.thr, scan.fleet.nhosts
        dead = np.zeros(H, dtype=bool)
        dead[list(scan.dead)] = True
        self.rows = []  # per record: (rec, a, b, unit, status seen by a, status seen by b, status of the link)
        self.partners: dict[int, set[int]] = defaultdict(set)
        self.unjudged: list[str] = []  # why, for each group of a fleet round that was not judged
        nunits = scan.fleet.max_gpus + 1
        raw, tally = self._read_records(scan, H, nunits)
        # A rail slow for many hosts at once is the fabric's, not every node's: a host
        # counts when it was slow on that rail more often than fine, so one bad node
        # (slow with each of its partners once) makes no fabric fault, even in a tournament.
        bad_t, ok_t = tally.reshape(2, nunits, H)
        seen = (bad_t + ok_t > 0).sum(axis=1)
        worse = (bad_t > ok_t).sum(axis=1)
        self.fabric_units = {(None if k == 0 else k - 1): (int(worse[k]), int(seen[k])) for k in range(nunits)
                             if worse[k] >= 8 and worse[k] > thr.fleet_fault_fraction * seen[k]}
        fabric = np.array([-1 if x is None else x for x in self.fabric_units], dtype=np.int64)
        self.ok_partners: dict[int, set[int]] = defaultdict(set)
        self.bad_partners: dict[int, set[int]] = defaultdict(set)
        self.bad_by_node: dict[int, list[Obs]] = defaultdict(list)
        self.bad_by_link: dict[tuple[int, int], list[Obs]] = defaultdict(list)
        measured: set[int] = set()
        answered: set[int] = set()
        verdicts: dict[tuple[int, int, int], tuple[bool, bool, bool]] = {}  # (host, round, partner) -> flags
        for rec, a, b, u, st in raw:
            st = st.copy()
            st[(st == CODE[SLOW]) & np.isin(u, fabric)] = CODE[OK]  # judged in the fabric finding instead
            sa = np.where(dead[b], 5, st)  # a partner that died says nothing about this host
            sb = np.where(dead[a], 5, st)
            self.rows.append((rec, a, b, u, sa, sb, st))
            pair_key, inv, counts = np.unique(a * H + b, return_inverse=True, return_counts=True)
            for view, me, other in ((sa, a, b), (sb, b, a)):
                self._take_view(rec, u, view, me, other, (pair_key, inv, counts), verdicts)
                live = view != 5
                measured.update(int(x) for x in np.unique(me[live]))
                answered.update(int(x) for x in np.unique(me[live & (view != CODE[NO_ANSWER])]))
            for i in np.flatnonzero(np.isin(st, BAD_CODES)):
                link = (int(min(a[i], b[i])), int(max(a[i], b[i])))
                self.bad_by_link[link].append(Obs(rec, int(i), int(b[i]), unit_of(u[i]), CODE_NAME[int(st[i])],
                                                  _symptom(rec, int(i))))
        for (h, _, p), (bad, ok, seen_ok) in verdicts.items():
            if bad:
                self.bad_partners[h].add(p)
            elif ok and seen_ok:
                self.ok_partners[h].add(p)
        self.measured, self.answered = measured, answered
        self._ok_units: dict[int, dict] = {}
        self._convicted: dict[int, set] | None = None
        self.link_suspects = self._link_suspects()

    def _read_records(self, scan: PhaseScan, H: int, nunits: int) -> tuple[list[_RawRecord], np.ndarray]:
        """Each record's (rec, a, b, unit, status codes), and the fleet rounds' tally [bad, ok] per (unit,
        host); the reasons of fleet-round groups not judged go to `unjudged`."""
        tally = np.zeros((2, nunits * H), dtype=np.int64)
        raw = []
        for rec in scan.records:
            a, b, u = group_arrays(rec.round)
            st = np.array([CODE[x] for x in rec.score.status], dtype=np.int8)
            raw.append((rec, a, b, u, st))
            if is_fleet(rec.round):
                if not is_aggregate(rec.round):
                    self.unjudged += [rec.score.why[i] for i in np.flatnonzero(st == CODE[UNJUDGED])]
                for hosts in (a, b):
                    key = (u + 1) * H + hosts
                    tally[0] += np.bincount(key[st == CODE[SLOW]], minlength=nunits * H)
                    tally[1] += np.bincount(key[st == CODE[OK]], minlength=nunits * H)
        return raw, tally

    def _take_view(self, rec: Recorded, u: np.ndarray, view: np.ndarray, me: np.ndarray, other: np.ndarray,
                   pairs: tuple[np.ndarray, np.ndarray, np.ndarray],
                   verdicts: dict[tuple[int, int, int], tuple[bool, bool, bool]]) -> None:
        """One side of a record's groups (`view`: the statuses as `me` sees them, partners `other`): each
        (host, round, partner) measurement's flags into `verdicts`, partners, and the bad observations."""
        pair_key, inv, counts = pairs
        isbad = np.isin(view, BAD_CODES)
        any_bad = np.bincount(inv, weights=isbad, minlength=len(pair_key)) > 0
        n_ok = np.bincount(inv, weights=view == CODE[OK], minlength=len(pair_key))
        n_unjudged = np.bincount(inv, weights=view == CODE[UNJUDGED], minlength=len(pair_key))
        # ok: every group fine or not judged, at least one fine; not judged alone says nothing
        all_ok = (n_ok + n_unjudged == counts) & (n_ok > 0)
        neutral = n_unjudged == counts
        first = np.zeros(len(pair_key), dtype=np.int64)
        first[inv[::-1]] = np.arange(len(inv))[::-1]  # one group index per pair
        for j, i in enumerate(first):
            h, p = int(me[i]), int(other[i])
            self.partners[h].add(p)
            key = (h, rec.round.index, p)  # one measurement: its rails and their median together
            bad0, ok0, seen_ok = verdicts.get(key, (False, True, False))
            verdicts[key] = (bad0 or bool(any_bad[j]), ok0 and bool(all_ok[j] or neutral[j]),
                             seen_ok or bool(all_ok[j]))
        for i in np.flatnonzero(isbad):
            self.bad_by_node[int(me[i])].append(Obs(rec, int(i), int(other[i]), unit_of(u[i]),
                                                     CODE_NAME[int(view[i])], _symptom(rec, int(i))))

    def explain(self, pairs: set[tuple[int, int]]) -> None:
        """The measurements of these host pairs are explained by a component of the fabric (the path
        between their leaves, which the whole-phase model convicts): a bad one is no evidence
        against either host (not a bad partner, not counted toward a host's conviction) and no link
        of its own.  Without this, a host whose pair crossed a slow path and dipped once elsewhere
        was "bad with two partners" (simulated 256 hosts, a path 5 % slow: a host's rails 2 and 3)."""
        if not pairs:
            return
        self.explained = frozenset(pairs)
        for a, b in pairs:
            self.bad_partners[a].discard(b)
            self.bad_partners[b].discard(a)
        self._convicted = None
        self.link_suspects = [link for link in self._link_suspects() if link not in self.explained]

    # -- counts on demand (only hosts and links with bad measurements ask) ---------------------
    def _ok_counts(self, h: int) -> dict:
        if h not in self._ok_units:
            out: dict[object, int] = defaultdict(int)
            for _, a, b, u, sa, sb, _ in self.rows:
                for me, view in ((a, sa), (b, sb)):
                    for x in u[(me == h) & (view == CODE[OK])]:
                        out[unit_of(x)] += 1
            self._ok_units[h] = out
        return self._ok_units[h]

    def _link_ok_counts(self, link: tuple[int, int]) -> dict:
        out: dict[object, int] = defaultdict(int)
        x, y = link
        for _, a, b, u, _, _, st in self.rows:
            sel = (((a == x) & (b == y)) | ((a == y) & (b == x))) & (st == CODE[OK])
            for v in u[sel]:
                out[unit_of(v)] += 1
        return out

    def units_of_node(self, h: int) -> set:
        out: set[int | None] = set()
        for _, a, b, u, *_ in self.rows:
            out.update(unit_of(x) for x in np.unique(u[(a == h) | (b == h)]))
        return out

    def units_of_link(self, x: int, y: int) -> set:
        out: set[int | None] = set()
        for _, a, b, u, *_ in self.rows:
            out.update(unit_of(v) for v in np.unique(u[((a == x) & (b == y)) | ((a == y) & (b == x))]))
        return out

    # -- verdicts -------------------------------------------------------------------------------
    def cleared(self, h: int) -> bool:
        """Shown healthy: all-good with at least as many partners as it was bad with."""
        ok = len(self.ok_partners.get(h, ()))
        return ok >= 1 and ok >= len(self.bad_partners.get(h, ()))

    def cleared_by(self, h: int) -> str:
        names = [self.scan.fleet.hosts[p] for p in sorted(self.ok_partners.get(h, ()))]
        return f"{self.scan.fleet.hosts[h]} is fine with {', '.join(names[:4]) or 'no partner'}"

    def _raw_units(self, h: int, explained: set[int]) -> set:
        """Rails on which h was bad with two different partners, and more often bad (with
        that symptom) than good - not counting measurements with a partner in `explained` (convicted itself)."""
        bad_partners: dict[tuple, set[int]] = defaultdict(set)  # (rail, symptom) -> partners
        bad: dict[tuple, int] = defaultdict(int)  # (rail, symptom) -> bad measurements
        for o in self.bad_by_node.get(h, []):
            if o.partner in explained or (min(h, o.partner), max(h, o.partner)) in self.explained:
                continue
            for part in symptoms(o.symptom):
                bad_partners[(o.unit, part)].add(o.partner)
                bad[(o.unit, part)] += 1
        if not bad:
            return set()
        ok = self._ok_counts(h)
        # more often bad *in the same way* than fine: a latency spike does not add to two bandwidth
        # dips (CI, 2026-11-26: a healthy host's two 29 % busbw figures and a later latency spike
        # outnumbered its two good measurements)
        return {u for (u, part), ps in bad_partners.items() if len(ps) >= 2 and bad[(u, part)] > ok.get(u, 0)}

    def _strength(self, h: int) -> tuple[int, float]:
        """How strongly h's own measurements convict it: bad partners that were shown
        healthy elsewhere, then how far below the reference (no answer counts as far)."""
        obs = self.bad_by_node.get(h, [])
        cleared = len({o.partner for o in obs if self.cleared(o.partner)})
        zs = [o.rec.score.z_bw[o.index] for o in obs]
        z = float(np.median([x if np.isfinite(x) else -1e9 for x in zs])) if zs else 0.0
        return cleared, -z

    def _convictions(self) -> dict[int, set]:
        """Every convicted host -> its rails, strongest evidence first.  A host bad only
        with a partner that is itself convicted is not convicted by that measurement:
        the partner explains it (h5 slow makes the pair (h5, h6) slow; a small dip of
        h6 in the next round must not make h6 a second culprit).  It stays a suspect
        and gets another partner instead."""
        if self._convicted is None:
            candidates = [h for h in self.bad_by_node if self._raw_units(h, set())]
            accepted: dict[int, set] = {}
            for h in sorted(candidates, key=self._strength, reverse=True):
                units = self._raw_units(h, set(accepted))
                if units:
                    accepted[h] = units
            self._convicted = accepted
        return self._convicted

    def confirmed_units(self, h: int) -> set:
        """Rails on which h is convicted (see `_convictions`)."""
        return self._convictions().get(h, set())

    def suspect(self, h: int) -> bool:
        return bool(self.bad_partners.get(h)) and not self.cleared(h) and not self.confirmed_units(h)

    def needs_partner(self, h: int) -> bool:
        return h not in self.measured or self.suspect(h)

    def _link_units(self, link: tuple[int, int]) -> tuple[dict, dict]:
        """((rail, symptom) -> rounds it was bad in, rail -> good measurements)."""
        bad_rounds: dict[tuple, set[int]] = defaultdict(set)
        for o in self.bad_by_link.get(link, []):
            for part in symptoms(o.symptom):
                bad_rounds[(o.unit, part)].add(o.rec.round.index)
        return bad_rounds, self._link_ok_counts(link) if bad_rounds else {}

    def _link_suspects(self) -> list[tuple[int, int]]:
        out = []
        for link in self.bad_by_link:
            a, b = link
            if not (self.cleared(a) and self.cleared(b)):
                continue
            bad_rounds, ok = self._link_units(link)
            if any(len(r) == 1 and not ok.get(u) for (u, _), r in bad_rounds.items()) and \
                    not any(len(r) >= 2 for r in bad_rounds.values()):
                out.append(link)
        return out

    def confirmed_links(self) -> dict[tuple[int, int], set]:
        out = {}
        for link in self.bad_by_link:
            a, b = link
            if link in self.explained or not (self.cleared(a) and self.cleared(b)):
                continue
            bad_rounds, ok = self._link_units(link)
            units = {u for (u, _), r in bad_rounds.items() if len(r) >= 2 and len(r) > ok.get(u, 0)}
            if units:
                out[link] = units
        return out

    def evidence_of(self, h: int) -> list[str]:
        return [self.scan.evidence_line(o.rec, o.index) for o in self.bad_by_node.get(h, [])][:4]


def is_aggregate(rnd: Round) -> bool:
    return rnd.purpose.endswith(AGGREGATE)


def pair_aggregate(rnd: Round, result: RoundResult) -> tuple[Round, RoundResult] | None:
    """The whole-host view of a rails round: one group per pair (all its rails'
    members), busbw and latency the median over the rails, no answer if any rail
    gave none, wrong if any rail was wrong."""
    if is_aggregate(rnd) or not rnd.groups or rnd.groups[0].rail is None:
        return None
    by_pair: dict[tuple[int, ...], list[int]] = defaultdict(list)
    for i, g in enumerate(rnd.groups):
        by_pair[g.hosts].append(i)
    if all(len(idx) == 1 for idx in by_pair.values()):
        return None  # one rail per pair: the rail is the whole host
    groups, n = [], len(by_pair)
    controls = set()
    res = RoundResult.empty(n)
    for j, idx in enumerate(by_pair.values()):
        members = tuple(m for i in idx for m in rnd.groups[i].members)
        groups.append(Group("pairs", members))
        if all(rnd.groups[i] in rnd.controls for i in idx):
            controls.add(groups[-1])
        errs = [result.errors[i] for i in idx if i in result.errors]
        bw = result.busbw[idx]
        if errs or not np.isfinite(bw).all():
            res.errors[j] = errs[0] if errs else "no answer"
            continue
        res.busbw[j] = float(np.median(bw))
        res.lat_us[j] = float(np.median(result.lat_us[idx]))
        res.wrong[j] = int(result.wrong[idx].max())
    return Round(rnd.phase, rnd.index, f"{rnd.purpose} {AGGREGATE}", tuple(groups), frozenset(controls)), res


def _symptom(rec: Recorded, i: int) -> str:
    return rec.score.symptom[i] if rec.score.symptom else ""


def unit_of(x: int | float | np.integer) -> int | None:
    x = int(x)
    return None if x < 0 else x


def group_arrays(rnd: Round) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Host a, host b and rail (-1: whole host) of each pair group of a round (cached)."""
    cached = _ARRAYS.get(id(rnd))
    if cached is not None and cached[0] is rnd:
        return cached[1]
    a = np.array([g.hosts[0] for g in rnd.groups], dtype=np.int64)
    b = np.array([g.hosts[1] for g in rnd.groups], dtype=np.int64)
    u = np.array([-1 if g.rail is None else g.rail for g in rnd.groups], dtype=np.int64)
    if len(_ARRAYS) > 64:
        _ARRAYS.clear()
    _ARRAYS[id(rnd)] = (rnd, (a, b, u))
    return a, b, u


_ARRAYS: dict[int, tuple[Round, tuple]] = {}
