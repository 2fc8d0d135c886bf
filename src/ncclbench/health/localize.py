"""The rounds of one phase, from the fleet-wide first round to a verdict.

Every fault is confirmed by a second, independent measurement before it is
named (run-to-run noise makes one bad number in a thousand-group round
likely; two in a row on the same component are not):

* `RepeatScan` (local, intra, rail phases): round 1 measures every group;
  round 2 runs the groups that looked bad again, on a new communicator.
* `PairScan` (pairs phase): round 1 puts every host in a disjoint pair.  A
  bad pair (a, b) cannot say which side is at fault, so round 2 pairs a and
  b each with a distinct host already shown healthy.  A host bad with two
  different partners is at fault (its NIC, on the rails that were slow); if
  both come out clean, the path between them is the suspect, and round 3
  runs (a, b) again: bad twice is a slow link.  So a fault is pinned to a
  node, a NIC rail or a link in at most three rounds whatever the fleet
  size.  A host left out of round 1 (odd count) is paired with a healthy
  host in round 2.  With `all_pairs`, the rounds are a round-robin
  tournament (every pair once) and one more round re-runs suspect links.

References come from the fleet round(s) of the phase, per group shape;
later rounds are judged against them (they hold too few groups to make
their own).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .findings import (
    FLEET,
    GPU,
    LINK,
    NO_ANSWER_C,
    NO_ANSWER_V,
    NODE_INTRA,
    NODE_NIC,
    RAIL,
    SLOW_V,
    SUSPECT_V,
    UNJUDGED_V,
    WRONG_V,
    Finding,
)
from .fleet import Fleet
from .judge import (
    NO_ANSWER,
    OK,
    SLOW,
    UNJUDGED,
    WRONG,
    Baseline,
    References,
    RoundResult,
    Score,
    Thresholds,
    fleet_shift,
    percent_of,
    references,
    score,
)
from .schedule import Group, Round, disjoint_pairs, make_round, pair_groups, round_robin

BAD = (SLOW, NO_ANSWER, WRONG)
DEFAULT_THRESHOLDS = Thresholds()
_PARTNER_DEAD = "partner died"
_VERDICT = {SLOW: SLOW_V, NO_ANSWER: NO_ANSWER_V, WRONG: WRONG_V}


@dataclass
class Recorded:
    round: Round
    result: RoundResult
    score: Score


class _Scan:
    """What both scans share: references per shape from the fleet round, scoring, dead hosts."""

    def __init__(self, fleet: Fleet, phase: str, thr: Thresholds, baseline: Baseline | None,
                 expected: Mapping[str, float] | None):
        self.fleet, self.phase, self.thr = fleet, phase, thr
        self.baseline, self.expected = baseline, expected
        self.records: list[Recorded] = []
        self.refs: dict[str, References] = {}
        self.dead: dict[int, str] = {}  # host -> what the runtime saw (rank, pid)

    def mark_dead(self, host: int, why: str) -> None:
        """The runtime saw this host's process die: leave it out of later rounds."""
        self.dead.setdefault(host, why)

    def _update_refs(self) -> None:
        """References per shape from every fleet round so far (one round, or the
        whole tournament of all pairs)."""
        fleet = [r for r in self.records if _is_fleet(r.round)]
        shapes = dict.fromkeys(g.shape for r in fleet for g in r.round.groups)
        for shape in shapes:
            bw, lat = [], []
            for rec in fleet:
                idx = [i for i, g in enumerate(rec.round.groups) if g.shape == shape]
                bw.append(rec.result.busbw[idx])
                lat.append(rec.result.lat_us[idx])
            self.refs[shape] = references(np.concatenate(bw), np.concatenate(lat), shape, self.thr, self.baseline)

    def _score(self, rnd: Round, result: RoundResult) -> Score:
        limit = self.thr.suspect_z if _is_fleet(rnd) else self.thr.confirm_z
        shapes = [g.shape for g in rnd.groups]
        n = len(rnd.groups)
        out = Score([UNJUDGED] * n, np.full(n, np.nan), np.full(n, np.nan), [""] * n)
        for shape in dict.fromkeys(shapes):
            idx = np.array([i for i, s in enumerate(shapes) if s == shape])
            sub = RoundResult(result.busbw[idx], result.lat_us[idx], result.wrong[idx],
                              {j: result.errors[int(i)] for j, i in enumerate(idx) if int(i) in result.errors})
            sc = score(sub, self.refs.get(shape) or References(None, None), limit, self.thr.gross_fraction)
            for j, i in enumerate(idx):
                out.status[i], out.why[i] = sc.status[j], sc.why[j]
                out.z_bw[i], out.z_lat[i] = sc.z_bw[j], sc.z_lat[j]
        return out

    def record(self, rnd: Round, result: RoundResult) -> None:
        rec = Recorded(rnd, result, None)  # type: ignore[arg-type]
        self.records.append(rec)
        if _is_fleet(rnd):
            self._update_refs()
            for r in self.records:  # earlier rounds against the grown reference
                r.score = self._score(r.round, r.result)
        else:
            rec.score = self._score(rnd, result)

    def _evidence(self, rec: Recorded, i: int) -> str:
        why = rec.score.why[i] or f"busbw {rec.result.busbw[i]:.4g} GB/s, z {rec.score.z_bw[i]:+.1f} (ok)"
        return f"{rec.round.name}: {rec.round.groups[i].label(self.fleet)}: {why}"

    def _fleet_notes(self) -> list[Finding]:
        out = []
        for shape, refs in self.refs.items():
            line = fleet_shift(refs, self.thr, shape)
            if line and refs.busbw is not None and refs.base_busbw is not None:
                out.append(Finding(FLEET, (), SLOW_V, shape, refs.busbw.center, refs.base_busbw.center,
                                   None, evidence=[line]))
        return out

    def _unjudged_note(self, count: int) -> list[Finding]:
        if not count:
            return []
        return [Finding(FLEET, (), UNJUDGED_V, f"{self.phase} phase",
                        evidence=[f"{self.phase}: {count} group(s) not judged: fewer than {self.thr.min_groups} "
                                  "groups of their shape answered and no baseline was given"])]

    def _pct(self, shape: str, value: float | None) -> float | None:
        return None if value is None else percent_of(self.expected, shape, value)


class RepeatScan(_Scan):
    """local / intra / rail: measure every group, then re-run the ones that looked bad."""

    def __init__(self, fleet: Fleet, phase: str, groups: Sequence[Group], thr: Thresholds = DEFAULT_THRESHOLDS,
                 baseline: Baseline | None = None, expected: Mapping[str, float] | None = None):
        super().__init__(fleet, phase, thr, baseline, expected)
        self.groups = list(groups)

    def next_round(self) -> Round | None:
        if not self.groups or len(self.records) >= 2:
            return None
        if not self.records:
            return make_round(self.phase, 1, "fleet", self.groups)
        first = self.records[0]
        again = []
        for g, bad in zip(first.round.groups, first.score.bad()):
            if not bad:
                continue
            if self.phase == "rail":  # a dead host leaves the rail; the rest runs again
                members = tuple(m for m in g.members if m[0] not in self.dead)
                if len(members) >= 2:
                    again.append(Group(g.phase, members, g.rail))
            elif not set(g.hosts) & set(self.dead):
                again.append(g)
        return make_round(self.phase, 2, "confirm", again) if again else None

    def _key(self, g: Group) -> object:
        return ("rail", g.rail) if self.phase == "rail" else g

    def findings(self) -> list[Finding]:
        if not self.records:
            return []
        first = self.records[0]
        second: dict[object, tuple[Recorded, int]] = {}
        for rec in self.records[1:]:
            for i, g in enumerate(rec.round.groups):
                second[self._key(g)] = (rec, i)
        out: list[Finding] = []
        unjudged = 0
        for i, g in enumerate(first.round.groups):
            status = first.score.status[i]
            if status == UNJUDGED:
                unjudged += 1
                continue
            if status not in BAD:
                continue
            evidence = [self._evidence(first, i)]
            dead = [h for h in g.hosts if h in self.dead]
            if dead and self.phase != "rail":
                out.append(Finding(NO_ANSWER_C, (self.fleet.hosts[dead[0]],), NO_ANSWER_V,
                                   evidence=evidence + [self.dead[dead[0]]]))
                continue
            if self._key(g) in second:
                rec, j = second[self._key(g)]
                evidence.append(self._evidence(rec, j))
                status2 = rec.score.status[j]
                verdict = _VERDICT.get(status2) if status2 in BAD else None
                values = [first.result.busbw[i], rec.result.busbw[j]]
                zs = [first.score.z_bw[i], rec.score.z_bw[j]]
            else:
                verdict, values, zs = SUSPECT_V, [first.result.busbw[i]], [first.score.z_bw[i]]
                evidence.append("not measured again (no confirmation round ran)")
            if verdict is None:
                continue  # not reproduced on a fresh communicator: noise, not a fault
            out.append(self._finding(g, verdict, values, zs, evidence))
        return out + self._fleet_notes() + self._unjudged_note(unjudged)

    def _finding(self, g: Group, verdict: str, values: list[float], zs: list[float],
                 evidence: list[str]) -> Finding:
        refs = self.refs.get(g.shape)
        expected = refs.busbw.center if refs and refs.busbw else None
        finite = [v for v in values if np.isfinite(v)]
        measured = float(np.median(finite)) if finite else None
        zf = [z for z in zs if np.isfinite(z)]
        z = float(np.median(zf)) if zf else None
        host = self.fleet.hosts[g.hosts[0]]
        hosts: tuple[str, ...]
        if self.phase == "local":
            comp, hosts, detail = GPU, (host,), f"gpu {g.members[0][1]}"
        elif self.phase == "intra":
            comp, hosts, detail = NODE_INTRA, (host,), f"{len(g.members)} GPUs"
        else:
            comp, hosts, detail = RAIL, (), f"rail {g.rail}"
        if verdict == NO_ANSWER_V and self.phase in ("local", "intra"):
            comp = NO_ANSWER_C
        return Finding(comp, hosts, verdict, detail, measured, expected, z, evidence=evidence,
                       pct_expected=self._pct(g.shape, measured))

    def tested_hosts(self) -> set[int]:
        out: set[int] = set()
        for rec in self.records:
            for i, g in enumerate(rec.round.groups):
                if np.isfinite(rec.result.busbw[i]):
                    out.update(g.hosts)
        return out


@dataclass
class _Obs:
    rec: Recorded
    index: int  # group index in its round
    partner: int
    unit: int | None
    status: str


class PairScan(_Scan):
    """pairs: disjoint pairs, then re-pairing with healthy hosts (or all pairs on request)."""

    def __init__(self, fleet: Fleet, thr: Thresholds = DEFAULT_THRESHOLDS, shape: str = "rails", max_rounds: int = 3,
                 all_pairs: bool = False, baseline: Baseline | None = None,
                 expected: Mapping[str, float] | None = None, hosts: Sequence[int] | None = None):
        super().__init__(fleet, "pairs", thr, baseline, expected)
        self.shape, self.max_rounds, self.all_pairs = shape, max_rounds, all_pairs
        self.hosts = list(range(fleet.nhosts)) if hosts is None else list(hosts)
        self.tournament = round_robin(self.hosts) if all_pairs else None

    def _update_refs(self) -> None:
        """As for every phase, but a fleet statistic needs `min_groups` different
        host pairs: the rails of one pair compared with each other say nothing
        about which host is slow (two hosts alone are judged by a baseline or not at all)."""
        super()._update_refs()
        pairs: dict[str, set] = defaultdict(set)
        for rec in self.records:
            if _is_fleet(rec.round):
                for g in rec.round.groups:
                    pairs[g.shape].add(g.hosts)
        for shape, refs in list(self.refs.items()):
            if len(pairs[shape]) < self.thr.min_groups and refs.busbw is not None and refs.busbw.source == "fleet":
                self.refs[shape] = References(refs.base_busbw, refs.base_lat_us, refs.base_busbw, refs.base_lat_us)

    def record(self, rnd: Round, result: RoundResult) -> None:
        """A rails round also yields one whole-host measurement per pair: the median
        of its rails.  Judged against the fleet's pair medians (a reference of its
        own), it is what convicts a node whose every NIC is a little slow - one rail
        alone can miss the threshold by noise, the median of eight rarely does."""
        super().record(rnd, result)
        agg = _pair_aggregate(rnd, result)
        if agg is not None:
            super().record(*agg)

    # -- planning --------------------------------------------------------------------------
    def next_round(self) -> Round | None:
        if len(self.hosts) < 2:
            return None
        k = len({id(r.round) for r in self.records if not _is_aggregate(r.round)})
        if self.tournament is not None:
            if k < len(self.tournament):
                pairs = [(a, b) for a, b in self.tournament[k] if a not in self.dead and b not in self.dead]
                return self._round(k + 1, "fleet", pairs)
            if k > len(self.tournament):
                return None
            pairs = [p for p in self._state().link_suspects if not set(p) & set(self.dead)]
            return self._round(k + 1, "confirm", pairs)
        if k == 0:
            pairs, _ = disjoint_pairs(self.hosts)
            return self._round(1, "fleet", pairs)
        if k >= self.max_rounds:
            return None
        return self._round(k + 1, "localize", self._plan())

    def _rounds_run(self) -> int:
        return len({id(r.round) for r in self.records if not _is_aggregate(r.round)})

    def _round(self, index: int, purpose: str, pairs: list[tuple[int, int]]) -> Round | None:
        groups = pair_groups(self.fleet, pairs, self.shape)
        return make_round("pairs", index, purpose, groups) if groups else None

    def _plan(self) -> list[tuple[int, int]]:
        st = self._state()
        good = [h for h in self.hosts if st.cleared(h) and h not in self.dead and not st.confirmed_units(h)]
        busy: set[int] = set()
        pairs: list[tuple[int, int]] = []
        for a, b in st.link_suspects:
            if not {a, b} & busy and a not in self.dead and b not in self.dead:
                pairs.append((a, b))
                busy |= {a, b}
        needing = [h for h in self.hosts if h not in self.dead and h not in busy and st.needs_partner(h)]
        cursor = 0
        for n in needing:
            for step in range(len(good)):
                g = good[(cursor + step) % len(good)]
                if g != n and g not in busy and g not in st.partners[n]:
                    pairs.append((n, g))
                    busy |= {n, g}
                    cursor = (cursor + step + 1) % len(good)
                    break
        return pairs

    # -- state ----------------------------------------------------------------------------
    def _state(self) -> _PairState:
        key = (len(self.records), tuple(sorted(self.dead)))
        if getattr(self, "_cached", (None,))[0] != key:
            self._cached = (key, _PairState(self))
        return self._cached[1]

    def findings(self) -> list[Finding]:
        st = self._state()
        out: list[Finding] = []
        fleet = self.fleet
        for u in sorted(st.fabric_units, key=lambda x: -1 if x is None else x):
            bad, total = st.fabric_units[u]
            out.append(Finding(RAIL, (), SLOW_V, _unit_text(u), evidence=[
                f"pairs: {bad} of {total} hosts slow on {_unit_text(u) or 'the network'}: a fabric-wide problem, "
                "not one node (node verdicts on it are withheld)"]))
        for h in self.hosts:
            name = fleet.hosts[h]
            if h in self.dead:
                out.append(Finding(NO_ANSWER_C, (name,), NO_ANSWER_V, evidence=[self.dead[h]] + st.evidence_of(h)))
                continue
            units = st.confirmed_units(h)
            if units:
                out.extend(self._node_findings(st, h, units))
            elif st.suspect(h):
                obs = list(st.bad_by_node[h])
                note = ("rounds exhausted" if self._rounds_run() >= self.max_rounds
                        else "no healthy partner was free to test it again")
                out.append(self._finding(NODE_NIC, (name,), SUSPECT_V, "", obs,
                                         extra=[f"one bad measurement only; {note}"]))
        for (a, b), units in st.confirmed_links().items():
            rails_tested = st.units_of_link(a, b) - {None}
            if None in units and rails_tested:
                units, detail = {None}, "all rails"
            else:
                units = units - {None} or units
                detail = _units_text(units, rails_tested or {None})
            obs = [o for o in st.bad_by_link[(a, b)] if o.unit in units]
            out.append(self._finding(LINK, (fleet.hosts[a], fleet.hosts[b]), _verdict_of(obs), detail, obs,
                                     extra=[st.cleared_by(a), st.cleared_by(b)]))
        for a, b in st.link_suspects:
            obs = list(st.bad_by_link[(a, b)])
            out.append(self._finding(LINK, (fleet.hosts[a], fleet.hosts[b]), SUSPECT_V, "", obs,
                                     extra=["slow once; both hosts fine with other partners; not re-run (rounds exhausted)"]))
        return out + self._fleet_notes() + self._unjudged_note(st.unjudged)

    def _node_findings(self, st: _PairState, h: int, units: set) -> list[Finding]:
        name = self.fleet.hosts[h]
        tested = st.units_of_node(h) - {None}
        if None in units and tested:  # the whole-host median convicted it: all rails, one finding
            obs = [o for o in st.bad_by_node[h] if o.unit is None]
            rails = sorted(u for u in units if u is not None)
            extra = [f"rails slow on their own too: {', '.join(map(str, rails))}"] if rails else []
            return [self._finding(NODE_NIC if _verdict_of(obs) != NO_ANSWER_V else NO_ANSWER_C, (name,),
                                  _verdict_of(obs), "all rails", obs, extra=extra)]
        units = units - {None}
        if not units:
            return []
        obs = [o for o in st.bad_by_node[h] if o.unit in units]
        verdict = _verdict_of(obs)
        comp = NO_ANSWER_C if verdict == NO_ANSWER_V else NODE_NIC
        if len(units) == len(tested) or comp == NO_ANSWER_C:
            return [self._finding(comp, (name,), verdict, _units_text(units, tested), obs)]
        return [self._finding(comp, (name,), _verdict_of([o for o in obs if o.unit == u]), _unit_text(u),
                              [o for o in obs if o.unit == u]) for u in sorted(units)]

    def _finding(self, comp: str, hosts: tuple[str, ...], verdict: str, detail: str, obs: list[_Obs],
                 extra: Sequence[str] = ()) -> Finding:
        values = [o.rec.result.busbw[o.index] for o in obs]
        zs = [o.rec.score.z_bw[o.index] for o in obs]
        finite = [v for v in values if np.isfinite(v)]
        zf = [z for z in zs if np.isfinite(z)]
        shape = obs[0].rec.round.groups[obs[0].index].shape if obs else ""
        refs = self.refs.get(shape)
        measured = float(np.median(finite)) if finite else None
        evidence = self._condensed(obs) + list(extra)
        return Finding(comp, hosts, verdict, detail, measured,
                       refs.busbw.center if refs and refs.busbw else None,
                       float(np.median(zf)) if zf else None, evidence=evidence,
                       pct_expected=self._pct(shape, measured))

    def _condensed(self, obs: list[_Obs]) -> list[str]:
        """One line per (round, pair): the rails of one pair measurement together."""
        by_pair: dict[tuple, list[_Obs]] = defaultdict(list)
        for o in obs:
            by_pair[(o.rec.round.index, o.rec.round.groups[o.index].hosts, _is_aggregate(o.rec.round))].append(o)
        lines = []
        for (_, hosts, _), items in by_pair.items():
            if len(items) == 1:
                lines.append(self._evidence(items[0].rec, items[0].index))
                continue
            rec = items[0].rec
            g = rec.round.groups[items[0].index]
            names = "+".join(self.fleet.hosts[h] for h in hosts)
            tested = sum(1 for x in rec.round.groups if x.hosts == hosts)  # rails of this pair
            bw = np.array([o.rec.result.busbw[o.index] for o in items])
            z = np.array([o.rec.score.z_bw[o.index] for o in items])
            rails = ",".join(str(o.unit) for o in items)
            refs = self.refs.get(g.shape)
            statuses = sorted({o.status for o in items})
            if np.isfinite(bw).any():
                ref = f" vs {refs.busbw.describe('GB/s')}" if refs and refs.busbw else ""
                lines.append(f"{rec.round.name}: {names}: {len(items)} of {tested} rails {'/'.join(statuses)} "
                             f"(rails {rails}): busbw {np.nanmin(bw):.4g}-{np.nanmax(bw):.4g} GB/s, "
                             f"z {np.nanmin(z):+.1f}..{np.nanmax(z):+.1f}{ref}")
            else:
                why = rec.score.why[items[0].index]
                lines.append(f"{rec.round.name}: {names}: {len(items)} of {tested} rails {'/'.join(statuses)}: {why}")
        return lines

    def tested_hosts(self) -> set[int]:
        st = self._state()
        return set(st.answered) & set(self.hosts)


_CODE = {OK: 0, SLOW: 1, NO_ANSWER: 2, WRONG: 3, UNJUDGED: 4}
_NAME = {v: k for k, v in _CODE.items()} | {5: _PARTNER_DEAD}
_BAD_CODES = np.array([_CODE[s] for s in BAD])


class _PairState:
    """Per host and per link: which measurements were good or bad, on which rail.

    Kept in numpy arrays (a thousand-host round has thousands of groups); only
    bad measurements become `_Obs` objects, since only they are evidence."""

    def __init__(self, scan: PairScan):
        self.scan = scan
        thr, H = scan.thr, scan.fleet.nhosts
        dead = np.zeros(H, dtype=bool)
        dead[list(scan.dead)] = True
        self.rows = []  # per record: (rec, a, b, unit, status seen by a, status seen by b, status of the link)
        self.partners: dict[int, set[int]] = defaultdict(set)
        self.unjudged = 0
        nunits = scan.fleet.max_gpus + 1
        tally = np.zeros((2, nunits * H), dtype=np.int64)  # fleet rounds: [bad, ok] per (unit, host)
        raw = []
        for rec in scan.records:
            a, b, u = _group_arrays(rec.round)
            st = np.array([_CODE[x] for x in rec.score.status], dtype=np.int8)
            raw.append((rec, a, b, u, st))
            if _is_fleet(rec.round):
                if not _is_aggregate(rec.round):
                    self.unjudged += int((st == _CODE[UNJUDGED]).sum())
                for hosts in (a, b):
                    key = (u + 1) * H + hosts
                    tally[0] += np.bincount(key[st == _CODE[SLOW]], minlength=nunits * H)
                    tally[1] += np.bincount(key[st == _CODE[OK]], minlength=nunits * H)
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
        self.bad_by_node: dict[int, list[_Obs]] = defaultdict(list)
        self.bad_by_link: dict[tuple[int, int], list[_Obs]] = defaultdict(list)
        measured: set[int] = set()
        answered: set[int] = set()
        verdicts: dict[tuple[int, int, int], tuple[bool, bool, bool]] = {}  # (host, round, partner) -> flags
        for rec, a, b, u, st in raw:
            st = st.copy()
            st[(st == _CODE[SLOW]) & np.isin(u, fabric)] = _CODE[OK]  # judged in the fabric finding instead
            sa = np.where(dead[b], 5, st)  # a partner that died says nothing about this host
            sb = np.where(dead[a], 5, st)
            self.rows.append((rec, a, b, u, sa, sb, st))
            pair_key, inv, counts = np.unique(a * H + b, return_inverse=True, return_counts=True)
            for view, me, other in ((sa, a, b), (sb, b, a)):
                isbad = np.isin(view, _BAD_CODES)
                any_bad = np.bincount(inv, weights=isbad, minlength=len(pair_key)) > 0
                n_ok = np.bincount(inv, weights=view == _CODE[OK], minlength=len(pair_key))
                n_unjudged = np.bincount(inv, weights=view == _CODE[UNJUDGED], minlength=len(pair_key))
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
                    self.bad_by_node[int(me[i])].append(_Obs(rec, int(i), int(other[i]), _unit(u[i]),
                                                             _NAME[int(view[i])]))
                live = view != 5
                measured.update(int(x) for x in np.unique(me[live]))
                answered.update(int(x) for x in np.unique(me[live & (view != _CODE[NO_ANSWER])]))
            for i in np.flatnonzero(np.isin(st, _BAD_CODES)):
                link = (int(min(a[i], b[i])), int(max(a[i], b[i])))
                self.bad_by_link[link].append(_Obs(rec, int(i), int(b[i]), _unit(u[i]), _NAME[int(st[i])]))
        for (h, _, p), (bad, ok, seen_ok) in verdicts.items():
            if bad:
                self.bad_partners[h].add(p)
            elif ok and seen_ok:
                self.ok_partners[h].add(p)
        self.measured, self.answered = measured, answered
        self._ok_units: dict[int, dict] = {}
        self.link_suspects = self._link_suspects()

    # -- counts on demand (only hosts and links with bad measurements ask) ---------------------
    def _ok_counts(self, h: int) -> dict:
        if h not in self._ok_units:
            out: dict[object, int] = defaultdict(int)
            for _, a, b, u, sa, sb, _ in self.rows:
                for me, view in ((a, sa), (b, sb)):
                    for x in u[(me == h) & (view == _CODE[OK])]:
                        out[_unit(x)] += 1
            self._ok_units[h] = out
        return self._ok_units[h]

    def _link_ok_counts(self, link: tuple[int, int]) -> dict:
        out: dict[object, int] = defaultdict(int)
        x, y = link
        for _, a, b, u, _, _, st in self.rows:
            sel = (((a == x) & (b == y)) | ((a == y) & (b == x))) & (st == _CODE[OK])
            for v in u[sel]:
                out[_unit(v)] += 1
        return out

    def units_of_node(self, h: int) -> set:
        out: set[int | None] = set()
        for _, a, b, u, *_ in self.rows:
            out.update(_unit(x) for x in np.unique(u[(a == h) | (b == h)]))
        return out

    def units_of_link(self, x: int, y: int) -> set:
        out: set[int | None] = set()
        for _, a, b, u, *_ in self.rows:
            out.update(_unit(v) for v in np.unique(u[((a == x) & (b == y)) | ((a == y) & (b == x))]))
        return out

    # -- verdicts -------------------------------------------------------------------------------
    def cleared(self, h: int) -> bool:
        """Shown healthy: all-good with at least as many partners as it was bad with."""
        ok = len(self.ok_partners.get(h, ()))
        return ok >= 1 and ok >= len(self.bad_partners.get(h, ()))

    def cleared_by(self, h: int) -> str:
        names = [self.scan.fleet.hosts[p] for p in sorted(self.ok_partners.get(h, ()))]
        return f"{self.scan.fleet.hosts[h]} is fine with {', '.join(names[:4]) or 'no partner'}"

    def confirmed_units(self, h: int) -> set:
        """Rails on which h was bad with two different partners, and more often bad than good."""
        obs = self.bad_by_node.get(h)
        if not obs:
            return set()
        bad_partners: dict[object, set[int]] = defaultdict(set)
        bad: dict[object, int] = defaultdict(int)
        for o in obs:
            bad_partners[o.unit].add(o.partner)
            bad[o.unit] += 1
        ok = self._ok_counts(h)
        return {u for u, ps in bad_partners.items() if len(ps) >= 2 and bad[u] > ok.get(u, 0)}

    def suspect(self, h: int) -> bool:
        return bool(self.bad_partners.get(h)) and not self.cleared(h) and not self.confirmed_units(h)

    def needs_partner(self, h: int) -> bool:
        return h not in self.measured or self.suspect(h)

    def _link_units(self, link: tuple[int, int]) -> tuple[dict, dict]:
        bad_rounds: dict[object, set[int]] = defaultdict(set)
        for o in self.bad_by_link.get(link, []):
            bad_rounds[o.unit].add(o.rec.round.index)
        return bad_rounds, self._link_ok_counts(link) if bad_rounds else {}

    def _link_suspects(self) -> list[tuple[int, int]]:
        out = []
        for link in self.bad_by_link:
            a, b = link
            if not (self.cleared(a) and self.cleared(b)):
                continue
            bad_rounds, ok = self._link_units(link)
            if any(len(r) == 1 and not ok.get(u) for u, r in bad_rounds.items()) and \
                    not any(len(r) >= 2 for r in bad_rounds.values()):
                out.append(link)
        return out

    def confirmed_links(self) -> dict[tuple[int, int], set]:
        out = {}
        for link in self.bad_by_link:
            a, b = link
            if not (self.cleared(a) and self.cleared(b)):
                continue
            bad_rounds, ok = self._link_units(link)
            units = {u for u, r in bad_rounds.items() if len(r) >= 2 and len(r) > ok.get(u, 0)}
            if units:
                out[link] = units
        return out

    def evidence_of(self, h: int) -> list[str]:
        return [self.scan._evidence(o.rec, o.index) for o in self.bad_by_node.get(h, [])][:4]


AGGREGATE = "median of rails"


def _is_fleet(rnd: Round) -> bool:
    return rnd.purpose.split()[0] == "fleet"


def _is_aggregate(rnd: Round) -> bool:
    return rnd.purpose.endswith(AGGREGATE)


def _pair_aggregate(rnd: Round, result: RoundResult) -> tuple[Round, RoundResult] | None:
    """The whole-host view of a rails round: one group per pair (all its rails'
    members), busbw and latency the median over the rails, no answer if any rail
    gave none, wrong if any rail was wrong."""
    if _is_aggregate(rnd) or not rnd.groups or rnd.groups[0].rail is None:
        return None
    by_pair: dict[tuple[int, ...], list[int]] = defaultdict(list)
    for i, g in enumerate(rnd.groups):
        by_pair[g.hosts].append(i)
    if all(len(idx) == 1 for idx in by_pair.values()):
        return None  # one rail per pair: the rail is the whole host
    groups, n = [], len(by_pair)
    res = RoundResult.empty(n)
    for j, idx in enumerate(by_pair.values()):
        members = tuple(m for i in idx for m in rnd.groups[i].members)
        groups.append(Group("pairs", members))
        errs = [result.errors[i] for i in idx if i in result.errors]
        bw = result.busbw[idx]
        if errs or not np.isfinite(bw).all():
            res.errors[j] = errs[0] if errs else "no answer"
            continue
        res.busbw[j] = float(np.median(bw))
        res.lat_us[j] = float(np.median(result.lat_us[idx]))
        res.wrong[j] = int(result.wrong[idx].max())
    return Round(rnd.phase, rnd.index, f"{rnd.purpose} {AGGREGATE}", tuple(groups)), res


def _unit(x) -> int | None:
    x = int(x)
    return None if x < 0 else x


def _group_arrays(rnd: Round) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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


def _verdict_of(obs: list[_Obs]) -> str:
    statuses = [o.status for o in obs if o.status in BAD]
    if not statuses:
        return SLOW_V
    top = max(set(statuses), key=statuses.count)
    return _VERDICT[top]


def _unit_text(u: int | None) -> str:
    return "" if u is None else f"rail {u}"


def _units_text(units: set, tested: set) -> str:
    if units == {None}:
        return ""
    if units and units == tested:
        return "all rails"
    return ", ".join(_unit_text(u) for u in sorted(units))
