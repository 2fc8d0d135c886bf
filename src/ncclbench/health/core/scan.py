"""A whole health scan: the phases in order, each to its verdict, then one report.

`run_scan` knows nothing about how a round is measured: it hands each round
to a `run_round` callable (the simulated fabric in `ncclbench.simulation.fabric`, real
communicators in `health.runtime.live_rounds`) and gets one `RoundResult` back.  So the
schedule, the judgement and the localization the simulator is scored on
are exactly the code the real scan runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .causes import HostCauses, attach_causes
from .findings import NO_ANSWER_C, NO_ANSWER_V, NODE_COMPONENTS, SUSPECT_V, Finding, drain_hosts, merge
from .fleet import Fleet
from .leaf_switches import Topology
from .localize import PhaseScan, RepeatScan
from .pair_phase import PairScan
from .physics import PhysicsRef
from .round_judge import Baseline, RoundResult, Thresholds
from .scan_schedule import (
    LEAF_CROSSINGS,
    PAIR_SHAPES,
    PHASES,
    Group,
    Round,
    intra_groups,
    local_groups,
    make_round,
    rail_groups,
)
from .sharing import round_loads

# what a host can come out as; all but healthy and faulty leave the scan unresolved (exit 9)
NOT_JUDGED_S = "not judged"
HOST_STATUSES = ("healthy", "faulty", NOT_JUDGED_S, "suspect", "partly tested", "not tested")
UNRESOLVED = (NOT_JUDGED_S, "suspect", "partly tested", "not tested")


@dataclass(frozen=True)
class ScanConfig:
    phases: tuple[str, ...] = PHASES
    pair_shape: str = "rails"
    all_pairs: bool | None = None  # None: every host pair up to scan_schedule.ALL_PAIRS_MAX_HOSTS hosts
    max_pair_rounds: int = 4
    thresholds: Thresholds = Thresholds()
    baseline: Baseline | None = None
    expected: Mapping[str, float] | None = None  # ceiling per group shape (the explain model), when known
    physics: Mapping[str, PhysicsRef] | None = None  # per shape: its ceiling's threshold at the scan's size
    causes: Mapping[str, HostCauses] | None = None  # per host: explain's traps (named in the findings)
    notes: tuple[str, ...] = ()  # what the set-up found that the report must say (crowding.latency_note)
    devices: Mapping[int, str] = field(default_factory=dict)  # world rank -> device it shares (sharing.py)
    # each host's leaf switch (--topology): the pairs phase crosses every leaf pair where it does not
    # measure every host pair, and its model judges the paths between leaves (pair_phase, pair_model)
    topology: Topology | None = None
    leaf_crossings: int = LEAF_CROSSINGS  # host pairs crossing each leaf pair (scan_schedule.leaf_rounds)

    def __post_init__(self) -> None:
        bad = [p for p in self.phases if p not in PHASES]
        if bad:
            raise ValueError(f"unknown phase(s) {', '.join(bad)}; phases are {', '.join(PHASES)}")
        if self.pair_shape not in PAIR_SHAPES:
            raise ValueError(f"pair shape must be one of {', '.join(PAIR_SHAPES)}")


@dataclass
class RoundLog:
    name: str
    purpose: str
    groups: int
    answered: int
    wall_s: float


@dataclass
class HealthReport:
    fleet: Fleet
    findings: list[Finding]
    notes: list[str]
    rounds: list[RoundLog]
    # host -> faulty / suspect / not judged / healthy / partly tested / not tested
    host_status: dict[str, str]
    references: dict[str, dict] = field(default_factory=dict)
    measurements: list[dict] = field(default_factory=list)  # every group of every round, as judged
    not_judged: dict[str, list[str]] = field(default_factory=dict)  # host -> why a group of it got no verdict

    @property
    def confirmed(self) -> list[Finding]:
        return [f for f in self.findings if f.confirmed]

    @property
    def faults_found(self) -> bool:
        return bool(self.confirmed)

    @property
    def drain(self) -> list[str]:
        return drain_hosts(self.findings)

    def count(self) -> dict[str, int]:
        """Hosts per status, every status counted apart: healthy, faulty, not judged, ..."""
        out = {k: 0 for k in HOST_STATUSES}
        for st in self.host_status.values():
            out[st] = out.get(st, 0) + 1
        return out

    @property
    def unresolved(self) -> list[str]:
        """Hosts the scan could not call healthy or faulty: not judged, suspect (one bad
        measurement, not confirmed), partly or not tested."""
        return [h for h, st in self.host_status.items() if st in UNRESOLVED]

    @property
    def open_suspects(self) -> list[Finding]:
        """Unconfirmed suspects of any component (a host, a link between two hosts fine with
        everyone else, a rail): bad once and not settled, so the scan is not "healthy"."""
        return [f for f in self.findings if not f.confirmed and f.verdict == SUSPECT_V]

    @property
    def wall_s(self) -> float:
        return sum(r.wall_s for r in self.rounds)

    def to_json(self) -> dict:
        return {
            "hosts": list(self.fleet.hosts),
            "gpus_per_host": [self.fleet.gpus(h) for h in range(self.fleet.nhosts)],
            "slot_unit": self.fleet.unit,  # what a slot is: "gpu", or "rank" on the CPU backend
            "faults_found": self.faults_found,
            "drain": self.drain,
            "findings": [f.to_json() for f in self.findings],
            "host_status": self.host_status,
            "summary": self.count(),
            "not_judged": self.not_judged,
            "notes": list(self.notes),
            "rounds": [vars(r) for r in self.rounds],
            "references": self.references,
            "measurements": self.measurements,
        }


def report_from_json(doc: Mapping) -> HealthReport:
    """A report read back from its JSON (`to_json`, as written by --json or the store), for
    `ncclbench show` and the HTML page.  World ranks are numbered host by host."""
    hosts = tuple(doc.get("hosts", ()))
    counts = list(doc.get("gpus_per_host", [1] * len(hosts)))
    ranks, start = [], 0
    for n in counts:
        ranks.append(tuple(range(start, start + int(n))))
        start += int(n)
    names = {f.name for f in dataclasses.fields(Finding)}
    findings = []
    for f in doc.get("findings", ()):
        kw: dict[str, Any] = {k: v for k, v in f.items() if k in names}
        kw["hosts"] = tuple(kw.get("hosts", ()))
        findings.append(Finding(**kw))
    rounds = [RoundLog(**{k: r[k] for k in ("name", "purpose", "groups", "answered", "wall_s")})
              for r in doc.get("rounds", ())]
    fleet = Fleet(hosts, tuple(ranks), str(doc.get("slot_unit", "gpu")))
    return HealthReport(fleet, findings, list(doc.get("notes", ())), rounds,
                        dict(doc.get("host_status", {})), dict(doc.get("references", {})),
                        list(doc.get("measurements", ())),
                        {str(k): list(v) for k, v in dict(doc.get("not_judged", {})).items()})


RunRound = Callable[[Round], RoundResult]


class ScanEnded(Exception):
    """Raised by a `run_round` that cannot go on (the launcher ended the job): the
    scan stops, keeps every round recorded so far and says why in its notes."""


def run_scan(fleet: Fleet, config: ScanConfig, run_round: RunRound,
             dead_hosts: Callable[[], Mapping[int, str]] | None = None,
             expected_hosts: list[str] | None = None,
             lost_hosts: Callable[[], Mapping[int, str]] | None = None) -> HealthReport:
    """Run every applicable phase through `run_round`; `dead_hosts()` says which hosts
    the runtime saw die or go silent (host index -> rank, pid), so later rounds leave
    them out and name them; `lost_hosts()` the hosts left out without blame (stuck
    behind a stopped member), reported as partly tested."""
    notes = fleet.problems(expected_hosts) + list(config.notes)
    scans, skipped = _phase_scans(fleet, config)
    notes.extend(skipped)
    logs: list[RoundLog] = []
    dead: dict[int, str] = {}
    ended = _run_phases(scans, fleet, config, run_round, dead_hosts, lost_hosts, notes, logs, dead)
    for h, why in (dead_hosts() if dead_hosts else {}).items():
        dead.setdefault(h, why)
    notes.extend(n for s in scans if isinstance(s, PairScan) and s.records for n in [s.coverage_note()] if n)
    lost = {h: why for h, why in (lost_hosts() if lost_hosts else {}).items() if h not in dead}
    findings, tested, unjudged = _scan_findings(fleet, config, scans, dead, lost)
    status = _host_status(fleet, findings, tested, unjudged)
    for h, why in lost.items():
        status[fleet.hosts[h]] = "partly tested"
        notes.append(why)
    if ended:  # what was measured was fine, but the later phases never ran
        for name, st in status.items():
            if st == "healthy":
                status[name] = "partly tested"
    if expected_hosts:
        for name in expected_hosts:
            status.setdefault(name, "not tested")
    refs = {shape: {"busbw": vars(r.busbw) if r.busbw else None, "lat_us": vars(r.lat_us) if r.lat_us else None}
            for scan in scans for shape, r in scan.refs.items()}
    not_judged = {fleet.hosts[h]: whys for h, whys in sorted(unjudged.items())
                  if status.get(fleet.hosts[h]) == NOT_JUDGED_S}
    return HealthReport(fleet, findings, notes, logs, status, refs, _measurements(fleet, scans), not_judged)


def _run_phases(scans: list[RepeatScan | PairScan], fleet: Fleet, config: ScanConfig, run_round: RunRound,
                dead_hosts: Callable[[], Mapping[int, str]] | None,
                lost_hosts: Callable[[], Mapping[int, str]] | None,
                notes: list[str], logs: list[RoundLog], dead: dict[int, str]) -> bool:
    """Every phase's rounds in turn, each without the hosts that died or were lost by then; `logs`,
    `dead` and `notes` filled as it goes.  True when the runtime ended the scan early."""
    silent: dict[int, list[str]] = {}
    for scan in scans:
        while True:
            for h, why in (dead_hosts() if dead_hosts else {}).items():
                dead.setdefault(h, why)
            for h, why in dead.items():
                scan.mark_dead(h, why)
            lost = dict(lost_hosts()) if lost_hosts else {}
            for h in lost:
                scan.mark_dead(h, "")  # its measurements say nothing about its partners
            rnd = scan.next_round()
            if rnd is None:
                break
            rnd = _without_dead(rnd, {**dead, **lost})
            if not rnd.groups:
                break
            try:
                result = run_round(rnd)
            except ScanEnded as stop:
                notes.append(f"scan ended during {rnd.name}: {stop}; later rounds did not run")
                return True
            _record_round(scan, rnd, result, fleet, config, logs)
            _note_silent(rnd, result, silent, dead)
    return False


def _record_round(scan: RepeatScan | PairScan, rnd: Round, result: RoundResult, fleet: Fleet, config: ScanConfig,
                  logs: list[RoundLog]) -> None:
    """A measured round into its phase, with what shared each GPU (time-sliced groups' latency unsteady)."""
    loads, time_sliced = round_loads(rnd, fleet, config.devices)
    result.load.update(loads)
    for i, why in time_sliced.items():
        result.unsteady_lat.setdefault(i, why)
    logs.append(RoundLog(rnd.name, rnd.purpose, len(rnd.groups), int(np.isfinite(result.busbw).sum()), result.wall_s))
    scan.record(rnd, result)


def _scan_findings(fleet: Fleet, config: ScanConfig, scans: list[RepeatScan | PairScan], dead: Mapping[int, str],
                   lost: Mapping[int, str]) -> tuple[list[Finding], set[int], dict[int, list[str]]]:
    """(findings merged across phases with their causes, hosts tested, hosts not judged and why): a
    host that stopped answering is a finding; one lost behind a stopped member is not."""
    raw: list[Finding] = []
    tested: set[int] = set()
    unjudged: dict[int, list[str]] = {}
    for scan in scans:
        raw.extend(scan.findings())
        tested |= scan.tested_hosts()
        for h, whys in scan.unjudged_hosts().items():
            unjudged.setdefault(h, []).extend(whys)
    raw.extend(Finding(NO_ANSWER_C, (fleet.hosts[h],), NO_ANSWER_V, evidence=[why]) for h, why in dead.items())
    lost_names = {fleet.hosts[h] for h in lost}
    raw = [f for f in raw if not (f.component == NO_ANSWER_C and f.hosts and f.hosts[0] in lost_names)]
    findings = merge(raw)
    if config.causes:
        attach_causes(findings, config.causes)
    return findings, tested, unjudged


def _measurements(fleet: Fleet, scans: list) -> list[dict]:
    out = []
    for scan in scans:
        for rec in scan.records:
            groups = []
            for i, g in enumerate(rec.round.groups):
                groups.append({"group": g.label(fleet), "shape": g.shape, "hosts": [fleet.hosts[h] for h in g.hosts],
                               "gpus": [s for _, s in g.members], "rail": g.rail,
                               "busbw": _f(rec.result.busbw[i]), "lat_us": _f(rec.result.lat_us[i]),
                               "wrong": int(rec.result.wrong[i]), "status": rec.score.status[i],
                               "z_busbw": _f(rec.score.z_bw[i]), "z_lat": _f(rec.score.z_lat[i]),
                               "why": rec.score.why[i] or None,
                               "upper_bound": rec.result.upper_bound.get(i),
                               "reference": _ref_source(scan, g.shape),
                               "ceiling": (rec.score.physics[i] if rec.score.physics else "") or None})
            out.append({"round": rec.round.name, "purpose": rec.round.purpose, "groups": groups})
    return out


def _ref_source(scan: PhaseScan, shape: str) -> str | None:
    """Where a group's busbw reference came from: "fleet", "baseline NAME", or None (none)."""
    refs = scan.refs.get(shape)
    return refs.busbw.source if refs is not None and refs.busbw is not None else None


def _f(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


def _phase_scans(fleet: Fleet, cfg: ScanConfig) -> tuple[list, list[str]]:
    scans: list = []
    skipped: list[str] = []
    thr, base, exp, phys = cfg.thresholds, cfg.baseline, cfg.expected, cfg.physics
    for phase in cfg.phases:
        groups = {"local": local_groups, "intra": intra_groups, "rail": rail_groups}.get(phase, lambda f: ())(fleet)
        if phase in ("local", "intra", "rail") and groups:
            scans.append(RepeatScan(fleet, phase, groups, thr, base, exp, phys))
        elif phase == "intra":
            skipped.append("intra phase skipped: no host has two GPUs or more")
        elif phase == "rail" and fleet.nhosts >= 2:
            skipped.append("rail phase skipped: no GPU slot is present on two hosts")
        elif phase == "pairs" and fleet.nhosts >= 2:
            leaves = None
            if cfg.topology is not None:
                missing = cfg.topology.missing(fleet.hosts)
                if missing:
                    skipped.append(f"--topology {cfg.topology.source}: {len(missing)} host(s) under no leaf in it "
                                   f"({', '.join(missing[:6])}): the paths between leaves are not tested")
                else:
                    leaves = cfg.topology.leaves_for(fleet.hosts)
            scans.append(PairScan(fleet, thr, cfg.pair_shape, cfg.max_pair_rounds, cfg.all_pairs, base, exp,
                                  physics=phys, leaves=leaves, leaf_crossings=cfg.leaf_crossings))
    return scans, skipped


def _note_silent(rnd: Round, result: RoundResult, silent: dict[int, list[str]], dead: dict[int, str]) -> None:
    """A host whose own groups (local, intra: no other host in them) gave no answer in
    two rounds is left out of the rest of the scan, so each later phase does not wait
    out its timeout again; the pair phase pins silent hosts by itself."""
    for i, g in enumerate(rnd.groups):
        if len(g.hosts) == 1 and (i in result.errors or not np.isfinite(result.busbw[i])):
            names = silent.setdefault(g.hosts[0], [])
            if rnd.name not in names:
                names.append(rnd.name)
    for h, names in silent.items():
        if len(names) >= 2 and h not in dead:
            dead[h] = f"no answer in {' and '.join(names)}: left out of the later rounds"


def _without_dead(rnd: Round, dead: Mapping[int, str]) -> Round:
    if not dead:
        return rnd
    groups = []
    for g in rnd.groups:
        if g in rnd.controls:
            continue
        if not set(g.hosts) & set(dead):
            groups.append(g)
        elif g.phase == "rail":
            members = tuple(m for m in g.members if m[0] not in dead)
            if len(members) >= 2:
                groups.append(Group(g.phase, members, g.rail))
    controls = [g for g in rnd.controls if not set(g.hosts) & set(dead)]
    return make_round(rnd.phase, rnd.index, rnd.purpose, groups, controls)


def _host_status(fleet: Fleet, findings: list[Finding], tested: set[int],
                 unjudged: Mapping[int, list[str]] | None = None) -> dict[str, str]:
    """Healthy only where every group holding the host got a verdict and none was bad: a host
    with a group that could not be judged is "not judged", never healthy by default."""
    status = {name: ((NOT_JUDGED_S if h in (unjudged or {}) else "healthy") if h in tested else "not tested")
              for h, name in enumerate(fleet.hosts)}
    for f in findings:
        if f.component not in NODE_COMPONENTS:
            continue  # a slow link is between two hosts that work with everyone else
        for name in f.hosts:
            if f.confirmed:
                status[name] = "faulty"
            elif status.get(name) != "faulty":
                status[name] = "suspect"
    return status
