"""Prometheus / OpenMetrics text for runs and health scans (`--metrics FILE`).

The format is Prometheus' text exposition format 0.0.4, the one node_exporter's
textfile collector reads (`--collector.textfile.directory`; it reads `*.prom`
files) and the Pushgateway accepts.  The file is written whole and renamed into
place (`write_textfile`), so a scrape never sees half a file: the collector's
own rule.  Writing needs no library; the tests read every file back with
prometheus_client's parser.

Units are Prometheus' base units (bytes per second, seconds; a share of the
ceiling as a 0-1 ratio).  A figure that is unknown is left out, never written
as 0; a verdict is one sample of value 1 whose `verdict` label names it
("as expected", "below expected", "healthy", "faulty", "not judged", ...), so
`ncclbench_run_verdict{verdict="below expected"} == 1` is an alert rule.

Runs (`MetricsReporter`, one file per run): per collective, series (datatype,
op, root), placement and size class - `small` (sizes <= 64 KiB, the gate's
latency sizes: store/summary_stats.py), `plateau` (explain's plateau: the sizes within a
factor of 4 of the largest, explain/plateau_verdict.py) and `medium` (the rest) - the
class's median busbw and median time; for the plateau, explain's figure, its
ratio to the ceiling and its verdict.  Health scans (`health_metrics`): per
host, GPU and rail a verdict (healthy / faulty / not judged), per finding its
figures.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.atomic_file import check_output_path, write_atomically
from ..core.config import BenchOptions
from ..core.results import ResultRow, RunInfo, RunSummary
from .health_fields import finding_slot

GB = 1e9
US = 1e-6
NOT_JUDGED = "not judged"
SIZE_CLASSES = ("small", "medium", "plateau")
# The gate's latency sizes (store/summary_stats.py LATENCY_MAX_SIZE; output/ sits below store/ and
# cannot import it: tests/test_metrics.py holds the two equal).
SMALL_MAX_BYTES = 64 * 1024


@dataclass
class _Point:
    size: int
    busbw: float
    time_us: float


def _series(rows: Sequence[ResultRow], placement: str) -> dict[tuple[str, str, int], list[_Point]]:
    """(type, op, root) -> one point per size (ascending), repeats (-N) combined by their median."""
    by: dict[tuple[str, str, int], dict[int, list[ResultRow]]] = {}
    for r in rows:
        if r.size > 0:
            by.setdefault((r.type, r.redop, r.root), {}).setdefault(r.size, []).append(r)
    out = {}
    for key, sizes in by.items():
        pts = []
        for size in sorted(sizes):
            halves = [getattr(r, placement) for r in sizes[size]]
            bw, t = _median(h.busbw for h in halves), _median(h.time_us for h in halves)
            pts.append(_Point(size, math.nan if bw is None else bw, math.nan if t is None else t))
        out[key] = pts
    return out


# -- the text format ------------------------------------------------------------------------------


@dataclass
class Family:
    """One metric family: name, help, type and its samples (labels, value)."""

    name: str
    help: str
    type: str = "gauge"
    samples: list[tuple[dict[str, str], float]] = field(default_factory=list)

    def add(self, value: float | None, **labels: Any) -> None:
        """A sample; None or NaN (unknown) is left out rather than written."""
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return
        self.samples.append(({k: str(v) for k, v in labels.items() if v is not None}, float(value)))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(v: float) -> str:
    v = float(v)
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if v.is_integer() and abs(v) < 1e15:
        return str(int(v))
    return repr(v)


def render(families: Iterable[Family]) -> str:
    """The exposition text: HELP and TYPE once per family, then its samples; families
    without samples are left out (a TYPE line with nothing under it says nothing)."""
    out = []
    for fam in families:
        if not fam.samples:
            continue
        out.append(f"# HELP {fam.name} {fam.help.replace(chr(92), chr(92) * 2).replace(chr(10), ' ')}")
        out.append(f"# TYPE {fam.name} {fam.type}")
        for labels, value in fam.samples:
            text = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
            out.append(f"{fam.name}{{{text}}} {_number(value)}" if text else f"{fam.name} {_number(value)}")
    return "\n".join(out) + "\n"


def write_textfile(path: str, text: str) -> None:
    """Write `text` to `path` atomically (`core.atomic_file.write_atomically`: the textfile
    collector, which reads `*.prom`, skips the temporary file).  Mode 0644: node_exporter
    often runs as another user."""
    write_atomically(path, text, mode=0o644)


def check_writable(path: str, option: str = "--metrics") -> None:
    """One clear line before the run when `path` cannot be written (core.atomic_file.check_output_path),
    not a traceback after it."""
    check_output_path(path, option, "(node_exporter reads *.prom)" if option == "--metrics" else "")


# -- runs ---------------------------------------------------------------------------------------


def unix_time(text: str | None) -> float | None:
    """An ISO time as the store and the scan record it ("2026-11-26T09:53:43+00:00",
    "2026-11-26 09:55:54" in UTC) -> Unix seconds; None when absent or unreadable."""
    import datetime

    if not text:
        return None
    try:
        t = datetime.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    return (t if t.tzinfo else t.replace(tzinfo=datetime.timezone.utc)).timestamp()


def collective_name(program: str) -> str:
    base = program.replace("\\", "/").rsplit("/", 1)[-1]
    return base[:-5] if base.endswith("_perf") else base


def plateau_sizes(sizes: Sequence[int]) -> list[int]:
    """explain's plateau: the sizes within a factor of 4 of the largest (explain/plateau_verdict.py)."""
    pos = [s for s in sizes if s > 0]
    if not pos:
        return []
    top = max(pos)
    return sorted({s for s in pos if s * 4 > top})


def size_classes(sizes: Sequence[int]) -> dict[str, list[int]]:
    """small (the gate's latency sizes, <= 64 KiB), plateau (explain's), medium (the rest).
    A size in both small and plateau (a sweep that stays small) counts as small: its
    figure is latency-bound, which explain says too."""
    small = sorted({s for s in sizes if 0 < s <= SMALL_MAX_BYTES})
    plateau = [s for s in plateau_sizes(sizes) if s not in small]
    medium = sorted({s for s in sizes if s > 0 and s not in small and s not in plateau})
    return {"small": small, "medium": medium, "plateau": plateau}


def _median(values: Iterable[float]) -> float | None:
    vals = [v for v in values if v is not None and not math.isnan(v)]
    return statistics.median(vals) if vals else None


def _judgement(summary: RunSummary | None) -> Mapping[str, Any] | None:
    if summary is None or not summary.explain:
        return None
    j = summary.explain.get("judgement")
    return j if isinstance(j, Mapping) else None


# The values of ncclbench_run_verdict's `why` label: a small fixed set, never free text (a label value
# is part of a series' identity: a sentence with measured numbers makes a new series per run).
VERDICT_WHY = ("", "explain", "no explain", "ended early", "latency-bound")
# The host statuses of a scan (health.core.scan.HOST_STATUSES; output/ sits below health/ and cannot
# import them: a test holds the two equal); anything else is labelled "other".
HOST_STATUS_LABELS = ("healthy", "faulty", NOT_JUDGED, "suspect", "partly tested", "not tested")


def run_families(info: RunInfo, opts: BenchOptions, rows: Sequence[ResultRow], summary: RunSummary | None,
                 now: float | None = None, live: bool = True) -> list[Family]:
    """The metric families of one run (`summary` None: the run ended early).  `now`: when
    it ended (default: now, for a live run; a stored run whose end is unknown gets no
    timestamp: `live` False)."""
    coll = collective_name(info.program)
    base = {"collective": coll, "backend": info.backend, "nranks": str(info.nranks)}
    fam_info = Family("ncclbench_run_info", "The run: ncclbench version, library, hosts (value 1).")
    fam_info.add(1, **base, version=info.version, library=" ".join(info.library.split()), hosts=str(len(info.hosts) or 1),
                 ngroups=str(info.ngroups))
    fam_time = Family("ncclbench_run_timestamp_seconds", "When the run ended (Unix time).")
    fam_time.add(time.time() if now is None and live else now, **base)
    fam_done = Family("ncclbench_run_complete", "1 when every planned size was measured, 0 when the run ended early.")
    fam_done.add(1 if summary is not None else 0, **base)
    fam_wrong = Family("ncclbench_run_wrong_elements", "Elements that failed the bit-exact check, all rows "
                       "(nccl-tests' #wrong summed); absent when nothing was checked (-c 0).")
    checked = [h.wrong for r in rows for h in (r.out_of_place, r.in_place) if h.wrong is not None]
    if checked:
        fam_wrong.add(sum(checked), **base)
    fam_avg = Family("ncclbench_run_avg_busbw_bytes_per_second",
                     "nccl-tests' footer 'Avg bus bandwidth' (the mean over every size), in bytes/s.")
    if summary is not None:
        fam_avg.add(summary.avg_busbw * GB, **base)
    fam_bw = Family("ncclbench_busbw_bytes_per_second",
                    "Median bus bandwidth of the size class (plateau: explain's plateau figure), bytes/s.")
    fam_lat = Family("ncclbench_time_seconds", "Median time of one operation over the size class, seconds "
                     "(for the small class: the latency).")
    fam_sizes = Family("ncclbench_size_class_max_bytes", "The largest message size of the size class, bytes.")
    fam_ratio = Family("ncclbench_ceiling_ratio", "The class's busbw over the expected ceiling of explain's "
                       "model (0-1); absent where the ceiling is unknown.")
    fam_verdict = Family("ncclbench_run_verdict", "explain's verdict on the size class (value 1): as expected, "
                         "below expected, above the line rate, or not judged; 'why' (a fixed set: "
                         + ", ".join(repr(w) for w in VERDICT_WHY if w) + ") says what kind of not judged, "
                         "the JSON (-J) the reason in words.")
    j = _judgement(summary)
    ceiling = (j or {}).get("ceiling", {}).get("ceiling") if j else None
    verdict = (j or {}).get("verdict") or {}
    plateau_fig = (j or {}).get("plateau") or {}
    for placement in ("out_of_place", "in_place"):
        for (dtype, redop, root), points in _series(rows, placement).items():
            classes = size_classes([p.size for p in points])
            labels = dict(base, type=dtype, redop=redop, root=str(root), placement=placement)
            for cls in SIZE_CLASSES:
                pts = [p for p in points if p.size in classes[cls]]
                if not pts:
                    continue
                lab = dict(labels, size_class=cls)
                bw = _median(p.busbw for p in pts)
                if cls == "plateau" and placement == "out_of_place" and plateau_fig.get("busbw") is not None:
                    bw = float(plateau_fig["busbw"])
                fam_bw.add(None if bw is None else bw * GB, **lab)
                t = _median(p.time_us for p in pts)
                fam_lat.add(None if t is None else t * US, **lab)
                fam_sizes.add(max(p.size for p in pts), **lab)
                if ceiling and bw is not None:
                    fam_ratio.add(bw / float(ceiling), **lab)
                if placement != "out_of_place":
                    continue  # explain judges the out-of-place figures
                if cls == "plateau" and j is not None:
                    label = verdict.get("label") or "unknown"
                    fam_verdict.add(1, **lab, verdict=NOT_JUDGED if label == "unknown" else label,
                                    why="explain" if label == "unknown" else "")
                elif cls == "plateau":
                    fam_verdict.add(1, **lab, verdict=NOT_JUDGED,
                                    why="no explain" if summary is not None else "ended early")
                else:
                    fam_verdict.add(1, **lab, verdict=NOT_JUDGED, why="latency-bound")
    return [fam_info, fam_time, fam_done, fam_wrong, fam_avg, fam_bw, fam_lat, fam_sizes, fam_ratio, fam_verdict]


def run_metrics(info: RunInfo, opts: BenchOptions, rows: Sequence[ResultRow], summary: RunSummary | None,
                now: float | None = None, live: bool = True) -> str:
    return render(run_families(info, opts, rows, summary, now, live))


class MetricsReporter:
    """A `Reporter` that writes the run's metrics file once, at the end (or at close
    when the run ended early: then `ncclbench_run_complete 0` and the rows measured)."""

    def __init__(self, path: str):
        check_writable(path)
        self.path = path
        self.info: RunInfo | None = None
        self.opts: BenchOptions | None = None
        self.rows: list[ResultRow] = []
        self.done = False

    def begin(self, info: RunInfo, opts: BenchOptions) -> None:
        self.info, self.opts = info, opts

    def message(self, line: str) -> None:
        pass

    def row(self, row: ResultRow) -> None:
        self.rows.append(row)

    def end(self, summary: RunSummary) -> None:
        self._write(summary)

    def close(self) -> None:
        if not self.done and self.info is not None:
            self._write(None)

    def _write(self, summary: RunSummary | None) -> None:
        assert self.info is not None and self.opts is not None
        self.done = True
        write_textfile(self.path, run_metrics(self.info, self.opts, self.rows, summary))


# -- health scans -------------------------------------------------------------------------------


def host_verdict(status: str) -> str:
    """healthy / faulty / not judged from a host's scan status: anything short of a
    full, judged pass (suspect, partly tested, not tested, not judged) is not judged."""
    return status if status in ("healthy", "faulty") else NOT_JUDGED


def _finding_verdict(finding: Mapping[str, Any]) -> str:
    return "faulty" if finding.get("confirmed") else NOT_JUDGED


def _slot(detail: str, word: str) -> int | None:
    parts = str(detail or "").split()
    if len(parts) == 2 and parts[0] == word and parts[1].isdigit():
        return int(parts[1])
    return None


def _group_verdict(table: dict[Any, tuple[str, str]], key: Any, m: Mapping[str, Any], g: Mapping[str, Any]) -> None:
    """A group of one GPU or rail measured in round `m`: healthy when judged ok (in any round), else
    not judged with the group's reason."""
    status = str(g.get("status", ""))
    if status == "ok":
        table[key] = ("healthy", f"{m.get('round')}: ok")
    elif table.get(key, (NOT_JUDGED,))[0] != "healthy":
        table[key] = (NOT_JUDGED, f"{m.get('round')}: {g.get('why') or status}")


def _measured_verdicts(doc: Mapping[str, Any], gpus: dict[tuple[str, int], tuple[str, str]],
                       rails: dict[int, tuple[str, str]]) -> None:
    """The verdicts the groups of their own give: the local phase's one-GPU groups, the rail
    phase's groups."""
    for m in doc.get("measurements", ()):
        for g in m.get("groups", ()):
            shape = str(g.get("shape", ""))
            if shape.startswith("local:") and g.get("hosts") and g.get("gpus"):
                _group_verdict(gpus, (str(g["hosts"][0]), int(g["gpus"][0])), m, g)
            elif shape.startswith("rail:") and g.get("rail") is not None:
                _group_verdict(rails, int(g["rail"]), m, g)


def _finding_verdicts(findings: list[Any], gpus: dict[tuple[str, int], tuple[str, str]],
                      rails: dict[int, tuple[str, str]]) -> None:
    """The findings that name a GPU or a rail, over what was measured: faulty when confirmed (and
    kept so), not judged when not."""
    for f in findings:
        comp, detail = f.get("component"), f.get("detail", "")
        why = (f.get("evidence") or [f.get("verdict", "")])[0]
        slot = finding_slot(f)
        if slot is not None and f.get("hosts"):
            key = (str(f["hosts"][0]), slot)
            if gpus.get(key, ("",))[0] != "faulty":
                gpus[key] = (_finding_verdict(f), f"{f.get('verdict')}: {why}")
        elif comp == "rail" and _slot(detail, "rail") is not None:
            r = int(_slot(detail, "rail") or 0)
            if rails.get(r, ("",))[0] != "faulty":
                rails[r] = (_finding_verdict(f), f"{f.get('verdict')}: {why}")


def component_verdicts(doc: Mapping[str, Any]) -> tuple[dict[tuple[str, int], tuple[str, str]],
                                                        dict[int, tuple[str, str]]]:
    """Per GPU (host, slot) and per rail: (verdict, why), from a scan document
    (`health.outputs.scan_output.scan_document`).  A GPU or rail is faulty when a confirmed finding
    names it, not judged when an unconfirmed one does; otherwise healthy only when a
    group of its own (the local phase's one-GPU group, the rail phase's group) was
    measured and judged ok - never by default."""
    findings = list(doc.get("findings", ()))
    gpus: dict[tuple[str, int], tuple[str, str]] = {}
    rails: dict[int, tuple[str, str]] = {}
    for host, n in zip(doc.get("hosts", ()), doc.get("gpus_per_host", ())):
        for s in range(int(n)):
            gpus[(str(host), s)] = (NOT_JUDGED, "not measured alone (local phase)")
    _measured_verdicts(doc, gpus, rails)
    _finding_verdicts(findings, gpus, rails)
    return gpus, rails


def health_families(doc: Mapping[str, Any], now: float | None = None) -> list[Family]:
    """The metric families of one scan, from its document (`scan_document`: what --json
    writes and the store keeps, so a stored scan gives the same file)."""
    fam_time = Family("ncclbench_health_timestamp_seconds", "When the scan started (Unix time).")
    fam_time.add(unix_time(doc.get("start_time")) or (time.time() if now is None else now))
    fam_wall = Family("ncclbench_health_duration_seconds", "Time the scan's rounds took, seconds.")
    fam_wall.add(sum(float(r.get("wall_s", 0.0)) for r in doc.get("rounds", ())))
    fam_exit = Family("ncclbench_health_exit_code", "The scan's exit status (0 every host judged healthy or "
                      "no fault confirmed, 8 faults found, 9 not judged; README's exit codes).")
    if doc.get("exit_code") is not None:
        fam_exit.add(int(doc["exit_code"]))
    fam_hosts = Family("ncclbench_health_hosts", "Hosts of the scan per verdict.")
    fam_host = Family("ncclbench_health_host_verdict", "One host's verdict (value 1): healthy, faulty or not "
                      "judged; 'status' is the scan's own word (one of " + ", ".join(HOST_STATUS_LABELS) + "); "
                      "why a host was not judged is in the scan's JSON and JUnit.")
    fam_drain = Family("ncclbench_health_host_drain", "1 for a host the scan says to drain (a confirmed fault "
                       "of its own: GPU, NVLink/PCIe, NIC, no answer).")
    counts = {"healthy": 0, "faulty": 0, NOT_JUDGED: 0}
    drain = set(doc.get("drain", ()))
    for host, status in dict(doc.get("host_status", {})).items():
        v = host_verdict(str(status))
        counts[v] += 1
        fam_host.add(1, host=host, verdict=v, status=status if status in HOST_STATUS_LABELS else "other")
        fam_drain.add(1 if host in drain else 0, host=host)
    for v, n in counts.items():
        fam_hosts.add(n, verdict=v)
    gpus, rails = component_verdicts(doc)
    fam_gpu = Family("ncclbench_health_gpu_verdict", "One GPU's verdict (value 1): healthy only when measured "
                     "alone and judged ok; why not is in the scan's JSON and JUnit.")
    for (host, slot), (v, _why) in sorted(gpus.items()):
        fam_gpu.add(1, host=host, gpu=str(slot), verdict=v)
    fam_rail = Family("ncclbench_health_rail_verdict", "One NIC rail's verdict across the fabric (value 1): "
                      "healthy only when its rail group was measured and judged ok.")
    for r, (v, _why) in sorted(rails.items()):
        fam_rail.add(1, rail=str(r), verdict=v)
    fam_find = Family("ncclbench_health_finding", "One finding (value 1): component, where, the scan's verdict, "
                      "whether a second measurement confirmed it, and the causes explain's traps name.")
    fam_meas = Family("ncclbench_health_finding_measured_bytes_per_second",
                      "The figure that convicted the finding (busbw, bytes/s).")
    fam_exp = Family("ncclbench_health_finding_expected_bytes_per_second",
                     "The reference it was compared with (fleet median or baseline, bytes/s).")
    fam_ceil = Family("ncclbench_health_finding_ceiling_ratio", "The measured figure over the expected ceiling of "
                      "explain's model (0-1), where known.")
    for f in doc.get("findings", ()):
        hosts = list(f.get("hosts", ()))
        detail = str(f.get("detail", ""))
        lab = {"component": f.get("component", ""), "host": hosts[0] if hosts else "",
               "peer": hosts[1] if len(hosts) > 1 else "", "detail": detail, "verdict": f.get("verdict", ""),
               "confirmed": "true" if f.get("confirmed") else "false", "cause": ",".join(f.get("cause") or ())}
        fam_find.add(1, **lab)
        if f.get("unit", "GB/s") == "GB/s":
            fam_meas.add(None if f.get("measured") is None else float(f["measured"]) * GB, **lab)
            fam_exp.add(None if f.get("expected") is None else float(f["expected"]) * GB, **lab)
        fam_ceil.add(None if f.get("pct_expected") is None else float(f["pct_expected"]) / 100.0, **lab)
    fam_gbw = Family("ncclbench_health_group_busbw_bytes_per_second", "Each group of each phase's fleet round: "
                     "its busbw (a lone GPU: algbw), bytes/s; absent when it gave no answer.")
    fam_glat = Family("ncclbench_health_group_latency_seconds", "Each group of each phase's fleet round: its "
                      "small-message time, seconds.")
    fam_gok = Family("ncclbench_health_group_ok", "Each group of each phase's fleet round: 1 when judged ok, "
                     "0 otherwise (its status, a word that changes from scan to scan, is in the JSON).")
    for m in doc.get("measurements", ()):
        if not str(m.get("purpose", "")).startswith("fleet"):
            continue  # re-measurements are the findings' evidence
        for g in m.get("groups", ()):
            lab = {"round": str(m.get("round", "")), "shape": str(g.get("shape", "")), "group": str(g.get("group", "")),
                   "hosts": "+".join(g.get("hosts", ())), "rail": "" if g.get("rail") is None else str(g["rail"])}
            fam_gbw.add(None if g.get("busbw") is None else float(g["busbw"]) * GB, **lab)
            fam_glat.add(None if g.get("lat_us") is None else float(g["lat_us"]) * US, **lab)
            fam_gok.add(1 if g.get("status") == "ok" else 0, **lab)
    return [fam_time, fam_wall, fam_exit, fam_hosts, fam_host, fam_drain, fam_gpu, fam_rail, fam_find, fam_meas,
            fam_exp, fam_ceil, fam_gbw, fam_glat, fam_gok]


def health_metrics(doc: Mapping[str, Any], now: float | None = None) -> str:
    return render(health_families(doc, now))


# -- the regression gate ------------------------------------------------------------------------


CHECK_STATUSES = ("ok", "regression", "unstable candidate")


def check_metrics(gate: Mapping[str, Any], run: str, against: str, now: float | None = None) -> str:
    """`ncclbench check --metrics FILE`: the gate's outcome and each judged figure
    (`store.gate_format.gate_to_dict`), labelled by the baseline given.  The checked run is not a label:
    a reference like `latest` names another run each time (a new series per run, or one series for
    many runs); its id, where `run` is one, is the value of ncclbench_check_run_id."""
    base = {"against": against}
    fam_time = Family("ncclbench_check_timestamp_seconds", "When the check ran (Unix time).")
    fam_time.add(time.time() if now is None else now, **base)
    fam_run = Family("ncclbench_check_run_id", "The store id of the checked run.")
    if run.isdigit():
        fam_run.add(int(run), **base)
    fam_status = Family("ncclbench_check_status", "The gate's outcome (value 1): " + ", ".join(CHECK_STATUSES)
                        + " (not judged).")
    status = str(gate.get("status") or ("ok" if gate.get("ok") else "regression"))
    fam_status.add(1, **base, status=status if status in CHECK_STATUSES else "other")
    fam_exit = Family("ncclbench_check_exit_code", "The check's exit status (0 ok, 7 regression, 9 not judged).")
    if gate.get("exit_code") is not None:
        fam_exit.add(int(gate["exit_code"]), **base)
    fam_worse = Family("ncclbench_check_worse_ratio", "How much worse the figure is than the baseline (0-1; "
                       "negative: better).")
    fam_limit = Family("ncclbench_check_limit_ratio", "The figure's effective limit: the larger of the user's "
                       "limit and the noise's multiple (0-1).")
    fam_verdict = Family("ncclbench_check_verdict", "One judged figure's verdict (value 1): ok, regression or "
                         "unstable.")
    for j in gate.get("judgements", ()):
        lab = dict(base, series=str(j.get("series", "")), figure=str(j.get("figure", "")),
                   metric=str(j.get("metric", "")))
        worse, limit = j.get("worse_pct"), j.get("limit_pct")
        fam_worse.add(None if worse is None else float(worse) / 100.0, **lab)
        fam_limit.add(None if limit is None else float(limit) / 100.0, **lab)
        verdict = j.get("verdict") or ("regression" if j.get("failed") else "ok")
        fam_verdict.add(1, **lab, verdict=str(verdict))
    return render([fam_time, fam_run, fam_status, fam_exit, fam_worse, fam_limit, fam_verdict])
