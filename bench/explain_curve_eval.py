"""Explain's expected curve judged on recorded healthy sweeps it was not calibrated on (issue 30).

Every recorded healthy run (bench/results/raw/: 2x and 4x H100, 2026-11-26, -f 4; 2x and 4x H200,
2026-11-21, -f 2; ncclbench and nccl-tests, two runs each, 10 collectives) is cut at -e 32M, 128M,
1G and 8G (its rows up to there, as a sweep that stopped there) and judged by `ncclbench explain`'s
own code with the calibration table restricted to the OTHER GPU class: H200 sweeps against the H100
curves and the reverse, so neither the runs nor the -f 2 sizes (64 MiB, 256 MiB, 1 GiB, 4 GiB) were
seen by the curve that judges them.  Also: the same sweeps with the ceiling alone (the verdict before
the curve), the issue's 2x H200 figures, and each run at 80 % of its figures (which must be below).

    python bench/explain_curve_eval.py --out bench/results     # writes explain-curve-2026-11-28.{md,json}
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import json
import platform
import statistics
import sys
import tarfile
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "src"))
from explain_curve_calibrate import RAW, SOURCES  # noqa: E402
from provenance import commit  # noqa: E402

from ncclbench.explain import curve_data, run_explain  # noqa: E402
from ncclbench.explain.expected_curve import find_expectation  # noqa: E402
from ncclbench.explain.stored import run_facts  # noqa: E402
from ncclbench.store.importers import parse_text_log  # noqa: E402

MiB, GiB = 2**20, 2**30
CUTS = {"32M": 32 * MiB, "128M": 128 * MiB, "1G": GiB, "8G": 8 * GiB}
# The issue's 2x H200 healthy runs (NCCL 2.28.9, main 02acf37): collective, -e, -f, plateau printed.
ISSUE_H200 = (("all_reduce", 8 * GiB, 2, 347.0), ("all_reduce", GiB, 4, 328.8), ("all_reduce", 256 * MiB, 4, 299.9),
              ("all_gather", 128 * MiB, 2, 221.7), ("reduce_scatter", 128 * MiB, 2, 217.3),
              ("alltoall", 128 * MiB, 2, 250.4), ("broadcast", 128 * MiB, 2, 340.2))


@dataclass
class Sweep:
    gpu_class: str
    ngpus: int
    collective: str
    name: str  # the archive member
    text: str


def recorded_sweeps() -> list[Sweep]:
    """Every healthy run in the archives the calibration reads (no -G graph runs)."""
    out = []
    for (cls, n), (archive, folder, _) in SOURCES.items():
        with tarfile.open(RAW / archive) as tar:
            for m in tar.getmembers():
                name = m.name.rsplit("/", 1)[-1]
                f = tar.extractfile(m) if m.name.startswith(folder) and name.endswith(".txt") else None
                if f is None or ".graph" in name or name.startswith("hypercube"):
                    continue
                out.append(Sweep(cls, n, name.split(".")[0], f"{archive}:{m.name}", f.read().decode(errors="replace")))
    return sorted(out, key=lambda s: (s.gpu_class, s.ngpus, s.collective, s.name))


@contextlib.contextmanager
def calibration(classes: tuple[str, ...] | None) -> Iterator[None]:
    """Judge with the curves of `classes` only (None: no curve at all, the ceiling alone)."""
    curves = {k: v for k, v in curve_data.CURVES.items() if classes is not None and k[0] in classes}
    saved = run_explain.find_expectation
    run_explain.find_expectation = functools.partial(find_expectation, curves=curves)  # type: ignore[assignment]
    try:
        yield
    finally:
        run_explain.find_expectation = saved  # type: ignore[assignment]


def judge_text(text: str, collective: str, max_bytes: int | None, scale: float = 1.0) -> dict[str, Any]:
    """The verdict explain gives the log `text` cut at `max_bytes`, its busbw figures times `scale`."""
    run = parse_text_log(text, "<recorded>", collective)[0]
    rows = [r for r in run.rows if max_bytes is None or r.size <= max_bytes]
    for r in rows:
        r.out_of_place.busbw *= scale
    run.rows = rows
    ex = run_explain.explain_run(run_facts(run))
    j = ex.judgement
    return {"verdict": j.verdict.label, "text": j.verdict.text, "plateau": j.plateau.busbw,
            "curve": j.expected.get("label"), "fraction": j.verdict.fraction}


def issue_rows_text(collective: str, top: int, f: int, busbw: float) -> str:
    """A 2-GPU nccl-tests table whose plateau sizes (within 4x of the largest) all read `busbw`: the
    figure the issue printed, at the sizes its command ran."""
    head = ["# nccl-tests version 2.19.6 nccl-headers=22809 nccl-library=22809",
            f"# Collective test starting: {collective}_perf", "# Using devices",
            "#  Rank  0 Group  0 Pid   1 on       h200 device  0 [0000:00:06] NVIDIA H200",
            "#  Rank  1 Group  0 Pid   2 on       h200 device  1 [0000:00:07] NVIDIA H200",
            "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   "
            "algbw   busbw  #wrong"]
    rows, s = [], MiB
    while s <= top:
        b = busbw if s * 4 > top else busbw / 2
        rows.append(f"  {s:>10}  {s // 4:>12}     float     sum      -1   100.0  {b:6.2f}  {b:6.2f}       0   100.0  "
                    f"{b:6.2f}  {b:6.2f}       0")
        s *= f
    return "\n".join(head + rows + ["# Avg bus bandwidth    : 1.0", "#"]) + "\n"


def evaluate() -> dict[str, Any]:
    sweeps = recorded_sweeps()
    held: list[dict[str, Any]] = []
    for sw in sweeps:
        other = ("H200",) if sw.gpu_class == "H100" else ("H100",)
        for cut, nbytes in CUTS.items():
            row = {"run": sw.name, "class": sw.gpu_class, "ngpus": sw.ngpus, "collective": sw.collective, "cut": cut}
            with calibration(other):
                row["curve"] = judge_text(sw.text, sw.collective, nbytes)
                row["slow80"] = judge_text(sw.text, sw.collective, nbytes, 0.8)["verdict"]
            with calibration(None):
                row["ceiling_only"] = judge_text(sw.text, sw.collective, nbytes)["verdict"]
            held.append(row)
    with calibration(("H100",)):
        issue = [{"collective": c, "e": e, "f": f, "busbw": b,
                  **judge_text(issue_rows_text(c, e, f, b), c, None)} for c, e, f, b in ISSUE_H200]
    return {"held_out": held, "issue_h200": issue, "twin_agreement": twin_agreement()}


def twin_agreement() -> dict[str, Any]:
    """H100 vs H200 recorded medians at the sizes both have, from 32 MiB: the ratio's spread."""
    ratios = []
    for (cls, n, coll), pts in curve_data.CURVES.items():
        if cls != "H100" or ("H200", n, coll) not in curve_data.CURVES:
            continue
        other = dict(curve_data.CURVES[("H200", n, coll)])
        ratios += [(n, coll, s, round(other[s] / b, 3)) for s, b in pts if s >= 32 * MiB and s in other]
    vals = [r[-1] for r in ratios]
    return {"points": len(vals), "min": min(vals), "max": max(vals), "median": statistics.median(vals),
            "worst": sorted(ratios, key=lambda r: abs(r[-1] - 1))[-3:]}


def tally(rows: list[dict[str, Any]], key: str) -> Mapping[str, int]:
    return Counter((r[key]["verdict"] if isinstance(r[key], dict) else r[key]) for r in rows)


def markdown(doc: dict[str, Any]) -> str:
    m, held = doc["meta"], doc["held_out"]
    md = [f"# Explain's expected curve on held-out healthy sweeps ({m['date']}, commit {m['commit']})", "",
          f"`{m['command']}` on {m['machine']} (CPU only: recorded figures judged again).", "",
          "Each recorded healthy run cut at -e 32M/128M/1G/8G, judged with the curves of the other GPU class "
          "only (H200 runs against H100 curves and the reverse).", "",
          "| judged by | as expected | below expected | not judged | other |", "|---|---|---|---|---|"]
    for key, what in (("curve", "the curve (held out)"),
                      ("ceiling_only", "no curve of its own (the ceiling, and the lowest recorded healthy share)")):
        t = tally(held, key)
        md.append(f"| {what} | {t.get('as expected', 0)} | {t.get('below expected', 0)} | {t.get('unknown', 0)} | "
                  f"{sum(v for k, v in t.items() if k not in ('as expected', 'below expected', 'unknown'))} |")
    md += ["", "Before the curve (main d47e604, the ceiling alone) the same 640 judgements were 204 as expected, "
           "132 below expected, 304 not judged."]
    slow = Counter(r["slow80"] for r in held if r["curve"]["verdict"] == "as expected")
    md += ["", f"The same runs at 80 % of their figures (where the real ones were as expected): {dict(slow)}", "",
           "Per cut (curve, held out): " + "; ".join(
               f"-e {c}: {dict(Counter(r['curve']['verdict'] for r in held if r['cut'] == c))}" for c in CUTS), "",
           "## The issue's 2x H200 runs, judged with the H100 curves only", "",
           "| collective | -e | -f | plateau GB/s | verdict | text |", "|---|---|---|---|---|---|"]
    md += [f"| {r['collective']} | {r['e'] // MiB} MiB | {r['f']} | {r['busbw']} | {r['verdict']} | {r['text']} |"
           for r in doc["issue_h200"]]
    tw = doc["twin_agreement"]
    md += ["", f"H200 / H100 recorded medians, same GPU count, collective and size, from 32 MiB: {tw['points']} points, "
           f"ratio {tw['min']}..{tw['max']} (median {tw['median']}); farthest: {tw['worst']}", ""]
    below = [f"{r['run']} @{r['cut']}: {r['curve']['text']}" for r in held if r["curve"]["verdict"] == "below expected"]
    md += ["Below expected on a healthy run: " + ("; ".join(below) if below else "none")]
    return "\n".join(md) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--name", default="explain-curve-2026-11-28")
    args = ap.parse_args(argv)
    doc = {"meta": {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                    "machine": platform.node(), "commit": commit(),
                    "command": " ".join(["bench/explain_curve_eval.py", *(argv if argv is not None else sys.argv[1:])])},
           **evaluate()}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(doc, indent=1) + "\n")
    (args.out / f"{args.name}.md").write_text(markdown(doc))
    print(markdown(doc))
    return 1 if any(r["curve"]["verdict"] == "below expected" for r in doc["held_out"]) else 0


if __name__ == "__main__":
    sys.exit(main())
