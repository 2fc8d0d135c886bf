"""The coordinator's whole job: wait for the ranks, run the scan, write the
verdict, and tell every rank how to leave.

Leaving matters when a rank stopped: MPI_Finalize (and mpiexec) would wait
for it forever.  Then one live rank is told to MPI_Abort with the scan's
exit code, which makes the launcher end every process, the stopped one
included, and the others leave without finalizing.  Everything that matters
is written before that.
"""

from __future__ import annotations

import dataclasses
import datetime
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TextIO

from ... import __version__
from ...core.config import Backend
from ...core.errors import BenchError, ExitCode
from ..core.crowding import crowded_machines, latency_note
from ..core.fleet import Fleet
from ..core.leaf_switches import check_hosts
from ..core.round_judge import RoundResult, thresholds_for
from ..core.scan import HealthReport, ScanConfig, run_scan
from ..core.scan_schedule import Round
from ..core.sharing import shared_devices, sharing_note
from ..outputs.baseline_file import check_baseline_hosts, check_baseline_version
from ..outputs.scan_output import emit, scan_document
from .control_channel import Coordinator
from .group_measure import GroupSpec
from .live_rounds import LiveRounds, fleet_from
from .messages import Dead, End, Facts, Leave, Setup


@dataclass(frozen=True)
class ScanOutcome:
    """What one coordinated scan gave: its exit code, the typed report and what was
    recorded about the run (`meta`); `document()` is the JSON that --json writes."""

    code: int
    report: HealthReport
    meta: dict

    def document(self) -> dict:
        return scan_document(self.report, self.meta)


@dataclass
class Outputs:
    json_path: str | None = None
    drain_path: str | None = None
    stream: TextIO = field(default_factory=lambda: sys.stdout)
    progress: bool = False  # one line per round on stderr (only on a terminal)
    accept_not_judged: bool = False  # a scan with no fault but something not judged exits 0, not 9


def coordinate(coord: Coordinator, cfg: ScanConfig, spec: GroupSpec, round_timeout_s: float, join_timeout_s: float,
               outputs: Outputs, backend: str, argv: Sequence[str] = (),
               expected_hosts: list[str] | None = None, store: Callable[[dict], str | None] | None = None,
               spec_for: Callable[[Backend], GroupSpec] | None = None) -> ScanOutcome:
    """Run the scan over the joined ranks and write its outputs; the outcome (exit code, report).
    `backend` labels the run (the ranks' own backend, said at set-up, wins);
    `store(doc)`: keep the scan (the result store); returns a line to print, or None;
    `spec_for(backend)`: the spec for the ranks' backend, where this coordinator could not
    know it before they joined (--serve without --bw-size)."""
    coord.wait_joined(join_timeout_s)
    fleet = fleet_from(coord)
    rounds = LiveRounds(coord, fleet, spec, round_timeout_s, _progress if outputs.progress else None)
    try:
        code, report, meta = _scan(coord, fleet, cfg, spec, rounds, join_timeout_s, backend, argv, expected_hosts,
                                   outputs, spec_for)
    except BenchError as exc:  # a launch problem found at set-up (a rank without its GPU, ...): its code
        _dismiss(coord, rounds, int(exc.code), ending=Leave.EXIT)
        raise
    except Exception as exc:
        # A bug of the scan's own (not a fault of the fleet) must not leave the ranks waiting for
        # rounds that will never come: every rank is told to leave now with the internal error's
        # code, and the caller prints one line naming the error (issue 25: a coordinator thread
        # died with a traceback and every rank waited 90 s).
        _dismiss(coord, rounds, int(ExitCode.INTERNAL), ending=Leave.EXIT)
        raise BenchError(f"health: internal error in the coordinator: {type(exc).__name__}: {exc}; the scan "
                         "ended without a verdict", ExitCode.INTERNAL) from exc
    _dismiss(coord, rounds, code)
    if store is not None:
        line = store(scan_document(report, meta))
        if line:
            print(line, file=sys.stderr, flush=True)
    return ScanOutcome(code, report, meta)


def _scan(coord: Coordinator, fleet: Fleet, cfg: ScanConfig, spec: GroupSpec, rounds: LiveRounds,
          join_timeout_s: float, backend: str, argv: Sequence[str], expected_hosts: list[str] | None,
          outputs: Outputs, spec_for: Callable[[Backend], GroupSpec] | None = None) -> tuple[int, HealthReport, dict]:
    """Set-up, the scan and its written outputs: (exit code, report, what was recorded)."""
    if cfg.baseline is not None:
        check_baseline_hosts(cfg.baseline, fleet)
        check_baseline_version(cfg.baseline)
    if cfg.topology is not None:
        check_hosts(cfg.topology, fleet.hosts)
    answers = exchange_setup(coord, fleet, join_timeout_s)
    said = ranks_backend(answers)
    if said is not None and spec_for is not None:
        spec = rounds.spec = spec_for(said)
    if said is Backend.MPI:
        fleet = dataclasses.replace(fleet, unit="rank")
    cfg, facts = apply_facts(fleet, cfg, answers, spec.bw_bytes)
    if said is not None and not backend.startswith(said.label):  # the ranks know their backend better (--serve)
        rest = backend.split(", ", 1)[1] if ", " in backend else ""
        backend = said.label + (f", {rest}" if rest else "")
    started = datetime.datetime.now(datetime.timezone.utc)
    report = run_scan(fleet, cfg, rounds, dead_hosts=rounds.dead_hosts, expected_hosts=expected_hosts,
                      lost_hosts=rounds.lost_hosts)
    meta = {"version": __version__, "backend": backend, "argv": list(argv),
            "start_time": started.isoformat(timespec="seconds"),
            "spec": vars(spec), "round_timeout_s": rounds.timeout,
            "ranks": {str(r): str(i) for r, i in sorted(coord.ranks.items())},
            "out_of_scan": {str(r): why for r, why in sorted({**rounds.stuck, **rounds.out()}.items())},
            "accept_not_judged": outputs.accept_not_judged, **facts}
    code = emit(report, meta, outputs.json_path, outputs.drain_path, outputs.stream)
    return code, report, meta


def exchange_setup(coord: Coordinator, fleet: Fleet, timeout_s: float) -> dict[int, dict]:
    """Before the scan, every rank is told its GPU slot (and one rank per host to read the
    host's topology) and answers with its facts: backend, GPU, PCI address, topology, or
    an error.  A rank that does not answer in `timeout_s` is left to the scan's own
    handling (it will not answer its groups either)."""
    waiting = set()
    for r in range(coord.size):
        _, slot = fleet.where(r)
        if coord.send(r, Setup(slot, slot == 0)):
            waiting.add(r)
    answers: dict[int, dict] = {}
    deadline = time.monotonic() + timeout_s
    while waiting and time.monotonic() < deadline:
        item = coord.receive(min(0.5, max(0.0, deadline - time.monotonic())))
        if item is None:
            continue
        rank, msg = item
        if isinstance(msg, Dead):
            waiting.discard(rank)
        elif isinstance(msg, Facts):
            answers[rank] = msg.answer
            waiting.discard(rank)
    return answers


def apply_facts(fleet: Fleet, cfg: ScanConfig, answers: dict[int, dict],
                bw_bytes: int | None = None) -> tuple[ScanConfig, dict]:
    """The ranks' set-up answers -> the scan's configuration (expected ceilings and, at the
    scan's bandwidth size `bw_bytes`, their thresholds) and what the report records about
    them, with explain's trap checks per host over its facts and the ranks' NCCL settings.
    A rank that could not set up (no GPU for its slot, no libnccl) is a launch problem:
    one BenchError naming it, with its exit code."""
    failed = sorted((r, a) for r, a in answers.items() if a.get("error"))
    if failed:
        r, a = failed[0]
        more = f" (and {len(failed) - 1} more rank(s))" if len(failed) > 1 else ""
        raise BenchError(f"health: rank {r} (host {fleet.hosts[fleet.where(r)[0]]}): {a['error']}{more}",
                         ExitCode(int(a.get("code", ExitCode.INTERNAL))))
    facts: dict = {}
    envs = host_envs(fleet, answers)
    if any(envs.values()):
        facts["nccl_env"] = {h: dict(sorted(e.items())) for h, e in envs.items() if e}
    said = ranks_backend(answers)
    if said is not None:  # the noise floors of the backend the ranks run (health.core.round_judge.thresholds_for)
        floors = thresholds_for(said is Backend.NCCL)
        cfg = dataclasses.replace(cfg, thresholds=dataclasses.replace(
            cfg.thresholds, bw_floor=floors.bw_floor, lat_floor=floors.lat_floor, floor_source=floors.floor_source))
    crowded = crowded_machines(answers) if said is Backend.MPI else []
    if crowded and cfg.thresholds.judge_latency:
        cfg = dataclasses.replace(cfg, thresholds=dataclasses.replace(cfg.thresholds, judge_latency=False),
                                  notes=(*cfg.notes, latency_note(crowded)))
    devices = shared_devices(answers)
    if devices:
        note = sharing_note(fleet, devices)
        cfg = dataclasses.replace(cfg, devices=devices, notes=(*cfg.notes, *([note] if note else [])))
    facts["thresholds"] = cfg.thresholds.describe()
    gpus = {r: a for r, a in answers.items() if a.get("pci")}
    if not gpus:
        return cfg, facts
    from ...explain.topology import HostTopology
    from ..core.causes import host_causes
    from ..core.expected_ceilings import expected_map, representative_groups, shape_ceilings
    from ..core.physics import physics_reference

    topologies = {}
    for r, a in answers.items():
        if a.get("topology"):
            topologies[fleet.hosts[fleet.where(r)[0]]] = HostTopology.from_dict(a["topology"])
    version = next((a["nccl"] for a in answers.values() if a.get("nccl")), None)
    pcis = {r: a["pci"] for r, a in gpus.items()}
    env0 = next((e for e in envs.values() if e), {})
    ceilings = shape_ceilings(fleet, representative_groups(fleet, cfg.phases, cfg.pair_shape), topologies,
                              pcis, version, env0)
    physics = {c.shape: physics_reference(c.shape, c.ceiling, c.bound, c.ngpus, bw_bytes, c.algorithm,
                                          c.algorithm_source, c.nnodes)
               for c in ceilings if c.ceiling is not None and bw_bytes}
    facts["expected"] = {c.shape: {**c.to_json(), **({"physics": physics[c.shape].to_json()}
                                                     if c.shape in physics else {})} for c in ceilings}
    causes = host_causes(fleet, topologies, pcis, envs)
    if causes:
        facts["causes"] = {h: c.to_json() for h, c in causes.items()}
    facts["gpus"] = {str(r): f"{a.get('gpu', '?')} {a['pci']} (cuda device {a.get('device')})"
                     for r, a in sorted(gpus.items())}
    if version:
        facts["nccl"] = version
    notes = [a["topology_unread"] for a in answers.values() if a.get("topology_unread")]
    if notes:
        facts["topology_unread"] = sorted(set(notes))
    return dataclasses.replace(cfg, expected=expected_map(ceilings) or None, physics=physics or None,
                               causes=causes or None), facts


def ranks_backend(answers: Mapping[int, dict]) -> Backend | None:
    """The backend every rank that answered its set-up said it runs, or None (none said, or
    they differ)."""
    said = {a["backend"] for a in answers.values() if a.get("backend")}
    if len(said) != 1:
        return None
    try:
        return Backend(said.pop())
    except ValueError:  # a rank of another version: not a backend this one knows
        return None


def host_envs(fleet: Fleet, answers: Mapping[int, dict]) -> dict[str, dict[str, str]]:
    """host -> the NCCL_* settings its ranks run with (the first rank of the host that said)."""
    out: dict[str, dict[str, str]] = {}
    for r, a in sorted(answers.items()):
        host = fleet.hosts[fleet.where(r)[0]]
        if host not in out and isinstance(a.get("env"), dict):
            out[host] = {str(k): str(v) for k, v in a["env"].items()}
    return out


def _dismiss(coord: Coordinator, rounds: LiveRounds, code: int, ending: Leave = Leave.FINALIZE) -> None:
    """Every live rank told to leave with `code`: `ending` (finalize, or exit after an error), but
    one rank aborts the job and the others exit where a rank stopped (the launcher ends it)."""
    out = {**rounds.out(), **rounds.stuck}
    live = sorted(r for r in coord.ranks if r not in out and r not in coord.dead)
    stuck = bool(rounds.silent or rounds.stuck)
    for r in live:
        how = ending
        if stuck:
            how = Leave.ABORT if r == live[0] else Leave.EXIT
        coord.send(r, End(code, how))


def _progress(rnd: Round, result: RoundResult) -> None:
    import numpy as np

    answered = int(np.isfinite(result.busbw).sum())
    print(f"# health: {rnd.name} ({rnd.purpose}): {answered}/{len(rnd.groups)} groups answered in "
          f"{result.wall_s:.1f} s", file=sys.stderr, flush=True)
