"""A run explained: everything known about it in, the `#` lines and their data out.

One pure function (`explain_run`) serves the live benchmark (`live`), a
stored run and an imported nccl-tests log (`stored`, `ncclbench explain
RUN`), so a run judged today and re-judged later go through the same code.

The lines, printed after `# Avg bus bandwidth`:

    # NCCL 2.28.9 path: network IB; 8 NET device(s), GPU Direct RDMA on 8/8; 16 coll channels; ...
    # all_reduce 8 B - 64 KiB: Ring/LL, 16 channels          (the size column, one line per range)
    # Plateau bus bandwidth: ... ceiling ...: as expected (...)  (+ why, NCCL's own table)
    # TRAP ERROR ...: evidence. Fix: ...
    # Not checked: ... (why)

Sizes are the table's `size` column: each row is matched to NCCL's per-call
lines by the byte count NCCL printed (`CallChoice.bytes_kind`: count x type
size from NCCL 2.24, the larger buffer before), never by position.  A row
whose size NCCL logged with two different choices says both; a row NCCL
logged nothing for says unknown.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.datatypes import DATATYPE_BY_NAME
from ..core.results import ONE_RANK_LINE, ResultRow
from .ceiling import Ceiling, expected_ceiling, network_in_use
from .expected_curve import SHAPE_ALGOS, Expectation, expected_per_size, find_expectation, healthy_floor
from .failures import failure_traps
from .log_topology import LogTopology, assumed_hosts, is_datacenter
from .nccl_bandwidth import fmt_gbps
from .nccl_env import NCCL_FUNC
from .nccl_log import CallChoice, NcclLogFacts, format_bytes
from .plateau_verdict import (
    ABOVE_LINE_ALGOS,
    ABOVE_MODEL_TOLERANCE,
    AS_EXPECTED_FRACTION,
    CURVE_MIN_PLATEAU_BYTES,
    MIN_PLATEAU_BYTES,
    Verdict,
    banded_sizes,
    judge,
    judge_curve,
    plateau_busbw,
    plateau_rows,
)
from .run_judgement import RunJudgement, judge_run
from .topology import HostTopology
from .traps import WARN, Trap, TrapReport, Unchecked, find_traps

# The slowest RDMA fabric NCCL plans for: its NET_BW default, 12 GB/s (100 Gb/s; src/graph/topo.h, every tag
# v2.4.8-1 .. v2.30.7-1).  Between hosts of datacenter GPUs a plateau below 90 % of it is TCP-socket
# territory (sockets reach 2-5 GB/s; Alps measured 5 GB/s over Socket where the OFI plugin gave 122).
RDMA_FLOOR_GBPS = 12.0
# PCIe cards with an assumed board: NCCL's PCIe model (Gen4 x16 = 24 GB/s) holds where the GPUs share a PCIe
# switch with P2P; through the CPU (SYS, or cards without P2P) NCCL moves about half of it via host memory.
# Between 40 % and 90 % the layout the log does not state decides: not judged; below 40 % it is below either way.
PCIE_UNSURE_FRACTION = 0.40
# GeForce cards: the RTX 40 series has no PCIe peer-to-peer at all and older ones only over a bridge, so 8 of them
# exchange through host memory, often across two CPU sockets: a quarter of NCCL's PCIe figure is common there.
GEFORCE_UNSURE_FRACTION = 0.15

Choice = tuple[str, "str | None", "int | None"]  # (algorithm, protocol, channels)
Test = tuple[str, str, int]  # (datatype, op, root) as the rows print them


@dataclass
class RunFacts:
    """What is known about one run; every part may be missing, and then says why."""

    collective: str
    nranks: int
    rows: Sequence[ResultRow]
    backend: str = "nccl"  # 'nccl', 'mpi' (CPU: no NCCL at all), 'nccl-tests' (an imported log)
    hosts: list[HostTopology] = field(default_factory=list)
    topology_unknown: str = ""  # why `hosts` is empty
    log: NcclLogFacts | None = None
    log_unknown: str = ""  # why `log` is None
    tests: list[Test] = field(default_factory=list)  # the probed tests, in probe order
    probe: list[list[CallChoice]] | None = None  # per probed test, NCCL's choices; None: no probe
    env: Mapping[str, str] = field(default_factory=dict)  # the run's NCCL_* environment (rank 0's)
    # host -> the NCCL_* settings its ranks ran with (gathered at start): each host is judged with its own
    host_env: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    nccl_version: str | None = None
    notes: list[str] = field(default_factory=list)  # how NCCL's account was captured (user settings...)
    status: str = "complete"  # the stored run's: complete / interrupted / timeout / failed
    end_reason: str = ""  # why it did not complete (an imported log: what its lines say)
    failure_lines: list[str] = field(default_factory=list)  # nccl-tests' / the launcher's failure lines
    out_of_bounds: int | None = None
    version_note: str | None = None  # nccl-tests built against another NCCL than it ran with
    log_topology: LogTopology | None = None  # an imported log: the layout its lines state
    collective_source: str = ""  # how the collective was decided (imports)
    nccl_log_only: bool = False  # an import with NCCL's lines alone: no nccl-tests header, so no hang is claimed
    ends_in_gap: bool = False  # an import whose last line is a gap ('...'): where the log stops is not where the run did


@dataclass
class Explained:
    lines: list[str]
    data: dict[str, Any]
    judgement: RunJudgement


def tests_of(rows: Sequence[ResultRow]) -> list[Test]:
    """(type, redop, root) of the rows, in first-seen order: the tests a run looped over."""
    return list(dict.fromkeys((r.type, r.redop, r.root) for r in rows))


# -- NCCL's path ------------------------------------------------------------------------------

def _network_used_or_not(log: NcclLogFacts, net_parts: list[str]) -> list[str]:
    """The network parts of the path line as they are, or -- when NCCL's connections are known and none is
    NET (one host: P2P, SHM, NVLS carried everything) -- one part saying the network moved nothing, and what
    NCCL merely initialised (every NCCL initialises a network, sockets at least, even on one host)."""
    kinds = {c.kind for c in log.connections}
    if not net_parts or not kinds or "NET" in kinds:
        return net_parts
    return [f"network not used (no NET connection; NCCL initialised {'; '.join(net_parts)})"]


def nccl_path_line(log: NcclLogFacts | None, unknown: str = "") -> str:
    """One line of what NCCL said about its path: network, NICs and GDR, channels, connections."""
    if log is None or (not log.sources and log.version is None):
        why = unknown or (log.unknown[0] if log is not None and log.unknown else "no NCCL log")
        return f"# NCCL path unknown: {why}"
    parts = []
    if log.net_plugin or log.net_plugin_version:
        plugin = ", ".join(x for x in (log.net_plugin_version, f"provider {log.ofi_provider}" if log.ofi_provider
                                       else "") if x)
        ext = "external plugin" + (f" {plugin}" if plugin else "") if log.net_plugin_external or plugin else ""
        parts.append(f"network {log.net_plugin or network_in_use(log) or 'unknown'}" + (f" ({ext})" if ext else ""))
    devs = [d for d in log.net_devices if d.transport != "Socket"]
    socks = [d for d in log.net_devices if d.transport == "Socket"]
    if devs:
        gdr = sum(1 for d in devs if d.gdr_used or (d.gdr and d.gdr_used is None))
        known = sum(1 for d in devs if d.gdr is not None or d.gdr_used is not None)
        def label(d: Any) -> str:
            text = (d.name or str(d.index)) + (f":{d.port}" if d.port is not None else "") + \
                (f"/{d.link_layer}" if d.link_layer else "")
            return text + (f" {d.speed_mbps // 1000} Gb/s" if d.speed_mbps else "")
        parts.append(f"{len(devs)} NET device(s) ({', '.join(sorted({label(d) for d in devs})[:4])}"
                     f"{', ...' if len(devs) > 4 else ''}), "
                     + (f"GPU Direct RDMA on {gdr}/{known}" + (f" ({len(devs) - known} not stated)"
                                                                if known < len(devs) else "")
                        if known else "GPU Direct RDMA not stated"))
    if socks:
        parts.append(f"sockets over {', '.join(sorted({d.name or str(d.index) for d in socks})[:4])}")
    parts = _network_used_or_not(log, parts)
    if log.nchannels is not None:
        parts.append(f"{log.nchannels} coll channel(s)")
    kinds = Counter(c.kind for c in log.connections)
    if kinds:
        details = Counter(c.detail for c in log.connections)
        conn = ", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))
        conn += " [" + ", ".join(f"via {d} x{n}" for d, n in details.most_common(4)) + \
            (", ..." if len(details) > 4 else "") + "]"
        net_gdr = sum(1 for c in log.connections if c.kind == "NET" and c.gdr)
        if kinds.get("NET"):
            conn += f" ({net_gdr} NET with GDRDMA)"
        parts.append(f"connections: {conn}")
    if log.p2p_disabled:
        parts.append(f"P2P disabled ({log.p2p_disabled_reason or 'NCCL said so'})")
    if log.nvls_available is not None:
        parts.append("NVLS " + ("available" if log.nvls_available else "not available")
                     + (f", {log.channel_counts['nvls']} nvls channel(s)" if log.channel_counts.get("nvls") else ""))
    if any(c.kind == "CollNet" for c in log.connections):  # NCCL prints a collnet count even with CollNet off
        parts.append(f"CollNet in use ({log.channel_counts.get('collnet', '?')} channel(s))")
    if log.warnings:
        parts.append(f"{len(log.warnings)} NCCL WARN line(s), first: {log.warnings[0][:120]}")
    head = f"# NCCL {log.version} path" if log.version else "# NCCL path"
    return f"{head}: " + ("; ".join(parts) if parts else "nothing about the network or channels in its log")


# -- NCCL's choice per row and per size -----------------------------------------------------------

def _nccl_bytes(row: ResultRow, kind: str) -> int | None:
    """The byte count NCCL printed for the call behind `row`."""
    if kind == "total":
        return row.size
    dtype = DATATYPE_BY_NAME.get(row.type)
    return None if dtype is None else row.count * dtype.itemsize


def _choices_at(calls: Sequence[CallChoice], func: str, row: ResultRow) -> list[Choice]:
    out: list[Choice] = []
    for c in calls:
        if c.func != func or c.algo is None or c.nbytes != _nccl_bytes(row, c.bytes_kind):
            continue
        choice = (c.algo, c.proto, c.nchannels)
        if choice not in out:
            out.append(choice)
    return out


def row_choices(f: RunFacts) -> list[list[Choice]]:
    """Per row: NCCL's choices for it (one normally; two when NCCL logged the size both ways)."""
    func = NCCL_FUNC.get(f.collective)
    if func is None:
        return [[] for _ in f.rows]
    everything = f.log.per_call if f.log is not None else []
    index = {t: i for i, t in enumerate(f.tests)}
    out = []
    for r in f.rows:
        i = index.get((r.type, r.redop, r.root))
        calls = f.probe[i] if f.probe is not None and i is not None and i < len(f.probe) else everything
        out.append(_choices_at(calls, func, r))
    return out


def _what(choice: Choice) -> str:
    algo, proto, nch = choice
    text = algo + (f"/{proto}" if proto else "")
    if nch is not None:
        text += f", {nch} channel" + ("" if nch == 1 else "s")
    return text


def size_ranges(rows: Sequence[ResultRow], per_row: Sequence[list[Choice]]) -> list[tuple[Test, int, int, list[Choice]]]:
    """Consecutive sizes of one test with the same choice(s), as (test, lo, hi, choices); sizes of
    later -N cycles repeat earlier ones and are folded in."""
    by_test: dict[Test, dict[int, list[Choice]]] = {}
    for r, choices in zip(rows, per_row):
        sizes = by_test.setdefault((r.type, r.redop, r.root), {})
        have = sizes.setdefault(r.size, [])
        have += [c for c in choices if c not in have]
    out: list[tuple[Test, int, int, list[Choice]]] = []
    for test, sizes in by_test.items():
        for size in sorted(sizes):
            choices = sizes[size]
            if out and out[-1][0] == test and out[-1][3] == choices:
                out[-1] = (test, out[-1][1], size, choices)
            else:
                out.append((test, size, size, choices))
    return out


def per_size_unknown(f: RunFacts) -> str:
    """Why NCCL's choice per size is unknown for this run."""
    if f.backend == "mpi":
        return "the CPU backend uses no NCCL"
    if f.collective == "unknown":
        return "the collective is unknown"
    if NCCL_FUNC.get(f.collective) is None:
        return f"NCCL logs no algorithm for {f.collective} (point-to-point sends and receives)"
    if f.nranks == 1 and (f.log_topology is None or f.log_topology.nranks == 1):
        return "none with one rank (NCCL copies locally, no algorithm is chosen)"
    if f.log is not None:
        why = next((u for u in f.log.unknown if u.startswith("per-call")), None)
        if why:
            return why.split(": ", 1)[1] if ": " in why else why
    for n in f.notes:
        if "per-call" in n or "NCCL_DEBUG" in n:
            return n
    return f.log_unknown or "NCCL logged no choice for these sizes"


def per_size_lines(f: RunFacts, per_row: Sequence[list[Choice]]) -> tuple[list[str], list[dict[str, Any]]]:
    ranges = size_ranges(f.rows, per_row)
    if not any(choices for *_, choices in ranges):
        return [f"# {f.collective} per size: NCCL's choice unknown ({per_size_unknown(f)})"], []
    several = len({t for t, *_ in ranges}) > 1
    lines, data = [], []
    for test, lo, hi, choices in ranges:
        label = f.collective + (f" {test[0]} {test[1]}" + (f" root {test[2]}" if test[2] >= 0 else "")
                                if several else "")
        span = format_bytes(lo) if lo == hi else f"{format_bytes(lo)} - {format_bytes(hi)}"
        what = " or ".join(_what(c) for c in choices) if choices else "no choice logged"
        if len(choices) > 1:
            what += " (NCCL chose differently for the same size)"
        lines.append(f"# {label} {span}: {what}")
        data.append({"type": test[0], "redop": test[1], "root": test[2], "lo": lo, "hi": hi,
                     "choices": [{"algo": a, "proto": p, "nchannels": n} for a, p, n in choices]})
    return lines, data


def _with_expected(rows: list[dict[str, Any]], expected: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each row's `expected_busbw`: what a healthy system of this kind reaches at its size (null: no curve)."""
    per_size = {int(s): e for s, e in expected.get("per_size") or []}
    return [{**r, "expected_busbw": per_size.get(r["size"])} for r in rows]


def _row_data(rows: Sequence[ResultRow], per_row: Sequence[list[Choice]]) -> list[dict[str, Any]]:
    """Per row (in the table's order): NCCL's algorithm/protocol/channels, null where unknown."""
    out = []
    for r, choices in zip(rows, per_row):
        d: dict[str, Any] = {"size": r.size, "type": r.type, "redop": r.redop, "root": r.root,
                             "algo": None, "proto": None, "nchannels": None}
        if len(choices) == 1:
            d["algo"], d["proto"], d["nchannels"] = choices[0]
        elif choices:
            d["choices"] = [{"algo": a, "proto": p, "nchannels": n} for a, p, n in choices]
        out.append(d)
    return out


# -- the verdict --------------------------------------------------------------------------------

CPU_CEILING = ("the CPU backend (MPI on host memory) has no bandwidth model: its speed is the host's memory and "
               "MPI library's, not a GPU interconnect's")


def judge_facts(f: RunFacts) -> RunJudgement:
    rows = [(r.size, r.out_of_place.busbw) for r in f.rows]
    if f.backend == "mpi":
        plateau = plateau_busbw(rows)
        ceiling = Ceiling(collective=f.collective, nranks=f.nranks, nnodes=max(1, len(f.hosts)), unknown=CPU_CEILING)
        traps = TrapReport(unchecked=[Unchecked("NCCL traps", "the CPU backend uses no NCCL")])
        return RunJudgement(f.collective, ceiling, plateau, judge(plateau, ceiling), traps)
    if f.hosts or f.log_topology is None:
        j = judge_run(f.hosts, f.collective, f.nranks, rows, env=f.env, log=f.log, nccl_version=f.nccl_version,
                      no_topology=f.topology_unknown or "no topology facts", host_env=f.host_env)
        env = {**(f.log.env if f.log is not None else {}), **dict(f.env)}
        _free_choice_ceiling(j, f, f.hosts, env)
        _unconfirmed_nvls(j, f, f.hosts, env)
        _profiler_channels(j, f, env)
    else:
        j = _judge_from_log(f, rows)
    nnodes = f.log_topology.nnodes if f.log_topology is not None else (len(f.hosts) or None)
    j.traps.raised += [t for t in failure_traps(f.log, f.failure_lines, f.rows,
                                                status="unknown" if f.nccl_log_only else f.status,
                                                out_of_bounds=f.out_of_bounds, version_note=f.version_note,
                                                nnodes=nnodes, gpus_per_host=_gpus_per_host(f),
                                                ends_in_gap=f.ends_in_gap)
                       if (t.name, t.evidence) not in {(x.name, x.evidence) for x in j.traps.raised}]
    if not _against_the_curve(j, f, rows):
        _short_of_plateau(j, f)
    _above_line_within_model(j)
    if f.status == "failed":
        j.verdict = Verdict("failed", None, f.end_reason or "the run failed")
    elif not f.rows:
        j.verdict = Verdict("unknown", None, f.end_reason or "the log ends with no result row")
    return j


def _gpu_names(f: RunFacts) -> list[str | None]:
    if f.hosts:
        return [g.name for h in f.hosts for g in h.gpus]
    return [f.log_topology.gpu_model] if f.log_topology is not None else []


def _against_the_curve(j: RunJudgement, f: RunFacts, rows: Sequence[tuple[int, float]]) -> bool:
    """Judge the plateau against the recorded healthy curve of this kind of system at the sizes the sweep
    reached (`expected_curve`), where one applies; records the curve and each size's expected busbw in
    `j.expected` either way.  True when the curve gave the verdict."""
    if not rows:
        j.expected = {"unknown": "no measured size"}
        return False
    exp, why = find_expectation(_gpu_names(f), j.ceiling.nranks, f.collective, j.ceiling)
    if exp is None:
        j.expected = {"unknown": why}
        _within_healthy_range(j, f, rows, why)
        return False
    j.expected = {**exp.to_dict(), "per_size": expected_per_size(exp, [s for s, _ in rows]),
                  "ratio": _ratio_per_size(rows, exp.at)}
    if j.verdict.label in ("unknown", "as expected", "below expected") and j.plateau.busbw is not None:
        curve = judge_curve(rows, j.plateau, j.ceiling, exp)
        if (curve.label == "unknown" and j.verdict.label != "unknown" and j.plateau.max_size >= CURVE_MIN_PLATEAU_BYTES
                and not banded_sizes(rows, exp)):
            _no_band(j, f, rows, exp, curve.text)
        else:
            j.verdict = curve
    return True


def _no_band(j: RunJudgement, f: RunFacts, rows: Sequence[tuple[int, float]], exp: Expectation, why: str) -> None:
    """The curve has a band at none of the sweep's plateau sizes (`Expectation.band`: on the ramp, too few machines
    recorded there to bound their spread, or their spread too wide), so it judges nothing there, and says why.  Two
    verdicts need no band: as expected where the ceiling's verdict is (>= 90 % of NCCL's model, or a share-per-step
    collective short of its plateau at 80-90 %: `_short_of_plateau`), and below expected where the sweep is, size by
    size from MIN_PLATEAU_BYTES (below it busbw is latency-bound), more than the ceiling's 10 % band under the
    lowest share of the ceiling any recorded healthy system reaches there (`Expectation.floor`): below every healthy
    recording whatever the spread between machines (the injected causes on 2x H200, all_reduce at 1 GiB: a busy GPU
    43 % of the ceiling, LL forced 33 %, against a floor of 88 % x 0.9).  Else not judged, with the curve's reason."""
    _short_of_plateau(j, f)
    v, c = j.verdict, j.ceiling
    if v.label == "as expected":
        j.verdict = Verdict(v.label, v.fraction, f"{v.text}; against the curve: {why}")
        return
    per: dict[int, list[float]] = {}
    for s, b in plateau_rows(rows):
        if s >= MIN_PLATEAU_BYTES:
            per.setdefault(s, []).append(b)
    low: list[tuple[int, float, float, str]] = []  # size, measured, lowest healthy share of the ceiling, which
    for s, bs in sorted(per.items()):
        got = exp.floor([s])
        if got is not None:
            low.append((s, statistics.median(bs), got[0], got[1]))
    top = c.ceiling or 0.0
    if top and low and statistics.median(b / (AS_EXPECTED_FRACTION * share * top) for _, b, share, _ in low) < 1:
        s, b, share, label = low[-1]
        j.verdict = Verdict("below expected", v.fraction, (
            f"{100 * b / top:.0f}% of the {fmt_gbps(top)} GB/s ceiling at {format_bytes(s)}, more than the "
            f"ceiling's {100 * (1 - AS_EXPECTED_FRACTION):.0f}% band under the lowest healthy system recorded there "
            f"({label}, {100 * share:.0f}%): below every healthy recording, whatever the spread between machines; "
            f"against the curve: {why}"))
        return
    j.verdict = Verdict("unknown", v.fraction, why)


def _ratio_per_size(rows: Sequence[tuple[int, float]], at: Any) -> list[list[Any]]:
    """[size, measured / expected] from CURVE_MIN_PLATEAU_BYTES up (the sizes a verdict reads; below, latency
    dominates and the recorded spread is wider), the median where a size was measured several times."""
    per: dict[int, list[float]] = {}
    for size, busbw in rows:
        want = at(size) if size >= CURVE_MIN_PLATEAU_BYTES else None
        if want and busbw is not None:
            per.setdefault(size, []).append(busbw / want)
    return [[size, round(statistics.median(v), 3)] for size, v in sorted(per.items())]


def _within_healthy_range(j: RunJudgement, f: RunFacts, rows: Sequence[tuple[int, float]], why: str) -> None:
    """No curve for this system, one host over NVLink (Ring or point-to-point): 'below expected' against
    the ceiling but above the lowest share of the ceiling any recorded healthy system reached at these
    sizes (`expected_curve.healthy_floor`, with the band's margin) is within what healthy systems do
    there: not judged, and said what would judge it.  Below that floor it stays below."""
    c, v, p = j.ceiling, j.verdict, j.plateau
    if (v.label != "below expected" or v.fraction is None or c.bound != "NVLink" or c.nnodes != 1
            or c.algorithm not in SHAPE_ALGOS):
        return
    floor = healthy_floor(f.collective, [s for s, _ in plateau_rows(rows)])
    if floor is None or v.fraction < AS_EXPECTED_FRACTION * floor[0]:
        return
    j.verdict = Verdict("unknown", v.fraction, (
        f"{v.text}, but {why}, and healthy systems recorded reach as little as {100 * floor[0]:.0f}% of the "
        f"ceiling at {format_bytes(p.max_size)} ({floor[1]}): a recorded healthy curve of this system, or a sweep "
        "to >= 4 GiB against the ceiling, would judge it"))


# all_gather, reduce_scatter and alltoall move a rank's share (size / n) per step: at the sizes an all_reduce is
# at its plateau they are not yet.  Measured on 4x H100 (NCCL 2.28.9, tests/fixtures/log_corpus h100-healthy-*):
# all_gather 316.5 GB/s at 512 MiB but 348.5 at 30 GiB, reduce_scatter 313.2 and alltoall 317.6 at 512 MiB
# against a 370.8 GB/s ceiling: 84-86 %.  Below 1 GiB per rank a healthy run of these sits 80-90 % of the ceiling.
SHARE_PLATEAU_BYTES = 1 << 30
SHARE_AS_EXPECTED_FRACTION = 0.80
SHARE_COLLECTIVES = ("all_gather", "reduce_scatter", "alltoall")


def _short_of_plateau(j: RunJudgement, f: RunFacts) -> None:
    """'below expected' at 80-90 % for a share-per-step collective whose largest share is short of its plateau:
    within what a healthy run reaches there, so 'as expected', and the text says why."""
    v, p = j.verdict, j.plateau
    n = max(1, f.nranks)
    if (v.label == "below expected" and v.fraction is not None and v.fraction >= SHARE_AS_EXPECTED_FRACTION
            and f.collective in SHARE_COLLECTIVES and p.max_size // n < SHARE_PLATEAU_BYTES):
        j.verdict = Verdict("as expected", v.fraction, (
            f"{v.text}; {f.collective} moves a rank's share per step, {format_bytes(p.max_size // n)} here, short "
            f"of its plateau (>= 1 GiB per rank): healthy runs reach 80-90 % there (4x H100: all_gather 316.5 GB/s "
            f"at 512 MiB, 348.5 at 30 GiB)"))


def _above_line_within_model(j: RunJudgement) -> None:
    """Above the line rate but within the band of a ceiling that already counts the switch's or the tree's
    reduction (NVLS, NVLSTree, Tree, CollNet): that figure is what the model expects, so 'as expected'."""
    v, c = j.verdict, j.ceiling
    if (v.label == "above the line rate" and v.fraction is not None and c.algorithm in ABOVE_LINE_ALGOS
            and AS_EXPECTED_FRACTION <= v.fraction <= 1 + ABOVE_MODEL_TOLERANCE):
        j.verdict = Verdict("as expected", v.fraction, f"{100 * v.fraction:.0f}% of the {fmt_gbps(c.ceiling or 0)} GB/s "
                            f"{c.algorithm} ceiling; {v.text}")


def _unconfirmed_nvls(j: RunJudgement, f: RunFacts, hosts: Sequence[HostTopology], env: Mapping[str, str]) -> None:
    """NVLS (or NVLSTree) only predicted, not seen in NCCL's lines, and the run below its ceiling but at Ring's:
    NVLS may simply be off (NCCL_NVLS_ENABLE=0, no multicast in a VM or container, an NCCL before 2.17), which
    is no fault -- 'as expected' for Ring, and said so."""
    c, v = j.ceiling, j.verdict
    if v.label != "below expected" or c.algorithm not in ("NVLS", "NVLSTree") or c.algorithm_source != "predicted":
        return
    ring = expected_ceiling(hosts, f.collective, c.nranks, algorithm="Ring", algorithm_source="NVLS off",
                            env=env, nccl_version=f.nccl_version, host_env=f.host_env)
    if ring.ceiling is None or j.plateau.busbw is None:
        return
    rv = judge(j.plateau, ring)
    if rv.label != "as expected":
        return
    ring.reasoning = (f"NCCL's model would pick {c.algorithm} ({fmt_gbps(c.ceiling or 0)} GB/s), which the log "
                      f"does not confirm; with it off (NCCL_NVLS_ENABLE=0, no multicast, NCCL < 2.17) Ring's bound "
                      f"holds: " + ring.reasoning)
    if c.reasoning.startswith("assumed from the GPU model"):
        ring.reasoning = "assumed from the GPU model: " + ring.reasoning
    j.ceiling = ring
    j.verdict = Verdict("as expected", rv.fraction, f"{rv.text} for Ring; {c.algorithm} was predicted, not seen "
                        "(NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING shows it)")


def _free_choice_ceiling(j: RunJudgement, f: RunFacts, hosts: Sequence[HostTopology], env: Mapping[str, str]) -> None:
    """NCCL_ALGO / NCCL_PROTO forced and the forced algorithm has no model: judge against what the hardware gives
    when NCCL chooses freely (the forced choice is then the named cause)."""
    forced = {k: env[k] for k in ("NCCL_ALGO", "NCCL_PROTO") if env.get(k)}
    if j.ceiling.ceiling is not None or not forced or not hosts:
        return
    free_env = {k: v for k, v in env.items() if k not in forced}
    net = network_in_use(f.log) if f.log is not None else None
    c = expected_ceiling(hosts, f.collective, j.ceiling.nranks, env=free_env, nccl_version=f.nccl_version, net=net,
                         host_env=f.host_env)
    if c.ceiling is None:
        return
    c.reasoning = (f"{', '.join(f'{k}={v}' for k, v in forced.items())} forced, and {j.ceiling.unknown or 'that choice'}"
                   f"; judged against NCCL's free choice: " + c.reasoning)
    if j.ceiling.reasoning.startswith("assumed from the GPU model"):
        c.reasoning = "assumed from the GPU model: " + c.reasoning
    j.ceiling = c
    j.verdict = judge(j.plateau, c)


def _profiler_channels(j: RunJudgement, f: RunFacts, env: Mapping[str, str]) -> None:
    """Live runs: what the probe saw per call (NCCL's log or the profiler plugin) as evidence for the traps the
    environment raised: the channels under a cap, the algorithm/protocol under NCCL_ALGO / NCCL_PROTO."""
    calls = [c for per_test in (f.probe or []) for c in per_test if c.algo]
    if not calls:
        return
    chans = [c.nchannels for c in calls if c.nchannels]
    if chans and "channels-capped" in j.traps.names():
        from .traps import check_channels
        better = check_channels(env, f.log, chans)
        j.traps.raised = [better[0] if t.name == "channels-capped" and better else t for t in j.traps.raised]
    top = max(calls, key=lambda c: c.nbytes)
    seen = f"NCCL's per-call choice ({top.fmt}): {top.algo}" + (f"/{top.proto}" if top.proto else "") + \
        f" at {format_bytes(top.nbytes)}"
    j.traps.raised = [dataclasses.replace(t, evidence=f"{t.evidence}; {seen}")
                      if t.name in ("algo-forced", "proto-forced") and seen not in t.evidence else t
                      for t in j.traps.raised]


def _at_the_nodes_own_bound(f: RunFacts, t: LogTopology, hosts: Sequence[HostTopology], env: Mapping[str, str],
                            ceiling: Ceiling, plateau: Any) -> None:
    """Several hosts, NIC speeds not in the log: the ceiling is min(the node's own bound, the NICs'), so it is
    at most the node's own (NVLink or PCIe) bound.  A plateau at >= 90 % of that is as expected whatever the
    NICs are; anything lower stays unjudged (the NICs could explain it)."""
    from .ceiling import intra_bound

    ppn = t.ranks_per_host
    if not ppn or ppn < 2 or f.collective not in ("all_reduce", "all_gather", "reduce_scatter", "broadcast",
                                                  "reduce"):
        return
    b, _ = intra_bound(hosts[0], ppn, f.nccl_version, env)
    if b is None or plateau.busbw < AS_EXPECTED_FRACTION * b.model:
        return
    ceiling.ceiling, ceiling.bound, ceiling.line_rate = b.model, b.kind, b.line_rate
    ceiling.algorithm, ceiling.algorithm_source = "Ring", "predicted"
    ceiling.reasoning = (f"assumed from the GPU model: {b.text}; the NICs' speed is not in the log, but a ring "
                         f"across hosts runs at most at each node's own bound, so {fmt_gbps(b.model)} GB/s is "
                         "an upper bound whatever the NICs are")
    ceiling.unknown = ""


def _gpus_per_host(f: RunFacts) -> int | None:
    if f.hosts:
        return max(len(h.gpus) for h in f.hosts)
    t = f.log_topology
    if t is not None and t.hosts and all(h.ranks for h in t.hosts):
        return max(len(h.ranks) for h in t.hosts)
    return t.ranks_per_host if t is not None else None


def _judge_from_log(f: RunFacts, rows: Sequence[tuple[int, float]]) -> RunJudgement:
    """An imported log: the ceiling over hosts assumed from the GPU model (said so), the traps from NCCL's
    log and the environment alone, and the RDMA floor between hosts of datacenter GPUs."""
    t = f.log_topology
    assert t is not None
    hosts, why_not = assumed_hosts(t, f.log)
    nranks = t.nranks or f.nranks
    env = {**t.env, **dict(f.env)}
    if hosts:
        ceiling = expected_ceiling(hosts, f.collective, nranks, log=f.log, env=env, nccl_version=f.nccl_version)
        if ceiling.reasoning:
            ceiling.reasoning = "assumed from the GPU model: " + ceiling.reasoning
    else:
        ceiling = expected_ceiling([], f.collective, nranks, log=f.log, env=env, nccl_version=f.nccl_version)
        ceiling.unknown = why_not
    plateau = plateau_busbw(rows)
    verdict = judge(plateau, ceiling)
    if hosts:
        free = RunJudgement(f.collective, ceiling, plateau, verdict, TrapReport())
        if ceiling.ceiling is None:
            _free_choice_ceiling(free, f, hosts, env)
        _unconfirmed_nvls(free, f, hosts, env)
        ceiling, verdict = free.ceiling, free.verdict
    unsure_below = GEFORCE_UNSURE_FRACTION if "GeForce" in (t.gpu_model or "") else PCIE_UNSURE_FRACTION
    if (hosts and t.board is not None and not t.board.nvswitch_links and verdict.label == "below expected"
            and verdict.fraction is not None and verdict.fraction >= unsure_below):
        # a PCIe card's layout decides between NCCL's PCIe model and about half of it through the CPU
        verdict = Verdict("unknown", verdict.fraction, (
            f"{verdict.text}, but on PCIe cards the switch layout, the CPU sockets between the GPUs and whether the "
            "card allows peer-to-peer decide between that and about half of it through host memory; the log "
            "states none of them (nvidia-smi topo -m does)"))
    if hosts and ceiling.ceiling is None and (t.nnodes or 0) > 1 and plateau.busbw is not None and not plateau.reason:
        _at_the_nodes_own_bound(f, t, hosts, env, ceiling, plateau)
        if ceiling.ceiling is not None:
            verdict = judge(plateau, ceiling)
    net = (network_in_use(f.log) or "") if f.log is not None else ""
    if (verdict.label == "unknown" and ceiling.ceiling is None and plateau.busbw is not None and not plateau.reason
            and (t.nnodes or 0) > 1 and t.ranks_per_host is not None and is_datacenter(t.gpu_model)
            and plateau.busbw < 0.9 * RDMA_FLOOR_GBPS):
        ceiling.ceiling, ceiling.bound, ceiling.line_rate = RDMA_FLOOR_GBPS, "NIC, the least RDMA fabric (assumed)", 12.5
        rdma = net and net.lower() != "socket"
        ceiling.reasoning = (f"{t.nnodes} hosts of {t.gpu_model}: such hosts are joined by RDMA of >= 100 Gb/s per "
                             f"node; NCCL plans the slowest at {fmt_gbps(RDMA_FLOOR_GBPS)} GB/s (its NET_BW); "
                             + (f"{fmt_gbps(plateau.busbw)} GB/s is below even that although NCCL used {net} "
                                "(GDR, the NICs in use, or the fabric: see the traps)" if rdma else
                                f"{fmt_gbps(plateau.busbw)} GB/s between them is TCP-socket territory")
                             + (" -- and NCCL's log says 'Using network Socket'" if net.lower() == "socket" else
                                "" if f.log is not None and f.log.sources else
                                "; no NCCL INFO line says which network: run with NCCL_DEBUG=INFO "
                                "NCCL_DEBUG_SUBSYS=INIT,NET and look for 'Using network' and NET/IB or NET/OFI lines"))
        ceiling.unknown = ""
        verdict = judge(plateau, ceiling)
    no_topo = "the log states no link facts (NVLink, PCIe, NIC states)" + (
        "; board assumed from the GPU model" if hosts else "")
    traps = find_traps([], f.log, env, nnodes=t.nnodes, no_topology=no_topo, host_names=t.host_names)
    if (t.nnodes or 0) > 1 and (f.log is None or not f.log.sources) and ceiling.bound and "assumed" in ceiling.bound:
        traps.raised.append(Trap(
            "net-socket-fallback",
            f"likely, from the figures alone: {fmt_gbps(plateau.busbw or 0)} GB/s between {t.nnodes} hosts of "
            f"{t.gpu_model} (no NCCL INFO line in the log to confirm the transport)",
            "run again with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET: 'Using network Socket' confirms it; then "
            "check the network plugin (aws-ofi-nccl on EFA) and NCCL_IB_HCA / NCCL_NET / NCCL_IB_DISABLE", WARN))
    raised = set(traps.names())
    traps.unchecked = [u for u in traps.unchecked if u.name not in raised]
    return RunJudgement(f.collective, ceiling, plateau, verdict, traps)


def explain_run(f: RunFacts) -> Explained:
    """The lines after `# Avg bus bandwidth` and the data behind them (the JSON's EXPLAIN_KEY)."""
    lines: list[str] = []
    j = judge_facts(f)  # first: judging an import may add an assumption its topology lines then state
    if f.log_topology is not None and not f.hosts:
        lines += f.log_topology.lines()
    if f.status != "complete" and f.status != "failed" and not f.rows:
        lines.append(f"# Run did not finish: {f.end_reason or 'the log ends with no result row'}")
    elif f.status == "complete" and not f.rows:
        lines.append(f"# No result row in the log: {f.end_reason or 'nothing to judge'}")
    if f.collective_source.startswith("unknown: "):
        lines.append(f"# Collective unknown: {f.collective_source.split(': ', 1)[1]}")
    elif f.collective_source and not f.collective_source.startswith(("the log's", "--collective")):
        lines.append(f"# Collective {f.collective}: from {f.collective_source}")
    if f.backend == "mpi":
        lines.append("# NCCL path: none (the CPU backend runs MPI collectives on host memory)")
        per_row: list[list[Choice]] = [[] for _ in f.rows]
        ranges: list[dict[str, Any]] = []
    else:
        lines.append(nccl_path_line(f.log, f.log_unknown))
        per_row = row_choices(f)
        size_lines, ranges = per_size_lines(f, per_row)
        lines += size_lines if f.rows else []
    if j.verdict.label == "failed":
        lines.append(f"# Run failed: {j.verdict.text}")
    one_rank = f.nranks == 1 and (f.log_topology is None or f.log_topology.nranks == 1)  # an import: if known
    if one_rank:  # nothing crossed a link: said before the plateau is read as a benchmark
        lines.append(f"# {ONE_RANK_LINE[0].upper()}{ONE_RANK_LINE[1:]}")
    lines += j.lines()
    if not f.hosts and f.backend != "mpi" and f.log_topology is None:
        lines.append(f"# Topology unknown: {f.topology_unknown or 'no topology facts'}")
    data: dict[str, Any] = {
        "lines": lines,
        "nccl_log": {"facts": f.log.to_dict()} if f.log is not None else None,
        "nccl_log_unknown": f.log_unknown,
        "capture_notes": list(f.notes),
        "tests": [list(t) for t in f.tests],
        "probe": ([[dataclasses.asdict(c) for c in calls] for calls in f.probe] if f.probe is not None else None),
        "per_size": ranges,
        "rows": _with_expected(_row_data(f.rows, per_row), j.expected),
        "judgement": j.to_dict(),
        "causes": j.traps.causes(),
        "log_topology": f.log_topology.to_dict() if f.log_topology is not None else None,
        "status": f.status,
    }
    return Explained(lines, data, j)
