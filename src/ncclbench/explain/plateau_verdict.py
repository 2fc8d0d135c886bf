"""A measured plateau against the expected ceiling: as expected, below expected, above the
model, or above the line rate - said plainly, with the evidence, and 'unknown' when it
cannot be said.  The bands go both ways: a figure well above what the model allows is
not "as expected" either (the model, or the facts it was given, missed something).

The plateau is the median busbw of the largest sizes (the top factor of 4 of
the sweep), not nccl-tests' "Avg bus bandwidth", which averages over every size
and is near zero for sweeps that start small (nccl-tests #294).  A plateau from
a sweep whose largest size is below 64 MiB is not judged: busbw there is still
latency-bound.

AS_EXPECTED_FRACTION = 0.90: a healthy run reaches NCCL's model within a few
per cent (run-to-run spread 1-3 %, baseline-h200.md; the published systems in
bench/results/explain-published.md), while the faults the traps name cost far
more (a downtrained x8 link halves, sockets instead of IB cost 10-25x).

ABOVE_MODEL_TOLERANCE = 0.05: a figure more than 5 % above the model's ceiling is "above
the model".  Of 44 published figures (bench/results/explain-published.md), the model's
error runs -55.8 % .. +3.9 % (+3.9: NVLSTree on 2 H100 nodes against NCCL's 2-node cap
per channel; +1.8 without it), except one SHARP (CollNet) system at +7.4 % - exactly the
case the band is for (the switch did the reduction); run-to-run spread is 1-3 %
(baseline-h200.md).  So a healthy run ends at most ~4 % above the model, under the
5 %.  Above it, the likely reason is named: NVLS / NVLSTree / SHARP
(CollNet) reducing in the switch, a tree on few nodes sending less over the NICs, or
topology facts that are wrong (more NVLinks, a faster NIC than were read).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from .ceiling import Ceiling
from .expected_curve import PLATEAU_REACHED, Expectation
from .nccl_bandwidth import fmt_gbps

AS_EXPECTED_FRACTION = 0.90
ABOVE_MODEL_TOLERANCE = 0.05
MIN_PLATEAU_BYTES = 64 * 2**20
# Against a recorded curve the ramp is modelled, so a sweep is judged from 32 MiB: the recordings'
# run-to-run spread there is <= 3 % for 9 of 10 collectives (gather on 4 GPUs: 10 %, under the band).
CURVE_MIN_PLATEAU_BYTES = 32 * 2**20
NVLS_PLATEAU_BYTES = 1 * 2**30  # NVLS needs sizes > 256 MB to show its peak (nccl-tests #212)
# Per rank, collectives that move a rank's share per step level off from ~1 GiB (4x H100: all_gather 316.5 GB/s
# at 512 MiB, 348.5 at 30 GiB; tests/fixtures/log_corpus h100-healthy-*): across NVLink domains, where no curve
# is recorded, a figure under the band with a smaller share per rank is not judged.
SHARE_PLATEAU_BYTES = 1 << 30
ABOVE_LINE_ALGOS = {"NVLS": "NVLink SHARP (NVLS): the switch does the reduction",
                    "NVLSTree": "NVLSTree: NVLink SHARP in the node and a tree across nodes",
                    "Tree": "Tree: on 2 nodes each node's NICs carry half of what a ring sends",
                    "CollNetDirect": "SHARP in the network switches (CollNet): the switch does the reduction",
                    "CollNetChain": "SHARP in the network switches (CollNet): the switch does the reduction"}


@dataclass
class Plateau:
    busbw: float | None
    min_size: int = 0
    max_size: int = 0
    points: int = 0
    reason: str = ""  # why busbw is None or not to be judged

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _size(n: int) -> str:
    for unit, f in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= f and n % f == 0:
            return f"{n // f} {unit}"
    return f"{n} B"


def plateau_rows(rows: Sequence[tuple[int, float]]) -> list[tuple[int, float]]:
    """The rows the plateau is read from: measured sizes within a factor of 4 of the largest."""
    good = [(s, b) for s, b in rows if s > 0 and b is not None and b == b and b >= 0]
    top = max((s for s, _ in good), default=0)
    return [(s, b) for s, b in good if s * 4 > top]


def plateau_busbw(rows: Sequence[tuple[int, float]]) -> Plateau:
    """Median busbw of the sizes within a factor of 4 of the largest. `rows`: (size bytes, busbw GB/s)."""
    sel = plateau_rows(rows)
    if not sel:
        return Plateau(None, reason="no measured size")
    top = max(s for s, _ in sel)
    p = Plateau(statistics.median(b for _, b in sel), min(s for s, _ in sel), top, len(sel))
    if top < MIN_PLATEAU_BYTES:
        p.reason = f"the largest size, {_size(top)}, is latency-bound (run to >= 256 MiB to judge bandwidth)"
    return p


@dataclass
class Verdict:
    label: str  # 'as expected', 'below expected', 'above the model', 'above the line rate', 'unknown'
    fraction: float | None  # plateau / ceiling
    text: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Verdict:
        return cls(d["label"], d.get("fraction"), d.get("text", ""))


def judge(plateau: Plateau, ceiling: Ceiling) -> Verdict:
    """The verdict on one collective's plateau.  The algorithm is the ceiling's: confirmed when it
    came from NCCL (log, NCCL_ALGO), otherwise 'predicted' and said so."""
    if plateau.busbw is None:
        return Verdict("unknown", None, plateau.reason)
    if plateau.reason:
        return Verdict("unknown", None, plateau.reason)
    b = plateau.busbw
    algo, confirmed = ceiling.algorithm, ceiling.algorithm_source not in ("", "predicted")
    line = ceiling.line_rate
    if line is not None and b > line * 1.001:
        why = ABOVE_LINE_ALGOS.get(algo or "")
        if why and confirmed:
            return Verdict("above the line rate", b / ceiling.ceiling if ceiling.ceiling else None,
                           f"{fmt_gbps(b)} GB/s is above the {fmt_gbps(line)} GB/s {ceiling.bound} line rate because NCCL used "
                           f"{why}; busbw assumes a ring and is no wire speed")
        if why:
            return Verdict("above the line rate", b / ceiling.ceiling if ceiling.ceiling else None,
                           f"{fmt_gbps(b)} GB/s is above the {fmt_gbps(line)} GB/s {ceiling.bound} line rate, as expected if "
                           f"NCCL used {why} (predicted, not confirmed: NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING "
                           f"shows the algorithm)")
        if not confirmed and ceiling.nnodes > 1 and ceiling.bound == "NIC":
            return Verdict("above the line rate", b / ceiling.ceiling if ceiling.ceiling else None,
                           f"{fmt_gbps(b)} GB/s is above the {fmt_gbps(line)} GB/s NIC line rate, so NCCL did not "
                           f"use the predicted {algo}: a tree (Tree, NVLSTree, CollNet) sends less over the NICs "
                           f"(not confirmed: NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING shows the algorithm)")
        return Verdict("unknown", None,
                       f"{fmt_gbps(b)} GB/s is above the {fmt_gbps(line)} GB/s {ceiling.bound} line rate with "
                       f"{algo or 'an unknown algorithm'}: the topology facts or the algorithm are wrong")
    if ceiling.ceiling is None:
        return Verdict("unknown", None, f"no ceiling: {ceiling.unknown}")
    f = b / ceiling.ceiling
    pct = f"{100 * f:.0f}%"
    if f > 1 + ABOVE_MODEL_TOLERANCE:
        return Verdict("above the model", f,
                       f"{pct} of the {fmt_gbps(ceiling.ceiling)} GB/s ceiling, more than "
                       f"{ABOVE_MODEL_TOLERANCE:.0%} above it: "
                       + above_model_reason(algo, confirmed, ceiling.bound, ceiling.nnodes))
    if f >= AS_EXPECTED_FRACTION:
        return Verdict("as expected", f, f"{pct} of the {fmt_gbps(ceiling.ceiling)} GB/s ceiling")
    share = plateau.max_size // max(1, ceiling.nranks)
    if "domains joined by the network" in ceiling.nvlink_domain and share < SHARE_PLATEAU_BYTES:
        return Verdict("unknown", f, (
            f"{pct} of the {fmt_gbps(ceiling.ceiling)} GB/s ceiling, with {_size(plateau.max_size)} over "
            f"{ceiling.nranks} ranks: {share / 2**20:.0f} MiB per rank, short of the >= 1 GiB per rank where healthy "
            "collectives level off, and no healthy curve of several NVLink domains is recorded; NCCL's model bounds "
            "the network between the domains by their NICs alone, not by the fabric that joins them (switch tiers, "
            "oversubscription: not in the facts read): not judged below the band (a larger size would judge it)"))
    short = ""
    if algo in ("NVLS", "NVLSTree") and plateau.max_size < NVLS_PLATEAU_BYTES:
        short = f"; the largest size, {_size(plateau.max_size)}, may be short of NVLS's plateau (>= 1 GiB)"
    return Verdict("below expected", f, f"{pct} of the {fmt_gbps(ceiling.ceiling)} GB/s ceiling{short}")


def above_model_reason(algorithm: str | None, confirmed: bool, bound: str | None, nnodes: int) -> str:
    """Why a figure can sit above the model's ceiling (and under the line rate), most likely first."""
    why = ABOVE_LINE_ALGOS.get(algorithm or "")
    if why:
        return (f"NCCL used {why}, which the model's figure underrates" if confirmed else
                f"likely {why} (predicted, not confirmed: NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING shows the "
                f"algorithm)")
    if bound == "NIC" or nnodes > 1:
        alt = "a tree (Tree, NVLSTree) or SHARP in the network switches (CollNet) sending less over the NICs"
    else:
        alt = "NVLink SHARP (NVLS) reducing in the NVSwitch"
    used = f"NCCL used {algorithm}" if confirmed and algorithm else f"{algorithm or 'the algorithm'} was predicted"
    return (f"{used}; likely {alt}, or the topology facts are wrong (more links or a faster "
            f"{'NIC' if bound == 'NIC' else 'link'} than were read): the model is not to be trusted here")


def summary_line(plateau: Plateau, ceiling: Ceiling, verdict: Verdict) -> str:
    """The `#` line printed after `# Avg bus bandwidth`."""
    if plateau.busbw is None:
        return f"# Plateau bus bandwidth: none ({verdict.text})"
    sizes = _size(plateau.max_size) if plateau.min_size == plateau.max_size else \
        f"{_size(plateau.min_size)}-{_size(plateau.max_size)}"
    src = "" if not ceiling.algorithm else (f", {ceiling.algorithm}" + (
        " predicted" if ceiling.algorithm_source == "predicted" else f" from {ceiling.algorithm_source}"))
    if ceiling.ceiling is not None:
        ceil = f"ceiling {fmt_gbps(ceiling.ceiling)} GB/s ({ceiling.bound}{src})"
    else:
        ceil = f"ceiling unknown ({ceiling.unknown})" if ceiling.unknown else "ceiling unknown"
    if verdict.label == "unknown":
        # the ceiling's own reason is already on the line; say what else kept the verdict back
        why = "" if ceiling.unknown and ceiling.unknown in verdict.text else verdict.text
        return f"# Plateau bus bandwidth: {fmt_gbps(plateau.busbw)} GB/s at {sizes}; {ceil}: not judged" + (
            f" ({why})" if why else "")
    return (f"# Plateau bus bandwidth: {fmt_gbps(plateau.busbw)} GB/s at {sizes}; {ceil}: {verdict.label}"
            + (f" ({verdict.text})" if verdict.text else ""))


def banded_sizes(rows: Sequence[tuple[int, float]], exp: Expectation) -> list[int]:
    """The plateau sizes from CURVE_MIN_PLATEAU_BYTES up where the curve has a value and a band: those
    `judge_curve` judges."""
    sizes = sorted({s for s, _ in plateau_rows(rows) if s >= CURVE_MIN_PLATEAU_BYTES})
    return [s for s in sizes if exp.at(s) is not None and exp.band(s)[0] is not None]


def judge_curve(rows: Sequence[tuple[int, float]], plateau: Plateau, ceiling: Ceiling, exp: Expectation) -> Verdict:
    """The sweep against what a healthy system of this kind reaches at the same sizes (`exp`, a recorded curve
    scaled to the ceiling), size by size: each plateau size from CURVE_MIN_PLATEAU_BYTES up where the curve has
    a band (`Expectation.band`: the lowest healthy ratio recorded there, less a margin, at most 90 %) gives
    measured / expected and measured / band; the verdict reads the median of the latter, so one size does not
    decide and no median straddles the steep part of the ramp.  Sizes whose healthy spread is too wide, or on
    the ramp recorded on too few machines to bound it, are not judged (the band's reason), and the verdict says
    the next size that can be (where none can, `run_explain` gives the verdict of a sweep with no curve of its
    own, with this reason).  Above the model / the line rate stay the
    ceiling's (a figure past the links' model is news whatever the size).  `fraction` is plateau / ceiling."""
    if plateau.busbw is None:
        return Verdict("unknown", None, plateau.reason)
    if plateau.max_size < CURVE_MIN_PLATEAU_BYTES:
        return Verdict("unknown", None, f"the largest size, {_size(plateau.max_size)}, is latency-bound (run to "
                                        f">= {_size(CURVE_MIN_PLATEAU_BYTES)} to judge bandwidth)")
    v0 = judge(Plateau(plateau.busbw, plateau.min_size, plateau.max_size, plateau.points), ceiling)
    if v0.label in ("above the model", "above the line rate") or ceiling.ceiling is None:
        return v0
    per: dict[int, list[float]] = {}
    for s, b in plateau_rows(rows):
        if s >= CURVE_MIN_PLATEAU_BYTES:
            per.setdefault(s, []).append(b)
    judged: list[tuple[int, float, float, float]] = []  # size, measured, expected, band
    skipped: list[str] = []
    for s, bs in sorted(per.items()):
        want, (band, why) = exp.at(s), exp.band(s)
        if want is None:
            continue
        if band is None:
            skipped.append(f"{_size(s)} ({why})")
            continue
        judged.append((s, statistics.median(bs), want, band))
    frac = plateau.busbw / ceiling.ceiling
    where = _size(plateau.max_size)
    if not judged:
        nxt = exp.next_judged(plateau.max_size)
        return Verdict("unknown", frac, f"not judged at {', '.join(skipped) or where}" + (
            f"; a sweep to {_size(nxt)} or more can be judged" if nxt else ""))
    score = statistics.median(b / (w * band) for _, b, w, band in judged)
    ratios = ", ".join(f"{_size(s)} {100 * b / w:.0f}% (band {100 * band:.0f}%)" for s, b, w, band in judged)
    not_judged = f"; not judged at {', '.join(skipped)}" if skipped else ""
    s_top, b_top, want, _ = judged[-1]
    ratio = b_top / want
    if score < 1:
        return Verdict("below expected", frac, (
            f"{100 * ratio:.0f}% of the {fmt_gbps(want)} GB/s a healthy {exp.label} reaches at {_size(s_top)} "
            f"({100 * frac:.0f}% of the {fmt_gbps(ceiling.ceiling)} GB/s ceiling); measured / expected per size: "
            f"{ratios}{not_judged}"))
    text = (f"for {where}: {fmt_gbps(b_top)} GB/s, about what a healthy {exp.label} reaches there "
            f"({fmt_gbps(want)} GB/s, {100 * ratio:.0f}%)")
    if (exp.at(plateau.max_size) or 0) < PLATEAU_REACHED * exp.top:
        text += (f"; the sweep stops at {where}, where a healthy {exp.label} reaches about "
                 f"{100 * want / ceiling.ceiling:.0f}% of its {fmt_gbps(ceiling.ceiling)} GB/s ceiling: run to "
                 f"{_size(exp.plateau_from())} or more to judge the ceiling")
    else:
        text += f"; {100 * frac:.0f}% of the {fmt_gbps(ceiling.ceiling)} GB/s ceiling, where this curve levels off"
    return Verdict("as expected", frac, text + not_judged)
