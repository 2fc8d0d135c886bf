"""The coordinator's whole job: wait for the ranks, run the scan, write the
verdict, and tell every rank how to leave.

Leaving matters when a rank stopped: MPI_Finalize (and mpiexec) would wait
for it forever.  Then one live rank is told to MPI_Abort with the scan's
exit code, which makes the launcher end every process, the stopped one
included, and the others leave without finalizing.  Everything that matters
is written before that.
"""

from __future__ import annotations

import datetime
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TextIO

from .. import __version__
from .control import Coordinator
from .mpi_group import GroupSpec
from .output import emit
from .runtime import LiveRounds, fleet_from
from .scan import ScanConfig, run_scan


@dataclass
class Outputs:
    json_path: str | None = None
    drain_path: str | None = None
    stream: TextIO = field(default_factory=lambda: sys.stdout)
    progress: bool = False  # one line per round on stderr (only on a terminal)


def coordinate(coord: Coordinator, cfg: ScanConfig, spec: GroupSpec, round_timeout_s: float, join_timeout_s: float,
               outputs: Outputs, backend: str, argv: Sequence[str] = (),
               expected_hosts: list[str] | None = None) -> int:
    coord.wait_joined(join_timeout_s)
    fleet = fleet_from(coord)
    progress = _progress if outputs.progress else None
    rounds = LiveRounds(coord, fleet, spec, round_timeout_s, progress)
    started = datetime.datetime.now(datetime.timezone.utc)
    report = run_scan(fleet, cfg, rounds, dead_hosts=rounds.dead_hosts, expected_hosts=expected_hosts,
                      lost_hosts=rounds.lost_hosts)
    meta = {"version": __version__, "backend": backend, "argv": list(argv),
            "start_time": started.isoformat(timespec="seconds"),
            "spec": vars(spec), "round_timeout_s": round_timeout_s,
            "ranks": {str(r): str(i) for r, i in sorted(coord.ranks.items())},
            "out_of_scan": {str(r): why for r, why in sorted({**rounds.stuck, **rounds.out()}.items())}}
    code = emit(report, meta, outputs.json_path, outputs.drain_path, outputs.stream)
    _dismiss(coord, rounds, code)
    return code


def _dismiss(coord: Coordinator, rounds: LiveRounds, code: int) -> None:
    out = {**rounds.out(), **rounds.stuck}
    live = sorted(r for r in coord.ranks if r not in out and r not in coord.dead)
    stuck = bool(rounds.silent or rounds.stuck)
    for r in live:
        how = "finalize"
        if stuck:
            how = "abort" if r == live[0] else "exit"
        coord.send(r, ("end", code, how))


def _progress(rnd, result) -> None:
    import numpy as np

    answered = int(np.isfinite(result.busbw).sum())
    print(f"# health: {rnd.name} ({rnd.purpose}): {answered}/{len(rnd.groups)} groups answered in "
          f"{result.wall_s:.1f} s", file=sys.stderr, flush=True)
