"""Judging a group against physics: the expected ceiling of its shape, with a threshold
that says at the scan's bandwidth size how low a healthy group never goes.

A fleet judges a group by its peers; a lone host (the most common health check: one
node, 4 or 8 GPUs) has no peers, and a fleet-wide fault moves every peer at once.  The
explain model's ceiling does not move with them: the intra-node group is bounded by
NVLink/PCIe, a rail or pair group by the NICs, a lone GPU by its memory (a 1-rank
all_reduce is a device copy: each byte read and written once, so its algbw is at most
half of the memory bandwidth NVML gives).

The ceiling is a large-message figure; at the scan's size a healthy group sits lower.
How much lower was measured on the GPU machines and is recorded here per bound, per
size (HEALTHY): the healthy fraction f of the ceiling.  A group is slow against
physics when its figure is below MARGIN x f x ceiling; MARGIN = 0.75 leaves 25 %:
the recorded figures repeat within 0.2-2.2 % between scans at >= 64 MiB (one H100,
bench/results/health-gpu-h100-2026-11-24.md) and the model sits within -10 %..+2 % of
37 of 38 published systems (bench/results/explain-published.md), while the faults a
health check is for cost far more (another process's copies on one GPU: 0.44 of the
healthy intra figure; P2P off: 0.07 of the ceiling; issue 22).  A bound or GPU count
with no record of its own uses the nearest record and is said to be provisional; a
scan size below every recorded size is not judged against the ceiling (at 4 MiB a
lone H100 moved 41 % between healthy scans).

Above the ceiling by more than explain's ABOVE_MODEL_TOLERANCE, the figure is "above
the model" (a switch reducing, or wrong topology facts): the model cannot judge that
group, so it is not called healthy on the model's word.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from ...explain.curve_data import CURVES
from ...explain.plateau_verdict import ABOVE_MODEL_TOLERANCE, above_model_reason

MARGIN = 0.75  # slow below MARGIN x the healthy fraction x the ceiling (see above)
MiB = 1 << 20


@dataclass(frozen=True)
class HealthyRecord:
    """What healthy groups of one bound reached, as a fraction of the model's ceiling, per size."""

    bound: str  # 'NVLink', 'PCIe', 'NIC', 'memory'
    ngpus: int | None  # the group size it was measured with (None: any)
    fractions: tuple[tuple[int, float], ...]  # (size in bytes, healthy figure / ceiling), ascending
    source: str
    provisional: bool = False  # not measured on this bound: a stand-in, said so

    def at(self, nbytes: int) -> tuple[int, float] | None:
        """The fraction recorded at the largest size <= nbytes (a smaller size reaches less,
        so this errs towards a lower threshold), or None below every recorded size."""
        below = [(s, f) for s, f in self.fractions if s <= nbytes]
        return below[-1] if below else None


# 4x H200 (NVSwitch, NCCL 2.28.9, NVLS off), all_reduce out of place, ncclbench busbw, median of
# 5 runs, against the model's 370.8 GB/s (18 links x 20.6): bench/results/compare-2026-11-21-repeats-4gpu-busbw.json
# (gpu-h200x4-2026-11-21-repeats.md); the 2-GPU figures from compare-2026-11-21-repeats-2gpu-busbw.json (3 runs).
# The 4x H100 of issue 22 measured 340 GB/s at 256 MiB in health's intra phase: the same 0.92.
# Read from explain's table of healthy curves (explain/curve_data.py), so explain and health judge
# the same figure against the same expectation.
_H200X4 = tuple(p for p in CURVES[("H200", 4, "all_reduce")] if p[0] >= 64 * MiB)
_H200X2 = tuple(p for p in CURVES[("H200", 2, "all_reduce")] if p[0] >= 64 * MiB)
# One H100 80GB HBM3 alone, the local phase's algbw, median of 6 scans (health-gpu-h100-2026-11-24.md
# v3), against half of 3352 GB/s (5120-bit bus x 2619 MHz x 2 / 8: NVIDIA's 3.35 TB/s for the part).
_H100_LOCAL = ((64 * MiB, 1395.4), (256 * MiB, 1486.2))
_NVLINK_H200 = 370.8
_H100_COPY = 3352.0 / 2

HEALTHY: tuple[HealthyRecord, ...] = (
    HealthyRecord("NVLink", 4, tuple((s, b / _NVLINK_H200) for s, b in _H200X4),
                  "4x H200 NVSwitch, NCCL 2.28.9, all_reduce busbw, median of 5 runs "
                  "(bench/results/compare-2026-11-21-repeats-4gpu-busbw.json; "
                  "4x H100 in issue 22: 340 of 370.8 GB/s at 256 MiB)"),
    HealthyRecord("NVLink", 2, tuple((s, b / _NVLINK_H200) for s, b in _H200X2),
                  "2 of 4 H200, NCCL 2.28.9, all_reduce busbw, median of 3 runs "
                  "(bench/results/compare-2026-11-21-repeats-2gpu-busbw.json)"),
    HealthyRecord("memory", 1, tuple((s, b / _H100_COPY) for s, b in _H100_LOCAL),
                  "one H100 80GB HBM3, the local phase's algbw, median of 6 scans against half its 3352 GB/s "
                  "(bench/results/health-gpu-h100-2026-11-24.md, v3)"),
    # No NIC figure was recorded on our machines: published large-message figures stand in
    # (CX-7 400G: 46-49 of the model's 50 GB/s, nccl-tests #290/#267, in explain-and-fleet.md),
    # taken from 64 MiB on - provisional until health's pair phase is measured over real NICs.
    HealthyRecord("NIC", None, ((64 * MiB, 46.0 / 50.0),),
                  "published CX-7 400G figures, 46-49 of the model's 50 GB/s at large sizes (nccl-tests #290, "
                  "#267); not measured by health at this size", provisional=True),
)


def healthy_record(bound: str, ngpus: int) -> tuple[HealthyRecord | None, str]:
    """The record for a bound and group size, and what stands in when there is none of its own."""
    same = [r for r in HEALTHY if r.bound == bound]
    exact = [r for r in same if r.ngpus in (None, ngpus)]
    if exact:
        return exact[0], ""
    if same:
        near = min(same, key=lambda r: abs((r.ngpus or ngpus) - ngpus))
        return near, f"recorded for {near.ngpus} GPU(s), this group has {ngpus}"
    if bound == "PCIe":
        nv = [r for r in HEALTHY if r.bound == "NVLink"]
        near = min(nv, key=lambda r: abs((r.ngpus or ngpus) - ngpus))
        return near, f"no PCIe record: the NVLink record for {near.ngpus} GPU(s) stands in"
    return None, f"no healthy figure recorded for a {bound} bound"


@dataclass(frozen=True)
class PhysicsRef:
    """One group shape's judgement against its ceiling."""

    shape: str
    ceiling: float  # GB/s (busbw; algbw for a lone GPU), the model's large-message figure
    bound: str
    above: float  # above this a figure is "above the model"
    above_why: str  # the likely reason, said with an above-the-model verdict
    threshold: float | None = None  # below this: slow; None: not judged against the ceiling (why_not)
    fraction: float | None = None  # the healthy fraction used
    at_bytes: int | None = None  # the recorded size it was taken at
    source: str = ""
    provisional: bool = False
    why_not: str = ""

    def describe(self) -> str:
        """One line: the threshold at the scan's size and where it comes from."""
        top = f"above {self.above:.4g} GB/s (+{ABOVE_MODEL_TOLERANCE:.0%}) is above the model"
        if self.threshold is None or self.fraction is None:
            return f"not judged against the {self.ceiling:.4g} GB/s ceiling ({self.why_not}); {top}"
        prov = "provisional: " if self.provisional else ""
        return (f"below {self.threshold:.4g} GB/s is slow = {MARGIN:.0%} of the {100 * self.fraction:.1f} % of "
                f"the {self.ceiling:.4g} GB/s ceiling that healthy groups reached at {_size(self.at_bytes or 0)} "
                f"({prov}{self.source}); {top}")

    def to_json(self) -> dict:
        return {**asdict(self), "text": self.describe()}


def physics_reference(shape: str, ceiling: float, bound: str, ngpus: int, bw_bytes: int,
                      algorithm: str | None = None, algorithm_source: str = "", nnodes: int = 1) -> PhysicsRef:
    """The threshold of one shape at the scan's bandwidth size (`bw_bytes`)."""
    above = ceiling * (1 + ABOVE_MODEL_TOLERANCE)
    why_above = above_model_reason(algorithm, algorithm_source not in ("", "predicted"), bound, nnodes)
    base = PhysicsRef(shape, ceiling, bound, above, why_above)
    rec, stand_in = healthy_record(bound, ngpus)
    if rec is None:
        return _replace(base, why_not=stand_in)
    got = rec.at(bw_bytes)
    if got is None:
        first = rec.fractions[0][0]
        return _replace(base, source=rec.source, why_not=(
            f"healthy groups are recorded from {_size(first)} up; at {_size(bw_bytes)} they sit lower by an "
            f"unknown amount: use --bw-size {_size(first).replace(' ', '').replace('iB', '')} or more"))
    at, fraction = got
    note = [n for n in (stand_in, "" if at == bw_bytes else f"the scan's {_size(bw_bytes)} judged by the "
                        f"{_size(at)} record") if n]
    source = rec.source + (f"; {'; '.join(note)}" if note else "")
    return _replace(base, threshold=MARGIN * fraction * ceiling, fraction=fraction, at_bytes=at, source=source,
                    provisional=rec.provisional or bool(stand_in))


def _replace(ref: PhysicsRef, **kw: Any) -> PhysicsRef:
    return PhysicsRef(**{**asdict(ref), **kw})


def _size(n: int) -> str:
    for unit, f in (("GiB", 1 << 30), ("MiB", MiB), ("KiB", 1 << 10)):
        if n >= f and n % f == 0:
            return f"{n // f} {unit}"
    return f"{n} B"


def physics_map(refs: Mapping[str, PhysicsRef]) -> dict[str, dict]:
    """What the report records per shape."""
    return {shape: r.to_json() for shape, r in refs.items()}
