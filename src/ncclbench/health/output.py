"""What `ncclbench health` writes: the verdict table (stdout), JSON, the drain list.

Exit status: 0 when nothing is confirmed faulty, FAULTS_FOUND (8) when the
scan confirmed at least one fault - a code of its own, outside nccl-tests'
0-7 and 255, so a Slurm prolog or a Kubernetes job can tell "the fabric has
a bad part" from "the tool failed" (4 timeout, 5 not supported, 255 bad
arguments keep their nccl-tests meaning).  Suspects alone (one bad
measurement, not confirmed) do not set it; they are listed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from .findings import Finding
from .scan import HealthReport

FAULTS_FOUND = 8
EVIDENCE_LINES = 3  # per finding in the table; the JSON keeps all of it


def _num(x: float | None, unit: str = "") -> str:
    if x is None:
        return "-"
    return f"{x:.4g}{(' ' + unit) if unit else ''}"


def verdict_table(report: HealthReport, meta: Mapping[str, Any] | None = None) -> str:
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
    healthy = [h for h, s in report.host_status.items() if s == "healthy"]
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
    untested = [h for h, s in report.host_status.items() if s == "not tested"]
    partly = [h for h, s in report.host_status.items() if s == "partly tested"]
    lines.append(f"# healthy: {len(healthy)} host(s)" + (f": {_names(healthy)}" if healthy else ""))
    if partly:
        lines.append(f"# partly tested (fine where measured; later rounds did not reach them): {len(partly)} "
                     f"host(s): {_names(partly)}")
    if untested:
        lines.append(f"# not tested: {len(untested)} host(s): {_names(untested)}")
    confirmed = report.confirmed
    if confirmed:
        lines.append(f"# faults found: {len(confirmed)} (exit {FAULTS_FOUND}); drain: {', '.join(report.drain) or '-'}")
    else:
        suspects = [f for f in report.findings if not f.confirmed and f.verdict.startswith("suspect")]
        lines.append("# no fault confirmed" + (f" ({len(suspects)} unconfirmed suspect(s) listed)" if suspects else ""))
    return "\n".join(lines) + "\n"


def _names(hosts: list[str], limit: int = 12) -> str:
    return ", ".join(hosts[:limit]) + (f", ... ({len(hosts) - limit} more)" if len(hosts) > limit else "")


def write_json(path: str, report: HealthReport, meta: Mapping[str, Any]) -> None:
    doc = {"ncclbench_health": 1, **meta, **report.to_json()}
    Path(path).write_text(json.dumps(doc, indent=1, default=_default) + "\n")


def write_drain(path: str, report: HealthReport) -> None:
    """One host name per line: the hosts a scheduler should take out (maybe none)."""
    Path(path).write_text("".join(f"{h}\n" for h in report.drain))


def exit_code(report: HealthReport) -> int:
    return FAULTS_FOUND if report.faults_found else 0


def emit(report: HealthReport, meta: Mapping[str, Any], json_path: str | None, drain_path: str | None,
         out: TextIO) -> int:
    out.write(verdict_table(report, meta))
    out.flush()
    if json_path:
        write_json(json_path, report, meta)
    if drain_path:
        write_drain(drain_path, report)
    return exit_code(report)


def _default(obj: Any) -> Any:
    if isinstance(obj, Finding):
        return obj.to_json()
    if hasattr(obj, "item"):
        return obj.item()
    return str(obj)
