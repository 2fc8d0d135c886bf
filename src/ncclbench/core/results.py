"""What a run produces: run metadata, device lines and one row per size.

The harness fills these; output formats (text table, JSON, result store,
report) only read them.  Field names follow nccl-tests' JSON (docs/behaviour.md §6).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class DeviceInfo:
    """One line of `# Using devices` (docs/behaviour.md §5.2)."""

    rank: int
    group: int
    pid: int
    hostname: str
    device: int  # CUDA ordinal (CPU backend: -1)
    device_hex: str  # "0000:00:06" (CPU backend: "cpu")
    device_info: str  # "NVIDIA H200" / "CPU (MPI)"
    process: int = 0  # world process index (JSON keeps the first device per process)


@dataclass
class PerIterStats:
    """`-I` summary over the non-skipped samples (docs/behaviour.md §3.7)."""

    skipped_iterations: int
    min_us: float
    max_us: float
    avg_us: float
    p50_us: float
    p95_us: float
    p99_us: float
    stdev_us: float
    cv_pct: float
    times_us: list[float]
    per_process_max_times_us: list[list[float]] | None = None


@dataclass
class HalfResult:
    """One placement (out-of-place or in-place) of one row."""

    time_us: float  # combined across ranks per -a
    cpu_time_us: float  # rank 0's own enqueue time (-C)
    algbw: float  # GB/s
    busbw: float  # GB/s
    wrong: int | None  # None: not checked (`N/A`)
    per_iter: PerIterStats | None = None


@dataclass
class ResultRow:
    size: int
    count: int
    type: str
    redop: str
    root: int
    out_of_place: HalfResult
    in_place: HalfResult
    timestamp: str | None = None  # -S, local time "YYYY-MM-DD HH:MM:SS"


@dataclass
class RunInfo:
    """Everything printed before the first row (banner, devices) and kept with a run."""

    program: str  # "all_reduce_perf"
    argv: list[str]
    backend: str  # "nccl" / "mpi"
    version: str  # ncclbench version
    nccl_version_code: int | None  # runtime code like 22809; None for the MPI backend
    nccl_headers_code: int | None
    library: str  # "libnccl 2.28.9 (/path)" or "MPICH 4.x (mpi4py 4.1)"
    devices: list[DeviceInfo] = field(default_factory=list)
    world_size: int = 1  # processes
    nranks: int = 1  # ranks per communicator
    ngroups: int = 1
    start_time: str = ""
    hosts: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # banner notes ncclbench adds (`# ncclbench: ...`)
    # -e after nccl-tests' memory clamp (`# Reducing maxBytes to N`), None when not lowered: decided
    # once (a run: plan.sizes.reduced_max_bytes; an import: the line in the log).  Written down under
    # `extra[RECORDED_REDUCED_MAX_BYTES]`, as it always was (recorded_extra / from_record).
    reduced_max_bytes: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # anything else ncclbench records (versions per host...)

    def recorded_extra(self) -> dict[str, Any]:
        """`extra` as the -J file and the store write it: the clamp under its recorded key, first."""
        if self.reduced_max_bytes is None:
            return dict(self.extra)
        return {RECORDED_REDUCED_MAX_BYTES: self.reduced_max_bytes, **self.extra}

    def record(self) -> dict[str, Any]:
        """These facts as plain data for the store (read back with `from_record`)."""
        data = dataclasses.asdict(self)
        del data["reduced_max_bytes"]
        data["extra"] = self.recorded_extra()
        return data

    @classmethod
    def from_record(cls, data: dict[str, Any]) -> RunInfo:
        """RunInfo from `record()`'s plain data (devices as dicts); keys a stored run no longer
        has are dropped and keys it never had take their defaults: stored runs outlive code changes."""
        data = dict(data)
        extra = dict(data.get("extra") or {})
        if RECORDED_REDUCED_MAX_BYTES in extra:
            data["reduced_max_bytes"] = int(extra.pop(RECORDED_REDUCED_MAX_BYTES))
        data["extra"] = extra
        data["devices"] = [DeviceInfo(**{k: v for k, v in d.items() if k in _DEVICE_FIELDS})
                           for d in data.get("devices", [])]
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


# Where a written-down run (the -J file's `extra`, the store's info record) keeps RunInfo.reduced_max_bytes.
RECORDED_REDUCED_MAX_BYTES = "max_bytes_reduced_to"
_DEVICE_FIELDS = frozenset(f.name for f in dataclasses.fields(DeviceInfo))


@dataclass
class RunSummary:
    """Footer figures (docs/behaviour.md §5.5)."""

    out_of_bounds: int
    avg_busbw: float
    min_bw_gate: float | None  # NCCL_TESTS_MIN_BW if set
    gate_ok: bool | None  # decided once (min_bw_verdict) when a gate is set and the caller gave none
    errors: list[str] = field(default_factory=lambda: [""])
    memory_line: str | None = None  # -M
    # The run judged (explain/): `#` lines printed after `# Avg bus bandwidth`, and the facts
    # behind them (the JSON's EXPLAIN_KEY, kept in the store); empty with --no-explain.
    explain_lines: list[str] = field(default_factory=list)
    explain: dict[str, Any] | None = None
    # --gate: the small sizes measured again for the regression gate (run/gate_rounds.py): per
    # series and round the times, and how; `gate_lines` say it after the table.  None without --gate.
    gate_latency: dict[str, Any] | None = None
    gate_lines: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.gate_ok is None:
            self.gate_ok = min_bw_verdict(self.avg_busbw, self.min_bw_gate)


# nccl-tests fails a run whose average bus bandwidth is below 0.9 x NCCL_TESTS_MIN_BW
# (common.cu: `bw[0] < check_avg_bw*(0.9)`); a NaN average is not below anything, so it passes there too.
MIN_BW_FACTOR = 0.9


def min_bw_verdict(avg_busbw: float, gate: float | None) -> bool | None:
    """The NCCL_TESTS_MIN_BW verdict: None without a gate, else nccl-tests' comparison exactly."""
    if gate is None:
        return None
    return not avg_busbw < MIN_BW_FACTOR * gate


# Said wherever a run of one rank appears (the banner, explain, the gate's refusal): with one rank
# nothing crosses a link, so busbw is 0 and algbw times a local copy; it is no benchmark of a fabric.
# The plateau: one figure, one definition everywhere a run's bandwidth is summed up (the banner's
# explain line, `explain`, --metrics, history, compare, check).  The largest sizes of the sweep, those
# within a factor of PLATEAU_FACTOR of the largest, where busbw has stopped climbing (explain's choice:
# explain/plateau_verdict.py judges this figure against its ceiling); their median, so one size that stalled
# does not move it.  nccl-tests' 'Avg bus bandwidth' averages every size instead (nccl-tests #294).
PLATEAU_FACTOR = 4
PLATEAU_DEFINITION = "plateau busbw = median busbw of the sizes within a factor of 4 of the largest"


def plateau_sizes(sizes: list[int]) -> list[int]:
    """The sizes the plateau is made of: within a factor of PLATEAU_FACTOR of the largest (> 0)."""
    pos = sorted({s for s in sizes if s > 0})
    return [s for s in pos if s * PLATEAU_FACTOR > pos[-1]] if pos else []


ONE_RANK_NOTE = "one rank moves no data"
ONE_RANK_LINE = (f"{ONE_RANK_NOTE}: busbw is 0 and algbw times a copy inside one process; compare, check and "
                 "baseline refuse such a run; run 2 or more ranks (--nprocs N or a launcher)")


# Key of ncclbench's judgement of a run: in RunInfo.extra (the topology, known at start) and as a
# top-level key of the -J file (everything, merged with RunSummary.explain).
EXPLAIN_KEY = "ncclbench_explain"
