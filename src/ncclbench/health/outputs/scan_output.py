"""What `ncclbench health` writes: the verdict table (stdout), JSON, the drain list.

Exit status: FAULTS_FOUND (8) when the scan confirmed at least one fault - a
code of its own, outside nccl-tests' 0-7 and 255, so a Slurm prolog or a
Kubernetes job can tell "the fabric has a bad part" from "the tool failed" (4
timeout, 5 not supported, 255 bad arguments keep their nccl-tests meaning);
else NOT_JUDGED (9) when some host could not be called healthy (a group with
nothing to compare it with, an unconfirmed suspect, a host not or partly
tested), since an unknown is not "healthy"; 0 only when every host was judged
healthy (or, with `accept_not_judged`, when no fault was confirmed).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from ...core.config import Backend
from ...core.errors import ExitCode
from ..core.findings import Finding
from ..core.scan import HOST_STATUSES, NOT_JUDGED_S, HealthReport

FAULTS_FOUND = int(ExitCode.FAULTS_FOUND)
NOT_JUDGED = int(ExitCode.NOT_JUDGED)
EVIDENCE_LINES = 3  # per finding in the table; the JSON keeps all of it


def _num(x: float | None, unit: str = "") -> str:
    if x is None:
        return "-"
    return f"{x:.4g}{(' ' + unit) if unit else ''}"


def verdict_table(report: HealthReport, meta: Mapping[str, Any] | None = None,
                  accept_not_judged: bool = False) -> str:
    fleet = report.fleet
    lines = []
    head = f"# ncclbench health: {fleet.nhosts} host(s), {fleet.world_size} rank(s)"
    if meta and meta.get("backend"):
        head += f", {meta['backend']}"
    head += f"; {len(report.rounds)} round(s) in {report.wall_s:.1f} s"
    lines.append(head)
    for note in report.notes:
        lines.append(f"# note: {note}")
    rows = [("host", "component", "detail", "measured", "expected", "z", "verdict")]
    for f in report.findings:
        rows.append((f.where, f.component, f.detail or "-", _num(f.measured, f.unit if f.measured else ""),
                     _num(f.expected, f.unit if f.expected else ""), "-" if f.z is None else f"{f.z:+.1f}",
                     f.verdict))
    if len(rows) > 1:
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        for j, r in enumerate(rows):
            text = "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()
            lines.append(("# " if j == 0 else "  ") + text)
            if j:
                f = report.findings[j - 1]
                for e in f.evidence[:EVIDENCE_LINES]:
                    lines.append(f"      {e}")
                if len(f.evidence) > EVIDENCE_LINES:
                    lines.append(f"      ... {len(f.evidence) - EVIDENCE_LINES} more line(s) of evidence in the JSON")
                if f.pct_expected is not None:
                    lines.append(f"      {f.pct_expected:.0f} % of the expected ceiling of its group shape "
                                 "(explain model, large messages)")
    lines.extend(figure_lines(report, meta))
    lines.extend(summary_lines(report, accept_not_judged))
    return "\n".join(lines) + "\n"


def summary_lines(report: HealthReport, accept_not_judged: bool = False) -> list[str]:
    """Hosts per status, each counted apart (healthy / faulty / not judged / ...), what
    was not judged and why, and the scan's outcome with its exit status."""
    by: dict[str, list[str]] = {}
    for h, s in report.host_status.items():
        by.setdefault(s, []).append(h)
    counts = report.count()
    lines = ["# hosts: " + ", ".join(f"{counts[k]} {k}" for k in HOST_STATUSES if counts.get(k) or k in (
        "healthy", "faulty", NOT_JUDGED_S))]
    for status, text in (("healthy", "healthy"), ("faulty", "faulty"),
                         (NOT_JUDGED_S, "not judged (no fault seen, nothing to judge against)"),
                         ("suspect", "suspect (one bad measurement, not confirmed)"),
                         ("partly tested", "partly tested (fine where measured; later rounds did not reach them)"),
                         ("not tested", "not tested")):
        if by.get(status):
            lines.append(f"# {text}: {len(by[status])} host(s): {_names(by[status])}")
    for host, whys in list(report.not_judged.items())[:EVIDENCE_LINES]:
        lines.append(f"#   {host}: {whys[0]}" + (f" (+{len(whys) - 1} more)" if len(whys) > 1 else ""))
    if len(report.not_judged) > EVIDENCE_LINES:
        lines.append(f"#   ... {len(report.not_judged) - EVIDENCE_LINES} more host(s) not judged: see the JSON")
    code = exit_code(report, accept_not_judged)
    confirmed = report.confirmed
    if confirmed:
        lines.append(f"# faults found: {len(confirmed)} (exit {code}); drain: {', '.join(report.drain) or '-'}")
    elif report.unresolved or report.open_suspects:
        parts = [f"{len(report.unresolved)} host(s) not judged healthy"] if report.unresolved else []
        if report.open_suspects:
            parts.append(f"{len(report.open_suspects)} unconfirmed suspect(s) listed")
        accepted = " (accepted: --accept-not-judged)" if accept_not_judged else ""
        lines.append(f"# no fault confirmed, but {', '.join(parts)}: exit {code}{accepted}")
    else:
        lines.append(f"# no fault confirmed: every host judged healthy (exit {code})")
    return lines


def _measured_line(rec: Mapping[str, Any]) -> str:
    """One fleet round: a single group's figures, or the median and range of several."""
    groups = rec.get("groups", [])
    bw = [g["busbw"] for g in groups if g.get("busbw") is not None]
    lat = [g["lat_us"] for g in groups if g.get("lat_us") is not None]
    what = "algbw" if groups and groups[0].get("shape", "").startswith("local:") else "busbw"
    if len(groups) == 1:
        g = groups[0]
        text = f"{g['group']}: {what} {_num(g.get('busbw'), 'GB/s')}, latency {_num(g.get('lat_us'), 'us')}"
        if g.get("status") not in ("ok", None):
            text += f" ({g['status']})"
    elif bw:
        text = (f"{len(groups)} groups: {what} median {_num(_median(bw), 'GB/s')} (min {_num(min(bw))}, max "
                f"{_num(max(bw))}), latency median {_num(_median(lat), 'us') if lat else '-'}")
    else:
        text = f"{len(groups)} groups: none answered"
    name = rec["round"] + (" (median of rails)" if str(rec.get("purpose", "")).endswith("median of rails") else "")
    return f"# measured {name}: {text}"


def _expected_lines(expected: Mapping[str, Any], meta: Mapping[str, Any] | None) -> list[str]:
    """The expected ceiling of each shape (and what was judged against it), or why there is none."""
    out = []
    for shape, e in expected.items():
        if e.get("ceiling") is not None:
            out.append(f"# expected ceiling {shape}: {e['text']} (a large-message figure; at the scan's "
                       "bandwidth size a healthy group stays below it)")
            if e.get("physics"):
                out.append(f"# judged against the ceiling {shape}: {e['physics']['text']}")
        else:
            out.append(f"# expected ceiling {shape}: unknown: {e.get('text', 'no facts')}")
    if not expected and str((meta or {}).get("backend", "")).startswith(Backend.MPI.label):
        out.append("# expected ceiling: none on the CPU backend (MPI over host memory and TCP has no model here): "
                   "groups are judged against the fleet or a baseline only")
    return out


def _setting_lines(meta: Mapping[str, Any] | None) -> list[str]:
    """The thresholds the scan judged with and the traps found on each host."""
    out = []
    thresholds = (meta or {}).get("thresholds")
    if thresholds:
        out.append(f"# thresholds: {thresholds}")
    for host, c in dict((meta or {}).get("causes") or {}).items():
        for t in c.get("traps", []):
            what = " (a setting of this job)" if t.get("setting") else ""
            out.append(f"# trap {host}: {str(t['severity']).upper()} {t['name']}{what}: {t['evidence']}")
    return out


def _lone_unit_line(report: HealthReport, expected: Mapping[str, Any]) -> str:
    """A fleet of one GPU (or host): what its figure was judged against, if anything."""
    one = f"# one {report.fleet.unit_word}:"
    ref = (report.references.get("local:1x1") or {}).get("busbw")
    phys = (expected.get("local:1x1") or {}).get("physics")
    if ref is not None:
        return (f"{one} judged against {ref['source']} ({_num(ref['center'], 'GB/s')})"
                + (" and its ceiling" if phys and phys.get("threshold") else ""))
    if phys and phys.get("threshold"):
        return f"{one} no fleet to compare with: judged against its memory's ceiling (above)"
    return (f"{one} nothing to compare its figure with (no fleet of GPUs, no pairs, no ceiling at "
            "this size): reported, not judged; judge it against a stored baseline with --baseline FILE "
            "(written by --save-baseline on a known-good run)")


def figure_lines(report: HealthReport, meta: Mapping[str, Any] | None = None) -> list[str]:
    """What each phase's fleet round measured (one group: its figures; several: median and
    range), the expected ceiling of each shape where the explain model gives one (and why
    not where it does not), and, for a lone GPU, that there is nothing to compare it with."""
    expected = dict((meta or {}).get("expected") or {})
    out = [_measured_line(rec) for rec in report.measurements if str(rec.get("purpose", "")).startswith("fleet")]
    out += _expected_lines(expected, meta) + _setting_lines(meta)
    if report.fleet.world_size == 1:
        out.append(_lone_unit_line(report, expected))
    return out


def _median(values: list[float]) -> float:
    import statistics

    return float(statistics.median(values))


def _names(hosts: list[str], limit: int = 12) -> str:
    return ", ".join(hosts[:limit]) + (f", ... ({len(hosts) - limit} more)" if len(hosts) > limit else "")


def scan_document(report: HealthReport, meta: Mapping[str, Any]) -> dict:
    """The scan as plain JSON data: what --json writes, the store keeps and `show`/`report`
    read back (`health.core.scan.report_from_json`); "exit_code" is the command's ("accept_not_judged"
    in `meta` when --accept-not-judged turned a 9 into 0), "outcome" says which case it is."""
    accept = bool(meta.get("accept_not_judged"))
    doc = {"ncclbench_health": 1, **meta, **report.to_json(), "outcome": outcome(report),
           "exit_code": exit_code(report, accept)}
    return json.loads(json.dumps(doc, default=json_default))


def write_json(path: str, report: HealthReport, meta: Mapping[str, Any]) -> None:
    Path(path).write_text(json.dumps(scan_document(report, meta), indent=1) + "\n")


def drain_text(report: HealthReport) -> str:
    """One host name per line: the hosts a scheduler should take out (maybe none); then,
    when some host could not be judged, `#` comment lines naming them (not to drain: nothing
    was found against them, but they are not known healthy either).  A clean scan's file is
    empty."""
    text = "".join(f"{h}\n" for h in report.drain)
    for status in ("not judged", "suspect", "partly tested", "not tested"):
        hosts = [h for h, s in report.host_status.items() if s == status]
        if hosts:
            text += f"# {status} (not drained, not known healthy): {' '.join(hosts)}\n"
    return text


def write_drain(path: str, report: HealthReport) -> None:
    Path(path).write_text(drain_text(report))


def outcome(report: HealthReport) -> str:
    """"faults found", "not judged" (no fault confirmed, some host not judged healthy) or "healthy"."""
    if report.faults_found:
        return "faults found"
    return NOT_JUDGED_S if report.unresolved or report.open_suspects else "healthy"


def exit_code(report: HealthReport, accept_not_judged: bool = False) -> int:
    """8 faults found; 9 no fault but something not judged (0 with `accept_not_judged`); 0 healthy."""
    if report.faults_found:
        return FAULTS_FOUND
    if (report.unresolved or report.open_suspects) and not accept_not_judged:
        return NOT_JUDGED
    return 0


def emit(report: HealthReport, meta: Mapping[str, Any], json_path: str | None, drain_path: str | None,
         out: TextIO) -> int:
    accept = bool(meta.get("accept_not_judged"))
    out.write(verdict_table(report, meta, accept))
    out.flush()
    if json_path:
        write_json(json_path, report, meta)
    if drain_path:
        write_drain(drain_path, report)
    return exit_code(report, accept)


def json_default(obj: Any) -> Any:
    """JSON for what the report holds besides plain data (findings, numpy scalars)."""
    if isinstance(obj, Finding):
        return obj.to_json()
    if hasattr(obj, "item"):
        return obj.item()
    return str(obj)
