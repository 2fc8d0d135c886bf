"""JUnit XML for `check` and `health` (`--junit FILE`): what CI systems (Jenkins,
GitLab, GitHub Actions' test reporters) read to show a pass/fail per item.

The shape is the common JUnit schema (Jenkins' junit-10.xsd / Ant's): `testsuites`
holding one `testsuite` with `tests`, `failures`, `errors`, `skipped`, `time`,
`timestamp`, `hostname`, and one `testcase` (`classname`, `name`, `time`) per
judged item, carrying `<failure message type>` when it failed or `<skipped
message>` when it was not judged - a "not judged" item is never a pass.

`check`: one case per judged figure of the gate (`store.gate_format.gate_to_dict`):
plateau busbw, latency floor, each size with --every-size; a regression fails, an
unstable candidate (the gate's exit 9) is skipped as not judged.  `health`: one case per
host (faulty -> failure with its findings' evidence, not judged -> skipped), and
one per finding that is no host's own (a link, a rail, a phase not judged).
"""

from __future__ import annotations

import datetime
import socket
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .health_fields import where_text

NOT_JUDGED = "not judged"


@dataclass
class Case:
    classname: str
    name: str
    time_s: float = 0.0
    failure: str | None = None  # message of a failure (the case failed)
    failure_type: str = ""
    skipped: str | None = None  # message of a skip (not judged)
    details: str = ""  # the evidence: failure text, or system-out of a passing case


def render(suite: str, cases: Sequence[Case], time_s: float = 0.0, timestamp: str | None = None,
           hostname: str | None = None) -> str:
    stamp = timestamp or datetime.datetime.now().replace(microsecond=0).isoformat()
    failures = sum(c.failure is not None for c in cases)
    skipped = sum(c.skipped is not None and c.failure is None for c in cases)
    counts = {"tests": str(len(cases)), "failures": str(failures), "errors": "0", "skipped": str(skipped),
              "time": f"{time_s:.3f}"}
    root = ET.Element("testsuites", {"name": suite, **counts})
    ts = ET.SubElement(root, "testsuite", {"name": suite, **counts, "timestamp": stamp,
                                           "hostname": hostname or socket.gethostname()})
    for c in cases:
        tc = ET.SubElement(ts, "testcase", {"classname": c.classname, "name": c.name, "time": f"{c.time_s:.3f}"})
        if c.failure is not None:
            el = ET.SubElement(tc, "failure", {"message": c.failure, "type": c.failure_type or "failure"})
            el.text = c.details or c.failure
        elif c.skipped is not None:
            ET.SubElement(tc, "skipped", {"message": c.skipped})
            if c.details:
                ET.SubElement(tc, "system-out").text = c.details
        elif c.details:
            ET.SubElement(tc, "system-out").text = c.details
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write(path: str, text: str) -> None:
    from .metrics import write_textfile

    write_textfile(path, text)


# -- check ----------------------------------------------------------------------------------------


def check_cases(gate: Mapping[str, Any]) -> list[Case]:
    """One case per judged figure of `gate_to_dict`'s result."""
    cases = []
    for j in gate.get("judgements", ()):
        name = str(j.get("figure", "?"))
        case = Case(f"ncclbench.check.{j.get('series', '')}".rstrip("."), name, details=_figure_text(j))
        if j.get("failed"):
            case.failure = f"REGRESSION: {j.get('series')} {name}: {_figure_text(j).split(';')[0]}"
            case.failure_type = "regression"
        elif j.get("unstable"):
            case.skipped = f"{NOT_JUDGED}: {j['unstable']}"
        cases.append(case)
    if not gate.get("ok", True) and not any(c.failure or c.skipped for c in cases):
        cases.append(Case("ncclbench.check", "gate", failure=f"the gate's outcome: {gate.get('status', 'failed')}",
                          failure_type="regression"))
    if not cases:
        cases.append(Case("ncclbench.check", "gate", skipped=f"{NOT_JUDGED}: no figure to judge"))
    return cases


def _figure_text(j: Mapping[str, Any]) -> str:
    """'12.5 -> 10.1 GB/s, 19.20 % worse (limit 5.00 %); noise 1.2 % x 3 from ...; sizes ...'"""
    def pct(v: Any) -> str:
        return f"{v:.2f} %" if isinstance(v, (int, float)) else "unknown"

    unit = "GB/s" if j.get("metric") == "busbw" else "us"
    noise = "noise unknown" if j.get("noise_pct") is None else \
        f"noise {pct(j.get('noise_pct'))} x {j.get('noise_multiple')} from {j.get('noise_source')}"
    return (f"{j.get('baseline')} -> {j.get('value')} {unit}, {pct(j.get('worse_pct'))} worse (limit "
            f"{pct(j.get('limit_pct'))}); {noise}; sizes {list(j.get('sizes') or [])}")


def check_junit(gate: Mapping[str, Any], run_desc: str = "") -> str:
    return render("ncclbench check" + (f" {run_desc}" if run_desc else ""), check_cases(gate))


# -- health ---------------------------------------------------------------------------------------


def health_cases(doc: Mapping[str, Any]) -> list[Case]:
    """One case per host (its status), then one per finding not about one host."""
    from .metrics import host_verdict

    by_host: dict[str, list[Mapping[str, Any]]] = {}
    other = []
    for f in doc.get("findings", ()):
        hosts = list(f.get("hosts", ()))
        if len(hosts) == 1:
            by_host.setdefault(str(hosts[0]), []).append(f)
        else:
            other.append(f)
    cases = []
    for host, status in dict(doc.get("host_status", {})).items():
        fs = by_host.get(host, [])
        verdict = host_verdict(str(status))
        details = "\n".join(_finding_text(f) for f in fs)
        case = Case("ncclbench.health.host", host, details=details)
        if verdict == "faulty":
            case.failure = "faulty: " + "; ".join(_finding_head(f) for f in fs if f.get("confirmed")) \
                if any(f.get("confirmed") for f in fs) else "faulty"
            case.failure_type = "fault"
        elif verdict == NOT_JUDGED:
            why = "; ".join([*(dict(doc.get("not_judged") or {}).get(host) or ()), *(_finding_head(f) for f in fs)]) \
                or "; ".join(doc.get("notes", ())[:1])
            case.skipped = f"{NOT_JUDGED} ({status}" + (f": {why})" if why else ")")
        cases.append(case)
    for f in other:
        hosts = list(f.get("hosts", ()))
        name = " <-> ".join(hosts) if hosts else (str(f.get("detail")) or "fleet")
        case = Case(f"ncclbench.health.{str(f.get('component', 'finding')).replace(' ', '_')}", name,
                    details=_finding_text(f))
        if f.get("confirmed"):
            case.failure, case.failure_type = _finding_head(f), "fault"
        else:
            case.skipped = f"{NOT_JUDGED}: {_finding_head(f)}" if f.get("verdict") != NOT_JUDGED else \
                f"{NOT_JUDGED}: {(f.get('evidence') or [''])[0]}"
        cases.append(case)
    return cases


def _finding_head(f: Mapping[str, Any]) -> str:
    comp, detail, verdict = str(f.get("component", "")), str(f.get("detail", "")), str(f.get("verdict", ""))
    where = where_text(comp, detail)
    head = where if verdict == comp else f"{where} {verdict}".strip()
    return head + (f" ({', '.join(f['cause'])})" if f.get("cause") else "")


def _finding_text(f: Mapping[str, Any]) -> str:
    return "\n".join([_finding_head(f), *(f"  {e}" for e in f.get("evidence", ()))])


def health_junit(doc: Mapping[str, Any]) -> str:
    wall = sum(float(r.get("wall_s", 0.0)) for r in doc.get("rounds", ()))
    return render("ncclbench health", health_cases(doc), time_s=wall)
