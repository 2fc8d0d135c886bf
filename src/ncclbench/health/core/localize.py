"""The rounds of one phase, from the fleet-wide first round to a verdict.

Every fault is confirmed by a second, independent measurement before it is
named (run-to-run noise makes one bad number in a thousand-group round
likely; two in a row on the same component are not).  `PhaseScan` holds
what every phase shares - the references per group shape from the fleet
round(s), scoring, dead hosts -; `RepeatScan` is the local, intra and rail
phases: round 1 measures every group, round 2 runs the groups that looked
bad again on a new communicator.  The pair phase, which re-pairs instead
of repeating, is `pair_phase.PairScan`.

Later rounds are judged against the fleet round's references (they hold
too few groups to make their own), scaled where the round moved as a whole:
each later round also re-runs up to `CONTROLS_PER_SHAPE` groups that were ok
in a fleet round (its controls, on GPUs the suspects do not use), and where
their ratio to their own fleet figures is beyond its noise, a suspect is
judged against the reference times that ratio (`round_judge.RoundShift`).  Where no control fits beside a
suspect, a slow figure against the fleet is "not judged" (the ceiling's
threshold still judges it): a round slowed as a whole cannot be told from a
fault without one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from .findings import (
    ABOVE_MODEL_V,
    FLEET,
    GPU,
    NO_ANSWER_C,
    NO_ANSWER_V,
    NODE_INTRA,
    RAIL,
    SLOW_V,
    SUSPECT_V,
    UNJUDGED_V,
    WRONG_V,
    Finding,
)
from .fleet import Fleet
from .physics import PhysicsRef
from .round_judge import (
    CONTROL,
    NO_ANSWER,
    OK,
    SLOW,
    UNJUDGED,
    WRONG,
    Baseline,
    References,
    RoundResult,
    RoundShift,
    Score,
    Thresholds,
    fleet_shift,
    floor_noise_reference,
    percent_of,
    references,
    score,
    symptoms,
)
from .scan_schedule import Group, Round, make_round

BAD = (SLOW, NO_ANSWER, WRONG)
DEFAULT_THRESHOLDS = Thresholds()
PARTNER_DEAD = "partner died"
VERDICT = {SLOW: SLOW_V, NO_ANSWER: NO_ANSWER_V, WRONG: WRONG_V}
# Controls per group shape in a later round: two make the round's movement the mean of two
# independent figures (a rescaled reference's spread widens by sqrt(1 + 1/n) for their noise)
# while adding little load beside the suspects.
CONTROLS_PER_SHAPE = 2
# Phases whose groups' run-to-run noise is the recorded floor (`Thresholds.floor_source`: all_reduce
# busbw of the GPUs of one node over NVLink, repeated on a new communicator; on the CPU backend its
# own record): each group is judged against the fleet's median with the floor as the spread where the
# figures agree with it (`round_judge.floor_noise_reference`): in a small fleet (`RepeatScan._leave_one_out`)
# the others' figures, from 8 groups all but the lowest (`RepeatScan._whole_fleet_refs`).
# Not the rail phase: no NIC figure was ever repeated on our machines (physics.HEALTHY's NIC record is
# a provisional stand-in); nor the local phase, whose floor no record cites yet.
FLOOR_NOISE_PHASES = ("intra",)
NO_CONTROL = ("no control ran beside it in this round (no group that was ok in a fleet round had its GPUs free), "
              "so a round slowed as a whole cannot be told from a fault")


def is_fleet(rnd: Round) -> bool:
    """A fleet round (everyone measured; its groups make the references)."""
    return rnd.purpose.split()[0] == "fleet"


@dataclass
class Recorded:
    round: Round
    result: RoundResult
    score: Score


def _bounded(result: RoundResult, i: int, status: str, why: str, symptom: str) -> tuple[str, str, str]:
    """A straggler's figure is an upper bound (health.runtime.live_rounds.LiveRounds): below the threshold it is
    slow evidence, said as a bound; above it, it says nothing (never "ok")."""
    bound = result.upper_bound.get(i)
    if bound is None or status in (CONTROL, NO_ANSWER, WRONG):
        return status, why, symptom
    if status == SLOW:
        return status, f"{bound}; {why}", symptom
    return UNJUDGED, f"not judged: only an upper bound, not below the threshold ({bound})", ""


class PhaseScan:
    """What both scans share: references per shape from the fleet round, scoring, dead hosts."""

    def __init__(self, fleet: Fleet, phase: str, thr: Thresholds, baseline: Baseline | None,
                 expected: Mapping[str, float] | None, physics: Mapping[str, PhysicsRef] | None = None):
        self.fleet, self.phase, self.thr = fleet, phase, thr
        self.baseline, self.expected = baseline, expected
        self.physics = dict(physics or {})  # shape -> its ceiling and threshold (physics.py)
        self.records: list[Recorded] = []
        self.refs: dict[str, References] = {}
        self.dead: dict[int, str] = {}  # host -> what the runtime saw (rank, pid)
        # group -> (fleet round, busbw, latency) where it was first measured steadily in a fleet round
        self.fleet_seen: dict[Group, tuple[str, float, float]] = {}

    def mark_dead(self, host: int, why: str) -> None:
        """The runtime saw this host's process die: leave it out of later rounds."""
        self.dead.setdefault(host, why)

    def _update_refs(self) -> None:
        """References per shape from every fleet round so far (one round, or the
        whole tournament of all pairs)."""
        fleet = [r for r in self.records if is_fleet(r.round)]
        shapes = dict.fromkeys(g.shape for r in fleet for g in r.round.groups)
        for shape in shapes:
            bw, lat = [], []
            for rec in fleet:
                # groups whose cycles disagreed are not evidence of the fleet's level either, nor is a
                # straggler's upper bound (a bound, not a figure)
                idx = [i for i, g in enumerate(rec.round.groups) if g.shape == shape and i not in rec.result.unstable
                       and i not in rec.result.upper_bound]
                bw.append(rec.result.busbw[idx])
                lat.append(rec.result.lat_us[[i for i in idx if i not in rec.result.unsteady_lat]])
            self.refs[shape] = references(np.concatenate(bw), np.concatenate(lat), shape, self.thr, self.baseline)

    def _score(self, rnd: Round, result: RoundResult) -> Score:
        fleet_round = is_fleet(rnd)
        limit = self.thr.suspect_z if fleet_round else self.thr.confirm_z
        shapes = [g.shape for g in rnd.groups]
        n = len(rnd.groups)
        out = Score([UNJUDGED] * n, np.full(n, np.nan), np.full(n, np.nan), [""] * n, [""] * n, [""] * n,
                    [False] * n)
        for shape in dict.fromkeys(shapes):
            whole = np.array([i for i, s in enumerate(shapes) if s == shape])
            parts = [whole[k:k + 1] for k in range(len(whole))] if self._leave_one_out(shape) else [whole]
            for idx in parts:
                self._score_part(rnd, result, shape, idx, fleet_round, limit, out)
        return out

    def _leave_one_out(self, shape: str) -> bool:
        """Whether each group of `shape` is judged against the others' figures alone (RepeatScan)."""
        return False

    def _fleet_refs(self, shape: str, group: Group) -> References:
        """The references a group of `shape` is judged against (all its fleet rounds' groups)."""
        return self.refs.get(shape) or References(None, None)

    def _score_part(self, rnd: Round, result: RoundResult, shape: str, idx: np.ndarray, fleet_round: bool,
                    limit: float, out: Score) -> None:
        """Scores the groups `idx` of one shape (all of them, or one judged against the others)."""
        sub = RoundResult(result.busbw[idx], result.lat_us[idx], result.wrong[idx],
                          {j: result.errors[int(i)] for j, i in enumerate(idx) if int(i) in result.errors},
                          unstable={j: result.unstable[int(i)] for j, i in enumerate(idx)
                                    if int(i) in result.unstable},
                          unsteady_lat={j: result.unsteady_lat[int(i)] for j, i in enumerate(idx)
                                        if int(i) in result.unsteady_lat})
        refs = self._fleet_refs(shape, rnd.groups[int(idx[0])])
        if not self.thr.judge_latency:
            refs = References(refs.busbw, None, refs.base_busbw, None, refs.notes)
        # a later round judged against the fleet or a baseline needs its controls, where a
        # fleet round had an ok group of this shape to serve as one (with none, every group was
        # slow against a baseline: a fleet-wide condition, which no control could show either)
        relative = not fleet_round and (refs.busbw is not None or refs.lat_us is not None) and \
            self._had_ok(shape)
        shift = self.round_shift(rnd, result, shape) if relative else None
        if shift is not None:
            refs = shift.apply(refs)
        sc = score(sub, refs, limit, self.thr.gross_fraction, self.physics.get(shape), self.thr.gross_max_groups)
        for j, i in enumerate(idx):
            status, why, symptom = sc.status[j], sc.why[j], sc.symptom[j]
            if rnd.groups[i] in rnd.controls:
                status, why, symptom = CONTROL, self._control_line(rnd, result, int(i)), ""
            elif relative and shift is None and status == SLOW and not sc.below_ceiling[j]:
                status, why, symptom = UNJUDGED, f"not judged: {why}; but {NO_CONTROL}", ""
            status, why, symptom = _bounded(result, int(i), status, why, symptom)
            out.status[i], out.why[i], out.symptom[i] = status, why, symptom
            out.physics[i], out.below_ceiling[i] = sc.physics[j], sc.below_ceiling[j]
            out.z_bw[i], out.z_lat[i] = sc.z_bw[j], sc.z_lat[j]

    def round_shift(self, rnd: Round, result: RoundResult, shape: str) -> RoundShift | None:
        """How this round moved as a whole, from its controls of `shape` that answered
        steadily and right: busbw and latency now over their fleet-round figures (geometric
        means).  None without such a control."""
        bw, lat, hosts = [], [], set()
        for i, g in enumerate(rnd.groups):
            if g not in rnd.controls or g.shape != shape or g not in self.fleet_seen:
                continue
            _, bw0, lat0 = self.fleet_seen[g]
            now = float(result.busbw[i])
            if not np.isfinite(now) or i in result.errors or i in result.unstable or result.wrong[i] > 0:
                continue
            bw.append(now / bw0)
            hosts.add(g.hosts)
            lat_now = float(result.lat_us[i])
            if np.isfinite(lat_now) and np.isfinite(lat0) and lat0 > 0 and i not in result.unsteady_lat:
                lat.append(lat_now / lat0)
        return RoundShift.from_ratios(bw, lat, len(hosts))

    def _control_line(self, rnd: Round, result: RoundResult, i: int) -> str:
        g = rnd.groups[i]
        name, bw0, _ = self.fleet_seen.get(g, ("", float("nan"), float("nan")))
        now = float(result.busbw[i])
        if not np.isfinite(now):
            return f"control: no answer ({result.errors.get(i, 'no figure')}): not used as the yardstick"
        return f"control: busbw {now:.4g} GB/s, {now / bw0:.2f}x its {name} figure ({bw0:.4g} GB/s)"

    def controls_for(self, groups: Sequence[Group]) -> list[Group]:
        """Up to CONTROLS_PER_SHAPE groups per shape of `groups` to run beside them: ok in a
        fleet round (the most typical first: smallest |z|), on no GPU the groups use, no dead
        host.  Only shapes judged against the fleet or a baseline need them (the ceiling is
        absolute)."""
        used = {m for g in groups for m in g.members}
        out: list[Group] = []
        for shape in dict.fromkeys(g.shape for g in groups):
            refs = self.refs.get(shape)
            if refs is None or (refs.busbw is None and refs.lat_us is None):
                continue
            cands = []
            for rec in self.records:
                if not is_fleet(rec.round):
                    continue
                for i, g in enumerate(rec.round.groups):
                    if g.shape != shape or rec.score.status[i] != OK or g not in self.fleet_seen:
                        continue
                    if set(g.hosts) & set(self.dead):
                        continue
                    z = float(rec.score.z_bw[i])
                    cands.append((abs(z) if np.isfinite(z) else np.inf, rec.round.index, i, g))
            taken = 0
            for *_, g in sorted(cands, key=lambda c: c[:3]):
                if taken >= CONTROLS_PER_SHAPE:
                    break
                if used & set(g.members):
                    continue
                out.append(g)
                used |= set(g.members)
                taken += 1
        return out

    def _had_ok(self, shape: str) -> bool:
        """Whether a fleet round measured a group of this shape ok (a possible control)."""
        return any(g.shape == shape and st == OK for rec in self.records if is_fleet(rec.round)
                   for g, st in zip(rec.round.groups, rec.score.status))

    def _remember(self, rnd: Round, result: RoundResult) -> None:
        """A fleet round's steady figures per group: what a control is later compared with."""
        for i, g in enumerate(rnd.groups):
            bw = float(result.busbw[i])
            if np.isfinite(bw) and bw > 0 and i not in result.unstable and i not in result.upper_bound \
                    and g not in rnd.controls:
                self.fleet_seen.setdefault(g, (rnd.name, bw, float(result.lat_us[i])))

    def record(self, rnd: Round, result: RoundResult) -> None:
        rec = Recorded(rnd, result, None)  # type: ignore[arg-type]
        self.records.append(rec)
        if is_fleet(rnd):
            self._remember(rnd, result)
            self._update_refs()
            for r in self.records:  # earlier rounds against the grown reference
                r.score = self._score(r.round, r.result)
        else:
            rec.score = self._score(rnd, result)

    def evidence_line(self, rec: Recorded, i: int) -> str:
        why = rec.score.why[i] or f"busbw {rec.result.busbw[i]:.4g} GB/s, z {rec.score.z_bw[i]:+.1f} (ok)"
        return f"{rec.round.name}: {rec.round.groups[i].label(self.fleet)}: {why}"

    def _fleet_notes(self) -> list[Finding]:
        out = []
        for shape, refs in self.refs.items():
            if refs.notes:
                out.append(Finding(FLEET, (), UNJUDGED_V, shape, evidence=list(refs.notes)))
            line = fleet_shift(refs, self.thr, shape)
            if line and refs.busbw is not None and refs.base_busbw is not None:
                out.append(Finding(FLEET, (), SLOW_V, shape, refs.busbw.center, refs.base_busbw.center,
                                   None, evidence=[line]))
        return out + self._above_model()

    def _above_model(self) -> list[Finding]:
        """A shape whose groups measured above its ceiling (fleet rounds): the model is not to be
        trusted there - said, with the likely reason, never taken as "as expected"."""
        above: dict[str, list[str]] = {}
        for rec in self.records:
            if not is_fleet(rec.round):
                continue
            for i, g in enumerate(rec.round.groups):
                line = rec.score.physics[i] if rec.score.physics else ""
                if line.startswith("above the model"):
                    above.setdefault(g.shape, []).append(f"{g.label(self.fleet)}: {line}")
        return [Finding(FLEET, (), ABOVE_MODEL_V, shape, evidence=[f"{len(lines)} group(s) above the model's "
                                                                      f"ceiling; e.g. {lines[0]}"])
                for shape, lines in above.items()]

    def _unjudged_note(self, whys: list[str]) -> list[Finding]:
        """One finding saying how many groups were not judged, and why (unknown, not guessed)."""
        if not whys:
            return []
        unstable = [w for w in whys if "timed cycles disagree" in w]
        lines = []
        if unstable:
            lines.append(f"{self.phase}: {len(unstable)} group(s) not judged because their timed cycles "
                         f"disagreed (an overloaded or unsteady host); e.g. {unstable[0].removeprefix('not judged: ')}")
        if len(unstable) < len(whys):
            rest = [w for w in whys if "timed cycles disagree" not in w]
            ceiling = next((w.split("; ", 1)[1] for w in rest if "; " in w), "no ceiling known for its shape")
            lines.append(f"{self.phase}: {len(rest)} group(s) not judged: fewer than "
                         f"{self.thr.min_groups} steady groups of their shape (or host pairs), no baseline, "
                         f"and {ceiling}")
        return [Finding(FLEET, (), UNJUDGED_V, f"{self.phase} phase", evidence=lines)]

    def unjudged_hosts(self) -> dict[int, list[str]]:
        """host -> why each fleet-round group holding it got no verdict (not judged), with
        the group named: such a host is not called healthy."""
        out: dict[int, list[str]] = {}
        for rec in self.records:
            if not is_fleet(rec.round) or rec.round.purpose.endswith("median of rails"):
                continue
            for i, g in enumerate(rec.round.groups):
                if rec.score.status[i] == UNJUDGED:
                    why = rec.score.why[i] or "not judged"
                    for h in g.hosts:
                        out.setdefault(h, []).append(f"{rec.round.name}: {g.label(self.fleet)}: {why}")
        return out

    def _pct(self, shape: str, value: float | None) -> float | None:
        return None if value is None else percent_of(self.expected, shape, value)


class RepeatScan(PhaseScan):
    """local / intra / rail: measure every group, then re-run the ones that looked bad."""

    def __init__(self, fleet: Fleet, phase: str, groups: Sequence[Group], thr: Thresholds = DEFAULT_THRESHOLDS,
                 baseline: Baseline | None = None, expected: Mapping[str, float] | None = None,
                 physics: Mapping[str, PhysicsRef] | None = None):
        super().__init__(fleet, phase, thr, baseline, expected, physics)
        self.groups = list(groups)

    def _leave_one_out(self, shape: str) -> bool:
        """Small fleets (at most `Thresholds.gross_max_groups` groups of the shape, from 3): each group
        against the others' figures alone.  With 3 or 4 groups a slow one is a third or a quarter of
        the fleet reference it is judged against: it moves the median and sets the MAD, and a 10 %
        slow NVLink was found in 40-70 % of simulated 3-4 host fleets
        (bench/results/health-sim-model-2026-11-28.md).  Left out, it meets the healthy ones' level."""
        refs = self.refs.get(shape)
        return (refs is not None and refs.busbw is not None and refs.busbw.source == "fleet"
                and self.thr.min_groups <= refs.busbw.n <= self.thr.gross_max_groups)

    def _fleet_refs(self, shape: str, group: Group) -> References:
        """The fleet references of `shape` without `group`'s own fleet figures (`_leave_one_out`):
        made from the other groups (at least 2), the baseline beside them as for the whole fleet;
        in the phases of FLOOR_NOISE_PHASES with the noise floor as the busbw spread where the
        others agree with it (`round_judge.floor_noise_reference`)."""
        if not self._leave_one_out(shape):
            return self._whole_fleet_refs(shape, group)
        bw, lat = [], []
        for rec in self.records:
            if not is_fleet(rec.round):
                continue
            for i, g in enumerate(rec.round.groups):
                if g.shape != shape or g == group or i in rec.result.unstable:
                    continue
                bw.append(float(rec.result.busbw[i]))
                if i not in rec.result.unsteady_lat:
                    lat.append(float(rec.result.lat_us[i]))
        thr = replace(self.thr, min_groups=2)
        refs = references(np.array(bw), np.array(lat), shape, thr, self.baseline)
        if self.phase in FLOOR_NOISE_PHASES and refs.busbw is not None:
            refs = replace(refs, busbw=floor_noise_reference(refs.busbw, bw, self.thr.bw_floor, self.thr.suspect_z))
        return refs

    def _whole_fleet_refs(self, shape: str, group: Group) -> References:
        """The references of all the fleet's groups of `shape` (from 8); in the phases of
        FLOOR_NOISE_PHASES with the noise floor as the busbw spread where the fleet's figures but its
        lowest agree with it (`round_judge.floor_noise_reference`): the others of the one group a
        single fault makes slow.  The lowest is left out of the test, not of the reference: with it,
        the -10 % group itself would fail the test in most fleets; the median of all (the center)
        moves by half a gap between neighbouring figures for one slow group of 8 or more.  Every
        group is judged against that one reference: a second-lowest group is tested with the
        lowest out of the figures, where its own others would include it - a reference at the
        floor for it too, the noise the record says these groups have.

        Why: the whole fleet's MAD, one standard error up (1.41x at 8 groups), with the slow group
        among its figures, made spreads of 2.1-3.8 % where a -10 % NVLink was missed at 8 hosts:
        84 % found (200 fleets, held-out seed 7001); against the floor where the figures agree
        with it, 99.5 % at 8 hosts and 99 % at 16 with no false alarm at the recorded noise (seeds 7001, 7005)
        (bench/results/health-sim-model-2026-11-28-intra-large.md)."""
        refs = super()._fleet_refs(shape, group)
        if self.phase not in FLOOR_NOISE_PHASES or refs.busbw is None or refs.busbw.source != "fleet":
            return refs
        bw = [float(rec.result.busbw[i]) for rec in self.records if is_fleet(rec.round)
              for i, g in enumerate(rec.round.groups)
              if g.shape == shape and i not in rec.result.unstable and i not in rec.result.upper_bound]
        v = np.sort(np.asarray(bw, dtype=float)[np.isfinite(bw)])
        if v.size < 3:
            return refs
        ref = floor_noise_reference(refs.busbw, v[1:], self.thr.bw_floor, self.thr.suspect_z)
        return replace(refs, busbw=ref)

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
        return make_round(self.phase, 2, "confirm", again, self.controls_for(again)) if again else None

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
        unjudged: list[str] = []
        for i, g in enumerate(first.round.groups):
            status = first.score.status[i]
            if status == UNJUDGED:
                unjudged.append(first.score.why[i])
                continue
            if status not in BAD:
                continue
            evidence = [self.evidence_line(first, i)]
            dead = [h for h in g.hosts if h in self.dead]
            if dead and self.phase != "rail":
                out.append(Finding(NO_ANSWER_C, (self.fleet.hosts[dead[0]],), NO_ANSWER_V,
                                   evidence=evidence + [self.dead[dead[0]]]))
                continue
            if self._key(g) in second:
                rec, j = second[self._key(g)]
                evidence.append(self.evidence_line(rec, j))
                status2 = rec.score.status[j]
                verdict = VERDICT.get(status2) if status2 in BAD else None
                if status2 == UNJUDGED:
                    verdict = SUSPECT_V  # measured again, but the second figure could not be judged
                if verdict and not symptoms(first.score.symptom[i]) & symptoms(rec.score.symptom[j]):
                    verdict = SUSPECT_V  # bad twice, but not the same way: not corroborated
                    evidence.append("bad twice with different symptoms: not a confirmation")
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
        slot = None
        if self.phase == "local":
            slot = g.members[0][1]
            comp, hosts, detail = GPU, (host,), f"{self.fleet.unit} {slot}"
        elif self.phase == "intra":
            comp, hosts, detail = NODE_INTRA, (host,), self.fleet.units(len(g.members))
        else:
            comp, hosts, detail = RAIL, (), f"rail {g.rail}"
        if verdict == NO_ANSWER_V and self.phase in ("local", "intra"):
            comp, slot = NO_ANSWER_C, None
        return Finding(comp, hosts, verdict, detail, measured, expected, z, evidence=evidence,
                       pct_expected=self._pct(g.shape, measured), slot=slot)

    def tested_hosts(self) -> set[int]:
        out: set[int] = set()
        for rec in self.records:
            for i, g in enumerate(rec.round.groups):
                if np.isfinite(rec.result.busbw[i]):
                    out.update(g.hosts)
        return out
