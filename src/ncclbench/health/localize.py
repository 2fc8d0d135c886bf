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

from .findings import (FLEET, GPU, LINK, NO_ANSWER_C, NO_ANSWER_V, NODE_INTRA, NODE_NIC, RAIL, SLOW_V,
                       SUSPECT_V, UNJUDGED_V, WRONG_V, Finding)
from .fleet import Fleet
from .judge import (NO_ANSWER, OK, SLOW, UNJUDGED, WRONG, Baseline, References, RoundResult, Score,
                    Thresholds, fleet_shift, percent_of, references, score)
from .schedule import Group, Round, disjoint_pairs, make_round, pair_groups, round_robin

BAD = (SLOW, NO_ANSWER, WRONG)
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
        fleet = [r for r in self.records if r.round.purpose == "fleet"]
        shapes = dict.fromkeys(g.shape for r in fleet for g in r.round.groups)
        for shape in shapes:
            bw, lat = [], []
            for rec in fleet:
                idx = [i for i, g in enumerate(rec.round.groups) if g.shape == shape]
                bw.append(rec.result.busbw[idx])
                lat.append(rec.result.lat_us[idx])
            self.refs[shape] = references(np.concatenate(bw), np.concatenate(lat), shape, self.thr, self.baseline)

    def _score(self, rnd: Round, result: RoundResult) -> Score:
        limit = self.thr.suspect_z if rnd.purpose == "fleet" else self.thr.confirm_z
        shapes = [g.shape for g in rnd.groups]
        n = len(rnd.groups)
        out = Score([UNJUDGED] * n, np.full(n, np.nan), np.full(n, np.nan), [""] * n)
        for shape in dict.fromkeys(shapes):
            idx = np.array([i for i, s in enumerate(shapes) if s == shape])
            sub = RoundResult(result.busbw[idx], result.lat_us[idx], result.wrong[idx],
                              {j: result.errors[int(i)] for j, i in enumerate(idx) if int(i) in result.errors})
            sc = score(sub, self.refs.get(shape) or References(None, None), limit)
            for j, i in enumerate(idx):
                out.status[i], out.why[i] = sc.status[j], sc.why[j]
                out.z_bw[i], out.z_lat[i] = sc.z_bw[j], sc.z_lat[j]
        return out

    def record(self, rnd: Round, result: RoundResult) -> None:
        rec = Recorded(rnd, result, None)  # type: ignore[arg-type]
        self.records.append(rec)
        if rnd.purpose == "fleet":
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
            if line:
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

    def __init__(self, fleet: Fleet, phase: str, groups: Sequence[Group], thr: Thresholds = Thresholds(),
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

    def __init__(self, fleet: Fleet, thr: Thresholds = Thresholds(), shape: str = "rails", max_rounds: int = 3,
                 all_pairs: bool = False, baseline: Baseline | None = None,
                 expected: Mapping[str, float] | None = None, hosts: Sequence[int] | None = None):
        super().__init__(fleet, "pairs", thr, baseline, expected)
        self.shape, self.max_rounds, self.all_pairs = shape, max_rounds, all_pairs
        self.hosts = list(range(fleet.nhosts)) if hosts is None else list(hosts)
        self.tournament = round_robin(self.hosts) if all_pairs else None

    # -- planning --------------------------------------------------------------------------
    def next_round(self) -> Round | None:
        if len(self.hosts) < 2:
            return None
        k = len(self.records)
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
    def _state(self) -> "_PairState":
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
                obs = [o for o in st.by_node[h] if o.status in BAD]
                note = ("rounds exhausted" if len(self.records) >= self.max_rounds
                        else "no healthy partner was free to test it again")
                out.append(self._finding(NODE_NIC, (name,), SUSPECT_V, "", obs,
                                         extra=[f"one bad measurement only; {note}"]))
        for (a, b), units in st.confirmed_links().items():
            obs = [o for o in st.by_link[(a, b)] if o.status in BAD and o.unit in units]
            out.append(self._finding(LINK, (fleet.hosts[a], fleet.hosts[b]), _verdict_of(obs),
                                     _units_text(units, st.units_of_link(a, b)), obs,
                                     extra=[st.cleared_by(a), st.cleared_by(b)]))
        for a, b in st.link_suspects:
            obs = [o for o in st.by_link[(a, b)] if o.status in BAD]
            out.append(self._finding(LINK, (fleet.hosts[a], fleet.hosts[b]), SUSPECT_V, "", obs,
                                     extra=["slow once; both hosts fine with other partners; not re-run (rounds exhausted)"]))
        return out + self._fleet_notes() + self._unjudged_note(st.unjudged)

    def _node_findings(self, st: "_PairState", h: int, units: set) -> list[Finding]:
        name = self.fleet.hosts[h]
        tested = st.units_of_node(h)
        obs = [o for o in st.by_node[h] if o.status in BAD and o.unit in units]
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
            by_pair[(o.rec.round.index, o.rec.round.groups[o.index].hosts)].append(o)
        lines = []
        for (_, hosts), items in by_pair.items():
            if len(items) == 1:
                lines.append(self._evidence(items[0].rec, items[0].index))
                continue
            rec = items[0].rec
            g = rec.round.groups[items[0].index]
            names = "+".join(self.fleet.hosts[h] for h in hosts)
            tested = sum(1 for x in rec.round.groups if x.hosts == hosts)
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
        return {h for h in self.hosts if any(o.status != NO_ANSWER for o in st.by_node[h])}


class _PairState:
    """Per host and per link: which measurements were good or bad, on which rail."""

    def __init__(self, scan: PairScan):
        self.scan = scan
        thr = scan.thr
        self.by_node: dict[int, list[_Obs]] = defaultdict(list)
        self.by_link: dict[tuple[int, int], list[_Obs]] = defaultdict(list)
        self.partners: dict[int, set[int]] = defaultdict(set)
        self.unjudged = 0
        fleet_tally: dict[tuple[object, int], list[int]] = defaultdict(lambda: [0, 0])  # (unit, host) -> bad, ok
        for rec in scan.records:
            for i, g in enumerate(rec.round.groups):
                a, b = g.hosts
                status = rec.score.status[i]
                if status == UNJUDGED:
                    self.unjudged += rec.round.purpose == "fleet"
                if rec.round.purpose == "fleet" and status in (OK, SLOW):
                    for h in (a, b):
                        fleet_tally[(g.rail, h)][0 if status == SLOW else 1] += 1
                # a partner that died says nothing about this host
                self.by_node[a].append(_Obs(rec, i, b, g.rail, _PARTNER_DEAD if b in scan.dead else status))
                self.by_node[b].append(_Obs(rec, i, a, g.rail, _PARTNER_DEAD if a in scan.dead else status))
                self.by_link[(min(a, b), max(a, b))].append(_Obs(rec, i, b, g.rail, status))
                self.partners[a].add(b)
                self.partners[b].add(a)
        # A rail slow for many hosts at once is the fabric's, not every node's: a host
        # counts when it was slow on that rail more often than fine, so one bad node
        # (slow with each of its partners once) makes no fabric fault, even in a tournament.
        hosts_bad: dict[object, int] = defaultdict(int)
        hosts_seen: dict[object, int] = defaultdict(int)
        for (u, _), (bad, ok) in fleet_tally.items():
            hosts_seen[u] += 1
            hosts_bad[u] += bad > ok
        self.fabric_units = {u: (hosts_bad[u], hosts_seen[u]) for u in hosts_seen
                             if hosts_bad[u] >= 8 and hosts_bad[u] > thr.fleet_fault_fraction * hosts_seen[u]}
        for obs_list in list(self.by_node.values()) + list(self.by_link.values()):
            for o in obs_list:
                if o.status == SLOW and o.unit in self.fabric_units:
                    o.status = OK  # judged as part of the fabric finding instead
        # Per host: the partners it was all-good with, and those it was bad with.
        # Counted per partner, so a slow link measured twice (rounds 1 and 3)
        # weighs as one bad partner, not two.
        self.ok_partners: dict[int, set[int]] = defaultdict(set)
        self.bad_partners: dict[int, set[int]] = defaultdict(set)
        for h, obs in self.by_node.items():
            per_round: dict[tuple[int, int], list[str]] = defaultdict(list)
            for o in obs:
                per_round[(o.rec.round.index, o.partner)].append(o.status)
            for (_, partner), st in per_round.items():
                if any(s in BAD for s in st):
                    self.bad_partners[h].add(partner)
                elif all(s == OK for s in st):
                    self.ok_partners[h].add(partner)
        self.link_suspects = self._link_suspects()

    def cleared(self, h: int) -> bool:
        """Shown healthy: all-good with at least as many partners as it was bad with."""
        ok = len(self.ok_partners.get(h, ()))
        return ok >= 1 and ok >= len(self.bad_partners.get(h, ()))

    def cleared_by(self, h: int) -> str:
        names = [self.scan.fleet.hosts[p] for p in sorted(self.ok_partners.get(h, ()))]
        return f"{self.scan.fleet.hosts[h]} is fine with {', '.join(names[:4]) or 'no partner'}"

    def confirmed_units(self, h: int) -> set:
        """Rails on which h was bad with two different partners, and more often bad than good."""
        bad_partners: dict[object, set[int]] = defaultdict(set)
        ok: dict[object, int] = defaultdict(int)
        bad: dict[object, int] = defaultdict(int)
        for o in self.by_node.get(h, []):
            if o.status in BAD:
                bad_partners[o.unit].add(o.partner)
                bad[o.unit] += 1
            elif o.status == OK:
                ok[o.unit] += 1
        return {u for u, ps in bad_partners.items() if len(ps) >= 2 and bad[u] > ok[u]}

    def suspect(self, h: int) -> bool:
        return bool(self.bad_partners.get(h)) and not self.cleared(h) and not self.confirmed_units(h)

    def needs_partner(self, h: int) -> bool:
        return self.suspect(h) or h not in self.by_node

    def units_of_node(self, h: int) -> set:
        return {o.unit for o in self.by_node.get(h, [])}

    def units_of_link(self, a: int, b: int) -> set:
        return {o.unit for o in self.by_link.get((a, b), [])}

    def _link_units(self, link: tuple[int, int]) -> tuple[dict, dict]:
        bad_rounds: dict[object, set[int]] = defaultdict(set)
        ok: dict[object, int] = defaultdict(int)
        for o in self.by_link.get(link, []):
            if o.status in BAD:
                bad_rounds[o.unit].add(o.rec.round.index)
            elif o.status == OK:
                ok[o.unit] += 1
        return bad_rounds, ok

    def _link_suspects(self) -> list[tuple[int, int]]:
        out = []
        for link in self.by_link:
            a, b = link
            if not (self.cleared(a) and self.cleared(b)):
                continue
            bad_rounds, ok = self._link_units(link)
            if any(len(r) == 1 and not ok[u] for u, r in bad_rounds.items()) and \
                    not any(len(r) >= 2 for r in bad_rounds.values()):
                out.append(link)
        return out

    def confirmed_links(self) -> dict[tuple[int, int], set]:
        out = {}
        for link in self.by_link:
            a, b = link
            if not (self.cleared(a) and self.cleared(b)):
                continue
            bad_rounds, ok = self._link_units(link)
            units = {u for u, r in bad_rounds.items() if len(r) >= 2 and len(r) > ok[u]}
            if units:
                out[link] = units
        return out

    def evidence_of(self, h: int) -> list[str]:
        return [self.scan._evidence(o.rec, o.index) for o in self.by_node.get(h, []) if o.status in BAD][:4]


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
    if len(units) == len(tested) and len(tested) > 1:
        return "all rails"
    return ", ".join(_unit_text(u) for u in sorted(units))
