"""The pair phase: hosts in disjoint pairs, then re-pairing with healthy hosts.

Round 1 puts every host in a disjoint pair (per rail, and the median of the
pair's rails as a whole-host measurement).  A bad pair (a, b) cannot say
which side is at fault, so the next round pairs a and b each with a
distinct host already shown healthy.  A host bad with two different
partners is at fault (its NIC, on the rails that were slow, or all of them);
if both come out clean, the path between them is the suspect, and (a, b)
runs again: bad twice is a slow link.  So a fault is pinned to a node, a NIC
rail or a link in three rounds whatever the fleet size (four when a host sat
out round 1: odd count, or a partner that died) - but only a link round 1 or a
re-pairing happened to measure.  With `all_pairs` (the default up to
`scan_schedule.ALL_PAIRS_MAX_HOSTS` hosts), the rounds are a round-robin tournament
(every pair once, n-1 rounds), so every link is measured, and then suspect links
are re-run, each once, in rounds of disjoint pairs (two suspects of one host go in
different rounds): at most as many rounds again as the tournament had.  Given each host's
leaf switch (`--topology`) where every pair is not measured, the fleet rounds are the leaf
rounds instead (`scan_schedule.leaf_rounds`: within the leaves, then every leaf pair crossed),
followed the same way; the model judges the path between every two leaves (`pair_model`), and
the pairs crossing a path it convicts are that path's evidence, not their hosts' or links'
(`PairState.explain`).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Mapping, Sequence

import numpy as np

from .findings import (
    FLEET,
    LINK,
    NO_ANSWER_C,
    NO_ANSWER_V,
    NODE_NIC,
    PATH,
    RAIL,
    SLOW_V,
    SUSPECT_V,
    UNJUDGED_V,
    Finding,
)
from .fleet import Fleet
from .localize import BAD, CONTROLS_PER_SHAPE, DEFAULT_THRESHOLDS, VERDICT, PhaseScan, Recorded, is_fleet
from .pair_model import CONTROLLED, HOST, Conviction, Measurement, ModelResult, judge_pairs
from .pair_model import LINK as LINK_KIND
from .pair_model import PATH as PATH_KIND
from .pair_state import Obs, PairState, is_aggregate, pair_aggregate
from .physics import PhysicsRef
from .round_judge import MOVED_Z, OK, Baseline, References, RoundResult, Thresholds
from .scan_schedule import (
    LEAF_CROSSINGS,
    Leaves,
    Round,
    all_pairs_by_default,
    disjoint_pairs,
    leaf_rounds,
    make_round,
    pair_groups,
    round_robin,
)


class PairScan(PhaseScan):
    """pairs: disjoint pairs, then re-pairing with healthy hosts (or all pairs on request)."""

    def __init__(self, fleet: Fleet, thr: Thresholds = DEFAULT_THRESHOLDS, shape: str = "rails", max_rounds: int = 3,
                 all_pairs: bool | None = None, baseline: Baseline | None = None,
                 expected: Mapping[str, float] | None = None, hosts: Sequence[int] | None = None,
                 physics: Mapping[str, PhysicsRef] | None = None, leaves: Leaves | None = None,
                 leaf_crossings: int = LEAF_CROSSINGS):
        super().__init__(fleet, "pairs", thr, baseline, expected, physics)
        self.shape, self.max_rounds = shape, max_rounds
        self.hosts = list(range(fleet.nhosts)) if hosts is None else list(hosts)
        # None: every pair where the fleet is small enough (a slow link found by default)
        self.all_pairs = all_pairs_by_default(len(self.hosts)) if all_pairs is None else all_pairs
        self.leaves = leaves  # each host's leaf switch (--topology): the model judges the paths between leaves
        # where every host pair is not measured, the fleet rounds cross every leaf pair instead (`leaf_rounds`)
        self.leaf_schedule = (not self.all_pairs and leaves is not None
                              and len(leaves.members(self.hosts)) >= 2)
        if self.leaf_schedule:
            assert leaves is not None
            self.tournament: list[list[tuple[int, int]]] | None = leaf_rounds(self.hosts, leaves, leaf_crossings)
        else:
            self.tournament = round_robin(self.hosts) if self.all_pairs else None

    def _update_refs(self) -> None:
        """As for every phase, but a fleet statistic needs `min_groups` different
        host pairs: the rails of one pair compared with each other say nothing
        about which host is slow (two hosts alone are judged by a baseline or not at all)."""
        super()._update_refs()
        pairs: dict[str, set] = defaultdict(set)
        for rec in self.records:
            if is_fleet(rec.round):
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
        agg = pair_aggregate(rnd, result)
        if agg is not None:
            super().record(*agg)

    # -- planning --------------------------------------------------------------------------
    def next_round(self) -> Round | None:
        if len(self.hosts) < 2:
            return None
        k = len({id(r.round) for r in self.records if not is_aggregate(r.round)})
        if self.tournament is not None:
            if k < len(self.tournament):
                out = set(self.dead) | self._convicted_hosts()
                pairs = [(a, b) for a, b in self.tournament[k] if a not in out and b not in out]
                return self._round(k + 1, "fleet", pairs)
            if k >= 2 * len(self.tournament):  # the bound on confirmation rounds (`_confirm_pairs`)
                return None
            return self._round(k + 1, "confirm", self._confirm_pairs())
        if k == 0:
            pairs, _ = disjoint_pairs(self.hosts)
            return self._round(1, "fleet", pairs)
        if k >= self.max_rounds:
            return None
        return self._round(k + 1, "localize", self._plan())

    def _convicted_hosts(self) -> set[int]:
        """In the leaf rounds, hosts already convicted round by round (bad with two partners or more,
        more often than fine): left out of the later leaf rounds, whose every round they would slow
        to their own pace (a NIC at a tenth: 17 s a round in the simulated time model, the 9 leaf
        rounds of 1024 hosts 199 s where the disjoint pairs took 75); their leaves' paths are crossed
        by the other hosts.  Not in the round robin of every pair, which measures each pair once."""
        if not self.leaf_schedule or not self.records:
            return set()
        st = self._state()
        return {h for h in self.hosts if st.confirmed_units(h)}

    def _rounds_run(self) -> int:
        return len({id(r.round) for r in self.records if not is_aggregate(r.round)})

    def _round(self, index: int, purpose: str, pairs: list[tuple[int, int]]) -> Round | None:
        groups = pair_groups(self.fleet, pairs, self.shape)
        if not groups:
            return None
        controls = [] if purpose == "fleet" else pair_groups(self.fleet, self._control_pairs(pairs), self.shape)
        return make_round("pairs", index, purpose, groups, controls)

    def _control_pairs(self, pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """Up to CONTROLS_PER_SHAPE host pairs to run beside a later round's pairs (the
        round's yardstick, `PhaseScan.round_shift`): pairs measured ok on every rail in a
        fleet round, both hosts cleared, neither in the round nor dead; the most typical first.
        As measured then (host order included), so their figures can be compared."""
        st = self._state()
        busy = {h for p in pairs for h in p} | set(self.dead)
        worst: dict[tuple[int, ...], float] = {}
        bad: set[tuple[int, ...]] = set()
        for rec in self.records:
            if not is_fleet(rec.round) or is_aggregate(rec.round):
                continue
            for i, g in enumerate(rec.round.groups):
                if rec.score.status[i] != OK or g not in self.fleet_seen:
                    bad.add(g.hosts)
                    continue
                z = float(rec.score.z_bw[i])
                worst[g.hosts] = max(worst.get(g.hosts, 0.0), abs(z) if np.isfinite(z) else np.inf)
        out: list[tuple[int, int]] = []
        for hosts, _ in sorted(((h, w) for h, w in worst.items() if h not in bad), key=lambda x: (x[1], x[0])):
            if len(out) >= CONTROLS_PER_SHAPE:
                break
            a, b = hosts
            if a in busy or b in busy or not (st.cleared(a) and st.cleared(b)):
                continue
            out.append((a, b))
            busy |= {a, b}
        return out

    def _model_link_suspects(self) -> set[tuple[int, int]]:
        """Links the whole-phase model finds slow on one round only: re-run like the round-by-round
        suspects, so a second measurement confirms or clears them (with few pairs a round's own
        reference holds the slow pair itself and may not flag it).  Not where a host of it is
        already a suspect of the round-by-round state: its re-pairing is what settles that."""
        st = self._state()
        out = set()
        for c in self.model().convictions:
            if c.kind == LINK_KIND and not c.confirmed:
                a, b = c.hosts
                if not any(st.suspect(h) or st.confirmed_units(h) for h in (a, b)):
                    out.add((a, b))  # a host the rounds already suspect is re-paired, not its link re-run
        return out

    def _rerun(self) -> set[tuple[int, ...]]:
        """The host pairs a confirmation round has re-run (its controls are not re-runs)."""
        return {g.hosts for r in self.records if r.round.purpose == "confirm" for g in r.round.groups
                if g not in r.round.controls}

    def _confirm_pairs(self) -> list[tuple[int, int]]:
        """The suspect links to re-run next, sharing no host: two suspects of one host cannot
        run in one round (its GPUs would be in two groups).  Each link is re-run once; taken in
        the order of the tournament rounds that measured them, so every confirmation round
        re-runs at least every suspect left from the earliest such tournament round, whose
        pairs are disjoint: at most as many confirmation rounds as the tournament had (the
        bound `next_round` keeps), in practice one per suspect link of the busiest host."""
        assert self.tournament is not None
        order = {p: i for i, rnd in enumerate(self.tournament) for p in rnd}
        done = self._rerun()
        suspects = set(self._state().link_suspects) | self._model_link_suspects()
        paths = self._convicted_paths()  # a pair crossing a convicted path is explained by it: not re-run
        todo = sorted((p for p in suspects if p not in done and not set(p) & set(self.dead)
                       and (self.leaves is None or self.leaves.path(*p) not in paths)),
                      key=lambda p: (order.get(p, len(order)), p))
        busy: set[int] = set()
        pairs: list[tuple[int, int]] = []
        for a, b in todo:
            if a not in busy and b not in busy:
                pairs.append((a, b))
                busy |= {a, b}
        return pairs

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
    def _state(self) -> PairState:
        """The round-by-round state (`PairState`); where the model convicts a path between leaves,
        the pairs crossing it are explained by it (`PairState.explain`)."""
        key = (len(self.records), tuple(sorted(self.dead)))
        if getattr(self, "_cached", (None,))[0] != key:
            st = PairState(self)
            paths = self._convicted_paths() if self.leaves is not None else set()
            if paths:
                assert self.leaves is not None
                st.explain({(a, b) for a, ps in st.partners.items() for b in ps
                            if a < b and self.leaves.path(a, b) in paths})
            self._cached = (key, st)
        return self._cached[1]

    def findings(self) -> list[Finding]:
        st = self._state()
        out: list[Finding] = []
        fleet = self.fleet
        for u in sorted(st.fabric_units, key=lambda x: -1 if x is None else x):
            bad, total = st.fabric_units[u]
            out.append(Finding(RAIL, (), SLOW_V, unit_text(u), evidence=[
                f"pairs: {bad} of {total} hosts slow on {unit_text(u) or 'the network'}: a fabric-wide problem, "
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
                detail = units_text(units, rails_tested or {None})
            obs = [o for o in st.bad_by_link[(a, b)] if o.unit in units]
            out.append(self._finding(LINK, (fleet.hosts[a], fleet.hosts[b]), verdict_of(obs), detail, obs,
                                     extra=[st.cleared_by(a), st.cleared_by(b)]))
        rerun = self._rerun()
        for a, b in st.link_suspects:
            obs = list(st.bad_by_link[(a, b)])
            why = ("re-run once, which settled nothing (not judged, or another symptom)" if (a, b) in rerun
                   else "not re-run (rounds exhausted)")
            out.append(self._finding(LINK, (fleet.hosts[a], fleet.hosts[b]), SUSPECT_V, "", obs,
                                     extra=self._reruns_not_bad((a, b)) +
                                     [f"slow once; both hosts fine with other partners; {why}"]))
        out = self._alone_under_a_leaf(self._with_model(out))
        return out + self._fleet_notes() + self._unjudged_note(st.unjudged)

    def _alone_under_a_leaf(self, out: list[Finding]) -> list[Finding]:
        """A host convicted (or suspected) that is the only host of its leaf: every pair of it crosses
        its leaf's uplinks, so its NIC and those paths are the same measurements - said, not guessed."""
        if self.leaves is None:
            return out
        members = self.leaves.members(self.hosts)
        index = {name: h for h, name in enumerate(self.fleet.hosts)}
        for f in out:
            if f.component == NODE_NIC and f.hosts and len(members.get(self.leaves.of[index[f.hosts[0]]], ())) == 1:
                leaf = self.leaves.names[self.leaves.of[index[f.hosts[0]]]]
                f.evidence.append(f"{f.hosts[0]} is the only host under {leaf}: every pair of it crosses {leaf}'s "
                                  f"uplinks, so its NIC cannot be told from the paths between {leaf} and the other "
                                  "leaves")
        return out

    # -- the whole-phase model ------------------------------------------------------------
    def measurements(self) -> list[Measurement]:
        """Every steady, right answer of the phase, one per (round, rail group), re-runs and
        controls included: what the whole-phase model (`pair_model.py`) is fitted to.  A later round
        enters divided by its controls' movement where it moved (`round_factor`); a later round
        with no control is left out: a round slowed as a whole cannot be told from a fault there -
        unless every fleet round held a single pair (3 hosts): then no round of the phase could
        have a control, the fleet rounds are compared with each other as they are, and a re-run
        is one more such round (a host convicted by two slow partners rests on two uncontrolled
        rounds just as a link slow in its round and its re-run does)."""
        out = []
        single = all(len({g.hosts for g in r.round.groups}) <= 1 for r in self.records if is_fleet(r.round))
        for rec in self.records:
            if is_aggregate(rec.round):
                continue
            res = rec.result
            for i, g in enumerate(rec.round.groups):
                if i in res.errors or i in res.unstable or res.wrong[i] > 0 or len(g.hosts) != 2:
                    continue
                factor = 1.0 if is_fleet(rec.round) or single else self.round_factor(rec, g.shape)
                if factor is not None:
                    a, b = g.hosts
                    # a later round divided by its controls is at the fleet rounds' level (CONTROLLED)
                    load = res.load.get(i, 1) if is_fleet(rec.round) or single else CONTROLLED
                    out.append(Measurement((a, b), float(res.busbw[i]) / factor, rec.round.name,
                                           upper_bound=i in res.upper_bound, load=load))
        return out

    def round_factor(self, rec: Recorded, shape: str) -> float | None:
        """A later round's movement as a whole, from its controls (`PhaseScan.round_shift`): 1.0
        where it did not move beyond MOVED_Z standard errors of their mean (noise floor taken as
        their spread), None without a control."""
        shift = self.round_shift(rec.round, rec.result, shape)
        if shift is None or not np.isfinite(shift.bw) or shift.bw <= 0:
            return None
        moved = abs(np.log(shift.bw)) > MOVED_Z * self.thr.bw_floor * np.sqrt(2.0 / max(1, shift.n))
        return float(shift.bw) if moved else 1.0

    def model(self) -> ModelResult:
        """The whole-phase model's verdicts over the live hosts (`pair_model.judge_pairs`), with the
        paths between leaves where they are known; kept until a round or a death changes them."""
        key = (len(self.records), tuple(sorted(self.dead)))
        cached = getattr(self, "_model_cache", None)
        if cached is None or cached[0] != key:
            live = [h for h in self.hosts if h not in self.dead]
            cached = (key, judge_pairs(self.measurements(), live, self.fleet.hosts, self.thr.bw_floor,
                                       self.thr.confirm_z, self.leaves))
            self._model_cache = cached
        return cached[1]

    def _convicted_paths(self) -> set[tuple[int, int]]:
        """The leaf pairs whose path the model convicts."""
        return {c.path for c in self.model().convictions if c.kind == PATH_KIND and c.path is not None}

    def _with_model(self, out: list[Finding]) -> list[Finding]:
        """The round-by-round findings, completed by the model: a host or link it convicts that
        no confirmed finding names yet is named (replacing a mere suspect of the same component)."""
        model = self.model()
        if model.notes:
            out = out + [Finding(FLEET, (), UNJUDGED_V, f"{self.phase} model", evidence=list(model.notes))]
        if any(rec.result.load for rec in self.records):
            out = self._shared_needs_model(out, model)
        for c in model.convictions:
            if c.kind == PATH_KIND:
                out = self._path_finding(out, c)
                continue
            names = tuple(self.fleet.hosts[h] for h in c.hosts)
            comp = NODE_NIC if c.kind == HOST else LINK
            same = [f for f in out if f.hosts == names and f.component in (comp, NO_ANSWER_C)]
            if any(f.confirmed for f in same):
                continue
            if not c.confirmed and same:
                continue
            out = [f for f in out if f not in same]
            detail = "all rails" if self.shape == "rails" else ""
            evidence = [f"whole-phase model: {line}" for line in c.evidence] + [e for f in same for e in f.evidence]
            out.append(Finding(comp, names, SLOW_V if c.confirmed else SUSPECT_V, detail, c.measured, c.reference,
                               c.z, evidence=evidence, pct_expected=self._pct(self._shape_of_pairs(), c.measured)))
        return out

    def _path_finding(self, out: list[Finding], c: Conviction) -> list[Finding]:
        """A path the model convicts, named by its leaves ("leaf3<->leaf7"); the round-by-round link
        findings (suspect or confirmed) of pairs crossing it are its evidence, not faults of their own."""
        assert self.leaves is not None and c.path is not None
        detail = self.leaves.path_name(c.path)
        crossing = [f for f in out if f.component == LINK and len(f.hosts) == 2
                    and self.leaves.path(*(self.fleet.hosts.index(h) for h in f.hosts)) == c.path]
        evidence = list(c.evidence)
        if crossing:
            shown = ", ".join(" <-> ".join(f.hosts) for f in crossing[:4]) + (", ..." if len(crossing) > 4 else "")
            evidence.append(f"{len(crossing)} pair(s) crossing it slow round by round too, as links ({shown}): the "
                            "path explains them")
        kept = [f for f in out if f not in crossing]
        return kept + [Finding(PATH, (), SLOW_V, detail, c.measured, c.reference, c.z, evidence=evidence,
                               pct_expected=self._pct(self._shape_of_pairs(), c.measured))]

    def _shared_needs_model(self, out: list[Finding], model: ModelResult) -> list[Finding]:
        """Where ranks share devices (`sharing.py`), a round's fleet mixes pairs run at different
        loads, so a busbw verdict of the rounds stands only where the model, which compares pairs
        at equal load, convicts the same host or link; elsewhere it stays a suspect, said why."""
        convicted = {tuple(self.fleet.hosts[h] for h in c.hosts) for c in model.convictions if c.confirmed}
        kept = []
        for f in out:
            if f.component in (NODE_NIC, LINK) and f.verdict == SLOW_V and f.hosts not in convicted:
                f = dataclasses.replace(f, verdict=SUSPECT_V, evidence=[
                    *f.evidence, "not confirmed: ranks share devices, so these rounds mixed pairs run at different "
                    "loads; the whole-phase model, comparing pairs at equal load only, does not convict it"])
            kept.append(f)
        return kept

    def _shape_of_pairs(self) -> str:
        """The shape of this phase's pair groups (for the % of the ceiling)."""
        for rec in self.records:
            if rec.round.groups and not is_aggregate(rec.round):
                return rec.round.groups[0].shape
        return ""

    def _reruns_not_bad(self, link: tuple[int, int]) -> list[str]:
        """The evidence of a suspect link's re-runs that were not bad (not judged, or another
        symptom): what settled nothing, said."""
        out = []
        for rec in self.records:
            if rec.round.purpose != "confirm":
                continue
            for i, g in enumerate(rec.round.groups):
                if g not in rec.round.controls and set(g.hosts) == set(link) and rec.score.status[i] not in BAD:
                    out.append(self.evidence_line(rec, i))
        return out[:2]

    def _node_findings(self, st: PairState, h: int, units: set) -> list[Finding]:
        name = self.fleet.hosts[h]
        tested = st.units_of_node(h) - {None}
        slow_rails = {u for u in units if u is not None}
        if None in units and slow_rails and tested - slow_rails and 2 * len(slow_rails) >= len(tested) and \
                not any(o.unit in tested - slow_rails for o in st.bad_by_node[h]):
            # the whole-host median moved by the slow rails alone: they are half the rails or more (of two
            # rails the median is their mean) and every other rail was never bad: those rails, not all
            units = slow_rails
        if None in units and tested:  # the whole-host median convicted it: all rails, one finding
            obs = [o for o in st.bad_by_node[h] if o.unit is None]
            rails = sorted(u for u in units if u is not None)
            extra = [f"rails slow on their own too: {', '.join(map(str, rails))}"] if rails else []
            return [self._finding(NODE_NIC if verdict_of(obs) != NO_ANSWER_V else NO_ANSWER_C, (name,),
                                  verdict_of(obs), "all rails", obs, extra=extra)]
        units = units - {None}
        if not units:
            return []
        obs = [o for o in st.bad_by_node[h] if o.unit in units]
        verdict = verdict_of(obs)
        comp = NO_ANSWER_C if verdict == NO_ANSWER_V else NODE_NIC
        if len(units) == len(tested) or comp == NO_ANSWER_C:
            return [self._finding(comp, (name,), verdict, units_text(units, tested), obs)]
        return [self._finding(comp, (name,), verdict_of([o for o in obs if o.unit == u]), unit_text(u),
                              [o for o in obs if o.unit == u]) for u in sorted(units)]

    def _finding(self, comp: str, hosts: tuple[str, ...], verdict: str, detail: str, obs: list[Obs],
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

    def _condensed(self, obs: list[Obs]) -> list[str]:
        """One line per (round, pair): the rails of one pair measurement together."""
        by_pair: dict[tuple, list[Obs]] = defaultdict(list)
        for o in obs:
            by_pair[(o.rec.round.index, o.rec.round.groups[o.index].hosts, is_aggregate(o.rec.round))].append(o)
        lines = []
        for (_, hosts, _), items in by_pair.items():
            if len(items) == 1:
                lines.append(self.evidence_line(items[0].rec, items[0].index))
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
                lines.append(f"{rec.round.name}: {names}: {len(items)} of {tested} rails {'/'.join(statuses)} "
                             f"(rails {rails}): busbw {np.nanmin(bw):.4g}-{np.nanmax(bw):.4g} GB/s, "
                             + _against(z, refs, rec.score.physics[items[0].index] if rec.score.physics else ""))
            else:
                why = rec.score.why[items[0].index]
                lines.append(f"{rec.round.name}: {names}: {len(items)} of {tested} rails {'/'.join(statuses)}: {why}")
        return lines

    def tested_hosts(self) -> set[int]:
        st = self._state()
        return set(st.answered) & set(self.hosts)

    def coverage_note(self) -> str:
        """How many of the host pairs (links) the phase measured: a link between two hosts never
        paired is not tested, and the report says so rather than calling the fabric healthy."""
        live = [h for h in self.hosts if h not in self.dead]
        total = len(live) * (len(live) - 1) // 2
        if total == 0:
            return ""
        partners = self._state().partners
        done = {frozenset((h, p)) for h in live for p in partners.get(h, ()) if p not in self.dead}
        if len(live) == 2:
            return self.two_host_note()
        leaves = self._leaf_note(live, done)
        if len(done) >= total:
            robin = ", round-robin" if self.tournament and not self.leaf_schedule else ""
            return f"pairs: every host pair measured ({total}{robin})" + (f"; {leaves}" if leaves else "")
        rounds = self._rounds_run()
        if self.leaf_schedule:
            return (f"pairs: {leaves}; {len(done)} of {total} host pairs measured in {rounds} round(s): a slow link "
                    "between two hosts under two leaves is tested as the path between them, one within a leaf as "
                    "its hosts' NICs")
        every = len(live) - 1 + len(live) % 2
        share = len(done) / total
        return (f"pairs: {len(done)} of {total} host pairs measured ({share:.{1 if share >= 0.01 else 2}%}, in "
                f"{rounds} round(s); every pair takes {every} rounds): a slow link between two hosts never paired is "
                "not tested; --topology FILE (each host's leaf switch) tests the path between every two leaves "
                "instead, --all-pairs every host pair" + (f"; {leaves}" if leaves else ""))

    def _leaf_note(self, live: Sequence[int], done: set[frozenset]) -> str:
        """What the measured pairs say of the paths between leaves (--topology): how many leaf pairs
        were crossed by two host pairs or more, the fewest a path is judged on; "" without leaves."""
        if self.leaves is None:
            return ""
        members = self.leaves.members(live)
        if len(members) < 2:
            name = self.leaves.names[next(iter(members))] if members else "-"
            return f"--topology: every host under one leaf ({name}): no path between leaves to test"
        crossings: dict[tuple[int, int], int] = defaultdict(int)
        for pair in done:
            path = self.leaves.path(*sorted(pair))
            if path is not None:
                crossings[path] += 1
        total = len(members) * (len(members) - 1) // 2
        judged = [n for n in crossings.values() if n >= 2]
        head = (f"every leaf pair crossed ({total} leaf pair(s) of {len(members)} leaves" if len(judged) == total else
                f"{len(judged)} of {total} leaf pairs ({len(members)} leaves) crossed by 2 host pairs or more, the "
                f"fewest a path is judged on (the others are not tested")
        lo, hi = (min(judged), max(judged)) if judged else (0, 0)
        spread = f", {lo}{'' if lo == hi else f'-{hi}'} host pairs each" if judged else ""
        return f"{head}{spread}; --topology {self.leaves.source})"


    def two_host_note(self) -> str:
        """Which reference judged a 2-host scan: one pair has no fleet to be compared with, so
        it is judged against a stored healthy scan of these hosts, or against the line rate
        (the ceiling of its shape), or not at all - and the note says what would judge it."""
        shape = self._shape_of_pairs()
        refs = self.refs.get(shape)
        used = []
        if refs is not None and refs.busbw is not None and refs.busbw.source.startswith("baseline"):
            used.append(f"against {refs.busbw.source} (a stored scan of these hosts: "
                        f"{refs.busbw.describe('GB/s')})")
        phys = self.physics.get(shape)
        if phys is not None and phys.threshold is not None:
            used.append(f"against the line rate: {phys.ceiling:.4g} GB/s {phys.bound} ceiling, slow under "
                        f"{phys.threshold:.4g} GB/s")
        if used:
            return "pairs: 2 hosts, one pair, no fleet to compare with: judged " + " and ".join(used)
        return ("pairs: 2 hosts, one pair, no fleet to compare with: not judged (no stored scan of these hosts and "
                "no known line rate); --baseline FILE, saved by --save-baseline FILE from a healthy scan of these "
                "hosts, would judge it")


def _against(z: np.ndarray, refs: References | None, physics: str) -> str:
    """What a pair's slow rails were judged against: their z range vs the fleet or baseline
    reference, or (no such reference: z is undefined) the ceiling's line."""
    if np.isfinite(z).any():
        ref = f" vs {refs.busbw.describe('GB/s')}" if refs and refs.busbw else ""
        return f"z {np.nanmin(z):+.1f}..{np.nanmax(z):+.1f}{ref}"
    return physics or "no reference"


def verdict_of(obs: list[Obs]) -> str:
    statuses = [o.status for o in obs if o.status in BAD]
    if not statuses:
        return SLOW_V
    top = max(set(statuses), key=statuses.count)
    return VERDICT[top]


def unit_text(u: int | None) -> str:
    return "" if u is None else f"rail {u}"


def units_text(units: set, tested: set) -> str:
    if units == {None}:
        return ""
    if units and units == tested:
        return "all rails"
    return ", ".join(unit_text(u) for u in sorted(units))
