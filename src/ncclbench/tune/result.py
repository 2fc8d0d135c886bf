"""What one `ncclbench tune` job measured, as plain data (JSON in and out).

The runner fills it on the reporting rank; the judge, the emitters and
--verify only read it, so a result file written by one job can be judged,
emitted and verified again later (`TuneResult.from_json`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .candidate_judge import Band, Series, Verdict, bands, judge_size
from .candidates import Candidate, Skipped

FORMAT = "ncclbench-tune/1"


@dataclass(frozen=True)
class NotApplicable:
    """The library said a candidate cannot run one size (it would fall back)."""

    label: str
    size: int
    reason: str


@dataclass
class TuneResult:
    collective: str
    backend: str  # Backend.NCCL.value | Backend.MPI.value (plain data: the JSON file round-trips it)
    library: str  # "NCCL 2.28.9" | "MPICH 5.0.2"
    version_code: int | None  # NCCL's code; None for MPI
    nranks: int
    nnodes: int
    datatype: str
    op: str
    rounds: int
    iters_per_round: int
    candidates: list[Candidate]
    skipped: list[Skipped] = field(default_factory=list)  # never tried (library rules)
    dropped: list[Skipped] = field(default_factory=list)  # failed, hung or wrong at run time
    not_applicable: list[NotApplicable] = field(default_factory=list)
    # size -> candidate label -> time (us) per round; size is the row size (bytes)
    times_us: dict[int, dict[str, list[float]]] = field(default_factory=dict)
    algbw_bytes: dict[int, float] = field(default_factory=dict)  # size -> bytes for algbw
    param_counts: dict[int, int] = field(default_factory=dict)  # size -> nccl-tests' count column
    bus_factor: float = 1.0
    command: list[str] = field(default_factory=list)
    start_time: str = ""
    wall_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    root: int = -1  # rooted collectives: the root measured
    reduced_max_bytes: int | None = None  # -e lowered by nccl-tests' memory clamp (the plan's), else None
    verify: dict[str, Any] | None = None  # filled by --verify (see verify.py)

    # -- derived -------------------------------------------------------------------------
    @property
    def sizes(self) -> list[int]:
        return sorted(self.times_us)

    def candidate(self, label: str) -> Candidate:
        for c in self.candidates:
            if c.label == label:
                return c
        raise KeyError(label)

    def live_labels(self) -> list[str]:
        dropped = {d.label for d in self.dropped}
        return [c.label for c in self.candidates if c.label not in dropped]

    def series_at(self, size: int) -> dict[str, Series]:
        """Complete series (every round) of the candidates still in the running."""
        live = set(self.live_labels())
        return {label: Series(tuple(t)) for label, t in self.times_us[size].items()
                if label in live and len(t) == self.rounds}

    def verdicts(self) -> list[Verdict]:
        return [judge_size(size, self.series_at(size)) for size in self.sizes
                if "default" in self.series_at(size)]

    def bands(self) -> list[Band]:
        return bands(self.verdicts())

    def busbw(self, size: int, time_us: float) -> float:
        if time_us <= 0:
            return 0.0
        return self.algbw_bytes.get(size, size) / 1e3 / time_us * self.bus_factor

    # -- JSON ----------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT, "collective": self.collective, "backend": self.backend,
            "library": self.library, "version_code": self.version_code, "nranks": self.nranks,
            "nnodes": self.nnodes, "datatype": self.datatype, "op": self.op, "rounds": self.rounds,
            "iters_per_round": self.iters_per_round,
            "candidates": [c.to_json() for c in self.candidates],
            "skipped": [vars(s) for s in self.skipped], "dropped": [vars(s) for s in self.dropped],
            "not_applicable": [vars(n) for n in self.not_applicable],
            "times_us": {str(s): v for s, v in self.times_us.items()},
            "algbw_bytes": {str(s): v for s, v in self.algbw_bytes.items()},
            "param_counts": {str(s): v for s, v in self.param_counts.items()},
            "bus_factor": self.bus_factor, "command": self.command, "start_time": self.start_time,
            "wall_s": self.wall_s, "notes": self.notes, "root": self.root,
            "reduced_max_bytes": self.reduced_max_bytes, "verify": self.verify,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TuneResult:
        if d.get("format") != FORMAT:
            raise ValueError(f"not an ncclbench tune result (format {d.get('format')!r})")
        return cls(
            collective=d["collective"], backend=d["backend"], library=d["library"],
            version_code=d.get("version_code"), nranks=d["nranks"], nnodes=d["nnodes"],
            datatype=d["datatype"], op=d["op"], rounds=d["rounds"], iters_per_round=d["iters_per_round"],
            candidates=[Candidate.from_json(c) for c in d["candidates"]],
            skipped=[Skipped(**s) for s in d.get("skipped", [])],
            dropped=[Skipped(**s) for s in d.get("dropped", [])],
            not_applicable=[NotApplicable(**n) for n in d.get("not_applicable", [])],
            times_us={int(s): v for s, v in d["times_us"].items()},
            algbw_bytes={int(s): v for s, v in d.get("algbw_bytes", {}).items()},
            param_counts={int(s): v for s, v in d.get("param_counts", {}).items()},
            bus_factor=d.get("bus_factor", 1.0), command=d.get("command", []),
            start_time=d.get("start_time", ""), wall_s=d.get("wall_s", 0.0), notes=d.get("notes", []),
            root=d.get("root", -1), reduced_max_bytes=d.get("reduced_max_bytes"), verify=d.get("verify"))
