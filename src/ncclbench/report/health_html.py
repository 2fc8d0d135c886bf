"""The HTML page of one health scan: verdicts, and where in the fleet the numbers sag.

Drawn from the scan's JSON document alone (what `--json` writes and the store
keeps), as inline SVG: no scripts, no fonts or images from elsewhere, like
the run report (`report/html.py`).  What it shows:

* the verdict table: every finding with its evidence and, where the explain
  model gives one, the share of the expected ceiling;
* per-host bars: each host's lone-GPU figure (median of its GPUs, min..max
  drawn as a whisker) and its all-GPU (intra) figure, against the fleet's;
* the pair heatmap: host x host, each measured pair's busbw (median over its
  rails, the latest measurement: what the verdict rests on) as a share of
  the fleet's median pair; pairs never put together stay blank;
* the per-rail matrix: host x rail, the host's pair figure on that rail (the
  fleet round) as a share of that rail's median, plus the rail-phase groups.

Colours: green within 1 % of the fleet's median or above, through yellow, to red
at 75 % or less (a fleet's run-to-run spread is ~1 %, so a 10 % drop must stand
out); a cell whose group the scan judged slow is outlined in red whatever its
colour (a pair's cell is the median of its rails, which one slow rail barely
moves); dark grey for no answer; white for not measured.  Big fleets are shown up to
`MAX_HOSTS` hosts (the ones with findings first), and the page says so.
"""

from __future__ import annotations

import html
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .. import __version__
from ..output.numfmt import now_string

MAX_HOSTS = 128
RED_AT = 0.75  # share of the fleet's median drawn fully red
GREEN_AT = 0.99  # ... and fully green: within the ~1 % run-to-run spread of the median
GOOD, BAD, DEAD, BAR, BAR2, GRID = "#2ca02c", "#d62728", "#444444", "#1f77b4", "#9467bd", "#dddddd"

_CSS = """
body { font-family: DejaVu Sans, Arial, sans-serif; margin: 24px; color: #222; max-width: 1200px; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 18px; margin-top: 28px; }
table { border-collapse: collapse; margin: 8px 0 16px 0; font-size: 12px; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; vertical-align: top; white-space: pre-line; }
th { background: #f2f2f2; } td.num { text-align: right; font-family: monospace; }
.note { font-size: 12px; color: #555; } pre { font-size: 12px; }
.faulty { color: #b00; font-weight: bold; } .suspect { color: #b60; } .ok { color: #060; }
svg { display: block; margin: 4px 0; } svg text { font-family: DejaVu Sans, Arial, sans-serif; }
"""


def _e(v: Any) -> str:
    return html.escape("" if v is None else str(v))


def _num(v: Any, digits: int = 4) -> str:
    if v is None:
        return "-"
    return f"{float(v):.{digits}g}"


def _table(headers: Sequence[str], rows: Iterable[Sequence[Any]], num: frozenset[int] = frozenset(),
           classes: Sequence[str] | None = None) -> str:
    out = ["<table>", "<tr>" + "".join(f"<th>{_e(h)}</th>" for h in headers) + "</tr>"]
    for k, r in enumerate(rows):
        cls = f' class="{classes[k]}"' if classes and classes[k] else ""
        out.append(f"<tr{cls}>" + "".join(f'<td class="num">{_e(c)}</td>' if i in num else f"<td>{_e(c)}</td>"
                                          for i, c in enumerate(r)) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


def ratio_color(ratio: float | None) -> str:
    """Green at >= GREEN_AT of the fleet's median, through yellow, to red at <= RED_AT;
    white when unknown."""
    if ratio is None:
        return "#ffffff"
    t = min(1.0, max(0.0, (ratio - RED_AT) / (GREEN_AT - RED_AT)))  # 0 at RED_AT, 1 at GREEN_AT
    if t >= 0.999:
        return GOOD
    # red (214, 39, 40) -> yellow (240, 200, 40) -> green (44, 160, 44)
    if t < 0.5:
        a, b, u = (214, 39, 40), (240, 200, 40), t / 0.5
    else:
        a, b, u = (240, 200, 40), (44, 160, 44), (t - 0.5) / 0.5
    return "#%02x%02x%02x" % tuple(round(x + (y - x) * u) for x, y in zip(a, b))


# -- what the document holds, per host / pair / rail ------------------------------------------------

def _records(doc: Mapping[str, Any], phase: str) -> list[dict[str, Any]]:
    return [r for r in doc.get("measurements", []) if str(r.get("round", "")).startswith(phase + " ")]


def _is_fleet(rec: Mapping[str, Any]) -> bool:
    return str(rec.get("purpose", "")).startswith("fleet")


def _aggregate(rec: Mapping[str, Any]) -> bool:
    return str(rec.get("purpose", "")).endswith("median of rails")


def host_figures(doc: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """host -> {"local": [GPU figures], "local_bad": bool, "intra": figure, "intra_status"}."""
    out: dict[str, dict[str, Any]] = {h: {"local": [], "local_bad": False, "intra": None, "intra_status": None}
                                      for h in doc.get("hosts", [])}
    for rec in _records(doc, "local"):
        if not _is_fleet(rec):
            continue
        for g in rec["groups"]:
            h = out.setdefault(g["hosts"][0], {"local": [], "local_bad": False, "intra": None, "intra_status": None})
            if g.get("busbw") is not None:
                h["local"].append(g["busbw"])
            if g.get("status") not in ("ok", "not judged"):
                h["local_bad"] = True
    for rec in _records(doc, "intra"):
        if not _is_fleet(rec):
            continue
        for g in rec["groups"]:
            h = out.setdefault(g["hosts"][0], {"local": [], "local_bad": False, "intra": None, "intra_status": None})
            h["intra"], h["intra_status"] = g.get("busbw"), g.get("status")
    return out


def pair_cells(doc: Mapping[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """(host a, host b) -> {"busbw": median over rails of the latest measurement, "status"}."""
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for rec in _records(doc, "pairs"):
        if _aggregate(rec):
            continue
        by_pair: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
        for g in rec["groups"]:
            # a later round's controls are its yardstick, not a verdict on their pair (health/core/localize.py)
            if len(g["hosts"]) == 2 and g.get("status") != "control":
                a, b = sorted(g["hosts"])
                by_pair[(a, b)].append(g)
        for key, groups in by_pair.items():
            bw = [g["busbw"] for g in groups if g.get("busbw") is not None]
            statuses = {g.get("status") for g in groups}
            status = "no answer" if "no answer" in statuses or not bw else \
                "slow" if statuses & {"slow", "wrong results"} else "ok"
            latest[key] = {"busbw": statistics.median(bw) if bw else None, "status": status,
                           "round": rec["round"]}
    return latest


def rail_cells(doc: Mapping[str, Any]) -> tuple[dict[tuple[str, int], dict[str, Any]], dict[int, dict[str, Any]]]:
    """((host, rail) -> the host's pair figure on that rail in the fleet round),
    (rail -> the rail-phase group's figure)."""
    cells: dict[tuple[str, int], dict[str, Any]] = {}
    for rec in _records(doc, "pairs"):
        if not _is_fleet(rec) or _aggregate(rec):
            continue
        for g in rec["groups"]:
            if g.get("rail") is None:
                continue
            for h in g["hosts"]:
                cells.setdefault((h, int(g["rail"])), {"busbw": g.get("busbw"), "status": g.get("status")})
    rails: dict[int, dict[str, Any]] = {}
    for rec in _records(doc, "rail"):
        if not _is_fleet(rec):
            continue
        for g in rec["groups"]:
            if g.get("rail") is not None:
                rails[int(g["rail"])] = {"busbw": g.get("busbw"), "status": g.get("status")}
    return cells, rails


def _median(values: Iterable[float | None]) -> float | None:
    v = [x for x in values if x is not None]
    return statistics.median(v) if v else None


def shown_hosts(doc: Mapping[str, Any]) -> tuple[list[str], str]:
    """At most MAX_HOSTS hosts, those named by a finding or not healthy first; and a note."""
    hosts = list(doc.get("hosts", []))
    if len(hosts) <= MAX_HOSTS:
        return hosts, ""
    status = doc.get("host_status", {})
    named = {h for f in doc.get("findings", []) for h in f.get("hosts", [])}
    first = [h for h in hosts if h in named or status.get(h) not in ("healthy", None)]
    rest = [h for h in hosts if h not in set(first)]
    keep = set((first + rest)[:MAX_HOSTS])
    return [h for h in hosts if h in keep], (f"{len(hosts)} hosts: the {MAX_HOSTS} shown are those named by a finding "
                                             "or not healthy, then the first of the others")


# -- drawings ---------------------------------------------------------------------------------------

def _svg(width: int, height: int, body: list[str], label: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="{_e(label)}">' + "".join(body) + "</svg>")


def host_bars_svg(doc: Mapping[str, Any], hosts: Sequence[str]) -> str:
    """Per host: the median of its lone GPUs (bar), their min..max (whisker), the intra figure."""
    figs = host_figures(doc)
    local = {h: figs[h]["local"] for h in hosts if figs.get(h, {}).get("local")}
    intra = {h: figs[h]["intra"] for h in hosts if figs.get(h, {}).get("intra") is not None}
    if not local and not intra:
        return ""
    parts = []
    for title, values, color, key in (("lone GPU (local: algbw, median of the host's GPUs; whisker min..max)",
                                       local, BAR, "local"),
                                      ("all GPUs of the host (intra: busbw)", intra, BAR2, "intra")):
        if not values:
            continue
        vals = {h: (statistics.median(v) if isinstance(v, list) else v) for h, v in values.items()}
        top = max(max(v) if isinstance(v, list) else v for v in values.values()) or 1.0
        ref = statistics.median(vals.values())
        row, left, width = 16, 150, 560
        height = 30 + row * len(vals)
        body = [f'<text x="4" y="14" font-size="12">{_e(title)}</text>']
        x_ref = left + width * ref / top
        for i, (h, v) in enumerate(vals.items()):
            y = 22 + i * row
            bad = figs[h]["local_bad"] if key == "local" else figs[h]["intra_status"] not in ("ok", "not judged", None)
            body.append(f'<text x="{left - 6}" y="{y + 11}" font-size="11" text-anchor="end">{_e(h)}</text>')
            body.append(f'<rect x="{left}" y="{y}" width="{max(1.0, width * v / top):.1f}" height="{row - 4}" '
                        f'fill="{BAD if bad else color}"><title>{_e(h)}: {_num(v)} GB/s</title></rect>')
            if key == "local" and len(values[h]) > 1:
                lo, hi = min(values[h]), max(values[h])
                ym = y + (row - 4) / 2
                body.append(f'<line x1="{left + width * lo / top:.1f}" x2="{left + width * hi / top:.1f}" y1="{ym}" '
                            f'y2="{ym}" stroke="#000" stroke-width="1.5"/>')
            body.append(f'<text x="{left + width + 6}" y="{y + 11}" font-size="11">{_num(v)} GB/s</text>')
        body.append(f'<line x1="{x_ref:.1f}" x2="{x_ref:.1f}" y1="18" y2="{height - 4}" stroke="#000" '
                    f'stroke-dasharray="4,3"><title>fleet median {_num(ref)} GB/s</title></line>')
        parts.append(_svg(left + width + 90, height, body, title))
    return "\n".join(parts)


def _matrix_svg(rows: Sequence[str], cols: Sequence[str], cell: dict[tuple[int, int], tuple[float | None, str, str]],
                label: str) -> str:
    """A grid of coloured cells: (row, col) -> (ratio to the reference, status, tooltip)."""
    size = max(6, min(24, 640 // max(1, len(cols))))
    left, top = 150, 60
    width, height = left + size * len(cols) + 10, top + size * len(rows) + 10
    body = []
    for j, c in enumerate(cols):
        x = left + j * size + size / 2
        body.append(f'<text x="{x:.1f}" y="{top - 4}" font-size="{min(11, size)}" '
                    f'transform="rotate(-60 {x:.1f} {top - 4})">{_e(c)}</text>')
    for i, r in enumerate(rows):
        body.append(f'<text x="{left - 6}" y="{top + i * size + size * 0.75:.1f}" font-size="{min(11, size)}" '
                    f'text-anchor="end">{_e(r)}</text>')
        for j in range(len(cols)):
            got = cell.get((i, j))
            if got is None:
                body.append(f'<rect x="{left + j * size}" y="{top + i * size}" width="{size}" height="{size}" '
                            f'fill="#ffffff" stroke="{GRID}"/>')
                continue
            ratio, status, tip = got
            fill = DEAD if status == "no answer" else ratio_color(ratio)
            judged_bad = status in ("slow", "wrong results")
            stroke = f'stroke="{BAD}" stroke-width="2"' if judged_bad else f'stroke="{GRID}"'
            body.append(f'<rect x="{left + j * size}" y="{top + i * size}" width="{size}" height="{size}" '
                        f'fill="{fill}" {stroke}><title>{_e(tip)}</title></rect>')
    return _svg(width, height, body, label)


def pair_heatmap_svg(doc: Mapping[str, Any], hosts: Sequence[str]) -> str:
    cells = pair_cells(doc)
    if not cells:
        return ""
    ref = _median(c["busbw"] for c in cells.values())
    index = {h: i for i, h in enumerate(hosts)}
    grid: dict[tuple[int, int], tuple[float | None, str, str]] = {}
    for (a, b), c in cells.items():
        if a not in index or b not in index:
            continue
        ratio = c["busbw"] / ref if c["busbw"] is not None and ref else None
        tip = f"{a} <-> {b}: {_num(c['busbw'])} GB/s ({c['status']}, {c['round']})"
        grid[(index[a], index[b])] = grid[(index[b], index[a])] = (ratio, c["status"], tip)
    return _matrix_svg(hosts, hosts, grid, "pair heatmap")


def rail_matrix_svg(doc: Mapping[str, Any], hosts: Sequence[str]) -> str:
    cells, rails = rail_cells(doc)
    nrails = max([r for _, r in cells] + list(rails) + [-1]) + 1
    if nrails <= 0:
        return ""
    cols = [f"rail {r}" for r in range(nrails)]
    rows = list(hosts) + (["rail group"] if rails else [])
    grid: dict[tuple[int, int], tuple[float | None, str, str]] = {}
    for r in range(nrails):
        ref = _median(c["busbw"] for (h, rr), c in cells.items() if rr == r)
        for i, h in enumerate(hosts):
            c = cells.get((h, r))
            if c is None:
                continue
            ratio = c["busbw"] / ref if c["busbw"] is not None and ref else None
            grid[(i, r)] = (ratio, c["status"] or "", f"{h} rail {r}: {_num(c['busbw'])} GB/s ({c['status']})")
    if rails:
        ref = _median(c["busbw"] for c in rails.values())
        for r, c in rails.items():
            ratio = c["busbw"] / ref if c["busbw"] is not None and ref else None
            grid[(len(hosts), r)] = (ratio, c["status"] or "", f"rail {r} group: {_num(c['busbw'])} GB/s")
    return _matrix_svg(rows, cols, grid, "per-rail matrix")


def _legend() -> str:
    items = [(f'fill="{ratio_color(r)}"', text) for r, text in
             ((1.0, "fleet median (within 1 %) or better"), (0.95, "95 %"), (0.9, "90 %"),
              (RED_AT, f"{RED_AT:.0%} or less"))]
    items += [(f'fill="{DEAD}"', "no answer"), (f'fill="#fff" stroke="{GRID}"', "not measured"),
              (f'fill="#fff" stroke="{BAD}" stroke-width="2"', "judged slow")]
    body, x = [], 2
    for style, text in items:
        body.append(f'<rect x="{x}" y="2" width="14" height="14" {style}/>'
                    f'<text x="{x + 18}" y="13" font-size="11">{_e(text)}</text>')
        x += 18 + int(6.5 * len(text)) + 22  # DejaVu Sans at 11 px: ~6.5 px a character
    return _svg(x, 20, body, "legend")


# -- the page ------------------------------------------------------------------------------------------

def _findings_table(doc: Mapping[str, Any]) -> str:
    rows, classes = [], []
    for f in doc.get("findings", []):
        where = " <-> ".join(f["hosts"]) if f.get("component") == "link" else (f["hosts"][0] if f.get("hosts") else "*")
        pct = f.get("pct_expected")
        rows.append([where, f.get("component"), f.get("detail") or "-", _num(f.get("measured")),
                     _num(f.get("expected")), "-" if f.get("z") is None else f"{f['z']:+.1f}",
                     "-" if pct is None else f"{pct:.0f} %", f.get("verdict"), "\n".join(f.get("evidence", []))])
        classes.append("faulty" if f.get("confirmed") else "suspect" if "suspect" in str(f.get("verdict")) else "")
    if not rows:
        if doc.get("outcome") == "healthy":
            return '<p class="ok">No finding: every host was judged healthy.</p>'
        return ('<p class="suspect">No fault found, but not every host could be judged (see "Not judged"): '
                'an unknown is not healthy.</p>')
    return _table(["host", "component", "detail", "measured (GB/s)", "expected (GB/s)", "z", "% of ceiling",
                   "verdict", "evidence"], rows, frozenset({3, 4, 5, 6}), classes)


def build_health_page(doc: Mapping[str, Any], label: str, title: str | None = None) -> str:
    """The page as one HTML string."""
    hosts, clipped = shown_hosts(doc)
    status = doc.get("host_status", {})
    title = title or f"ncclbench health: {label}"
    meta = [("scan", label), ("start time", doc.get("start_time")), ("backend", doc.get("backend")),
            ("hosts", len(doc.get("hosts", []))), ("ranks", sum(doc.get("gpus_per_host", []))),
            ("rounds", len(doc.get("rounds", []))),
            ("scan time (s)", _num(sum(r.get("wall_s", 0.0) for r in doc.get("rounds", [])))),
            ("outcome", doc.get("outcome") or "not recorded (a scan stored before outcomes were kept)"),
            ("exit code", doc.get("exit_code")), ("faults found", doc.get("faults_found")),
            ("drain", ", ".join(doc.get("drain", [])) or "-"), ("NCCL", doc.get("nccl")),
            ("command", " ".join(doc.get("argv", [])) or None), ("tool version", doc.get("version"))]
    counts: dict[str, int] = {"healthy": 0, "faulty": 0, "not judged": 0}  # always said, zeros too
    for s in status.values():
        counts[s] = counts.get(s, 0) + 1
    body = [f"<h1>{_e(title)}</h1>",
            f'<p class="note">Generated {_e(now_string())} by ncclbench {_e(__version__)} from the scan\'s record.</p>',
            _table(["", ""], [[k, v] for k, v in meta if v not in (None, "")]),
            "<h2>Verdicts</h2>", _findings_table(doc),
            '<p class="note">Hosts: ' + _e(", ".join(f"{n} {s}" for s, n in counts.items())) + "</p>"]
    unjudged = dict(doc.get("not_judged") or {})
    unresolved = [h for h, s in status.items() if s not in ("healthy", "faulty")]
    if unresolved:
        body += ["<h2>Not judged</h2>",
                 '<p class="note">Hosts the scan could not call healthy or faulty, and why (exit 9 unless '
                 "--accept-not-judged).</p>",
                 _table(["host", "status", "why"],
                        [[h, status[h], "\n".join(unjudged.get(h, [])) or "-"] for h in unresolved],
                        classes=["suspect"] * len(unresolved))]
    if doc.get("notes"):
        body.append("<pre>" + _e("\n".join(doc["notes"])) + "</pre>")
    if clipped:
        body.append(f'<p class="note">{_e(clipped)}</p>')
    bars = host_bars_svg(doc, hosts)
    if bars:
        body += ["<h2>Per host</h2>", '<p class="note">Bars: the host\'s figure; dashed line: the fleet\'s median; '
                 "red: a group the scan found bad.</p>", bars]
    heat = pair_heatmap_svg(doc, hosts)
    rail = rail_matrix_svg(doc, hosts)
    if heat:
        body += ["<h2>Pair heatmap</h2>", '<p class="note">Each cell: a host pair\'s busbw (median over its rails, '
                 "latest measurement) as a share of the fleet's median pair. Blank: never paired.</p>", _legend(),
                 heat]
    if rail:
        body += ["<h2>Per-rail matrix</h2>", '<p class="note">Each cell: the host\'s pair busbw on that rail in the '
                 "fleet round, as a share of that rail's median; last row: the rail-phase group of every host.</p>",
                 _legend(), rail]
    if not (bars or heat or rail):
        body.append('<p class="note">No measurement to draw.</p>')
    expected = doc.get("expected") or {}
    if expected:
        body += ["<h2>Expected ceilings (explain model) and thresholds</h2>",
                 _table(["group shape", "ceiling (GB/s)", "how / why unknown", "computed for",
                         "threshold at the scan's size (and its source)"],
                        [[s, _num(e.get("ceiling")), e.get("text"), e.get("group"),
                          (e.get("physics") or {}).get("text") or "-"] for s, e in expected.items()],
                        frozenset({1}))]
    traps = [[h, t.get("severity"), t.get("name") + (" (a setting of this job)" if t.get("setting") else ""),
              t.get("evidence"), t.get("fix")]
             for h, c in dict(doc.get("causes") or {}).items() for t in c.get("traps", [])]
    if traps:
        body += ["<h2>Traps (explain's checks, per host)</h2>",
                 _table(["host", "severity", "trap", "evidence", "fix"], traps)]
    body += ["<h2>Rounds</h2>", _table(["round", "purpose", "groups", "answered", "time (s)"],
                                       [[r["name"], r["purpose"], r["groups"], r["answered"], _num(r["wall_s"], 3)]
                                        for r in doc.get("rounds", [])], frozenset({2, 3, 4}))]
    meas = []
    for rec in doc.get("measurements", []):
        for g in rec.get("groups", []):
            meas.append([rec["round"], g["group"], _num(g.get("busbw")), _num(g.get("lat_us")), g.get("status"),
                         g.get("why") or "", g.get("ceiling") or "-"])
    body += [f"<details><summary>Every group measured ({len(meas)})</summary>",
             _table(["round", "group", "busbw (GB/s)", "latency (us)", "status", "why", "against the ceiling"], meas,
                    frozenset({2, 3})),
             "</details>"]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def write_health_page(doc: Mapping[str, Any], label: str, output: str, title: str | None = None) -> str:
    """Write the page (atomically, like the run report); returns the path written."""
    from pathlib import Path

    from ..core.atomic_file import check_output_path, write_atomically
    from ..core.errors import BenchError, ExitCode

    out = Path(output)
    check_output_path(out, "report -o", "like health.html")
    try:
        write_atomically(out, build_health_page(doc, label, title))
    except OSError as e:
        raise BenchError(f"report: cannot write {e.filename or out}: {e.strerror or e}", ExitCode.ARGUMENT) from None
    return str(out)
