"""Write explain's calibration table (src/ncclbench/explain/curve_data.py) from recorded healthy sweeps.

Each entry is the median out-of-place busbw per size over every run of one (GPU class, GPU count,
collective) in a recorded side-by-side visit (ncclbench and nccl-tests, two runs each, one host,
NVLink SHARP off, NCCL 2.28.9), from 1 MiB up: the sizes explain judges.  The sources are the raw
archives under bench/results/raw/ named below, with the machine, date and commit of each visit.

    python bench/explain_curve_calibrate.py            # rewrites src/ncclbench/explain/curve_data.py
    python bench/explain_curve_calibrate.py --check    # exit 1 when the committed table differs

The band per size (HEALTHY_LOWEST in the table): every healthy run of every recorded machine (the visits
above and MORE_MACHINES: machines recorded after the curves, which widen the spread but not the curve),
each size from 32 MiB, as a ratio to the curve of its GPU count and collective of either twin class
(H100 / H200: one stands in for the other), the lowest ratio per size, which machine gave it, and how many
machines recorded a healthy run at that size (explain judges a size on the ramp only where at least 3 did:
expected_curve.RAMP_MIN_MACHINES).  A machine counts at the sizes its own sweeps measured: the -f 4
recordings (8 B x 4^k: 32 MiB, 128 MiB, 512 MiB, ...) are not counted at the -f 2 sizes between them.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import re
import statistics
import sys
import tarfile
import textwrap
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RAW = ROOT / "bench" / "results" / "raw"
OUT = ROOT / "src" / "ncclbench" / "explain" / "curve_data.py"
ROW = re.compile(r"^\s+(\d+)\s+\d+\s+\w+\s+\w+\s+-?\d+\s+[\d.]+\s+[\d.]+\s+([\d.]+)\s")
MIN_BYTES = 2**20

# (gpu class, GPU count): archive, folder inside it, provenance
SOURCES = {
    ("H100", 2): ("2026-11-26-v3a.tar.xz", "parity2/",
                  "2x NVIDIA H100 80GB HBM3 (NVSwitch, 18 NVLinks) of a 4-GPU host, NCCL 2.28.9, 2026-11-26, "
                  "main 37b2844; bench/compare_nccl_tests.py -b 8 -e 8G -f 4 -n 10, 2 ncclbench + 2 nccl-tests "
                  "runs (bench/results/gpu-h100x4-2026-11-26/parity-2gpu.md)"),
    ("H100", 4): ("2026-11-26-v3a.tar.xz", "parity4/",
                  "4x NVIDIA H100 80GB HBM3 (NVSwitch, 18 NVLinks), NCCL 2.28.9, 2026-11-26, main 37b2844; "
                  "bench/compare_nccl_tests.py -b 8 -e 8G -f 4 -n 10, 2 ncclbench + 2 nccl-tests runs "
                  "(bench/results/gpu-h100x4-2026-11-26/parity-4gpu.md)"),
    ("H200", 2): ("2026-11-21-h200x4-callpaths-v4-2gpu-8G-busbw4.tgz", "w/cmp2/",
                  "2x NVIDIA H200 (NV18) of a 4-GPU host, NCCL 2.28.9, 2026-11-21, main 2a349ab; "
                  "bench/gpu_validate.sh 2gpu -b 8 -e 8G -f 2, 2 ncclbench + 2 nccl-tests runs "
                  "(bench/results/gpu-h200x4-2026-11-21-callpaths.md, v4)"),
    ("H200", 4): ("2026-11-21-h200x4-callpaths-v2-callpaths-4gpu-8G.tgz", "w/cmp4/",
                  "4x NVIDIA H200 (NV18), NCCL 2.28.9, 2026-11-21, main 32616ed; bench/gpu_validate.sh 4gpu "
                  "-b 8 -e 8G -f 2, 2 ncclbench + 2 nccl-tests runs (bench/results/gpu-h200x4-2026-11-21-callpaths.md, v2)"),
}
# all_reduce on H200 from 64 MiB: the figures health's physics thresholds have read since they were recorded
# (ncclbench's out-of-place busbw, median of 5 runs on 4 GPUs and 3 on 2; the bandwidth sweeps of
# bench/results/gpu-h200x4-2026-11-21-repeats.md), so explain and health read one table.
OVERRIDES = {("H200", 4, "all_reduce"): "bench/results/compare-2026-11-21-repeats-4gpu-busbw.json",
             ("H200", 2, "all_reduce"): "bench/results/compare-2026-11-21-repeats-2gpu-busbw.json"}
# Machines whose healthy runs set the per-size band but not the curve: (class, GPU count), archive, folder of
# nccl-tests -J files inside it (healthy runs: every file not named cause-*), provenance.
MORE_MACHINES = {
    "2x H200 2026-11-28": (("H200", 2), "2026-11-28-2xH200-explain-curve-ad544b9.tar.xz", "./explain/ec/runs/",
                           "2x NVIDIA H200 (NV18), driver 580.159, NCCL 2.28.9, 2026-11-28, main ad544b9; "
                           "bench/explain_curve_gpu.py: 11 collectives -b 1M -e 8G -f 2 and -e 32M/128M/1G "
                           "(bench/results/explain-curve-gpu-2026-11-28-2xH200/README.md)"),
    "2x H200 2026-11-28 1eb0992": (("H200", 2), "2026-11-28-2xH200-explain-curve-1eb0992.tar.xz", "./explain/ec/runs/",
                                   "2x NVIDIA H200 (NV18; GPU-76851eeb, GPU-ce76c6c4: not the GPUs of the ad544b9 "
                                   "visit), driver 580.159, NCCL 2.28.9, 2026-11-28, main 1eb0992; "
                                   "bench/explain_curve_gpu.py --steps healthy_full,nccl_tests: 11 collectives "
                                   "-b 1M -e 8G -f 2 (bench/results/explain-curve-gpu-2026-11-28-2xH200-1eb0992/)"),
}
BAND_FROM = 32 * 2**20  # CURVE_MIN_PLATEAU_BYTES: the sizes a curve verdict reads
CEILING = 370.8  # NCCL's model for an H100/H200 NVSwitch GPU: 18 x 20.6 GB/s (explain/ceiling.py)


def curves_of(archive: str, folder: str) -> dict[str, list[tuple[int, float]]]:
    """collective -> [(size, median out-of-place busbw)] over the runs in `folder` (no -G graph runs)."""
    per: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    with tarfile.open(RAW / archive) as tar:
        for m in tar.getmembers():
            name = m.name.rsplit("/", 1)[-1]
            if not m.name.startswith(folder) or not name.endswith(".txt") or ".graph" in name:
                continue
            coll = name.split(".")[0]
            f = tar.extractfile(m)
            if f is None:
                continue
            for line in f.read().decode(errors="replace").splitlines():
                r = ROW.match(line)
                if r and int(r.group(1)) >= MIN_BYTES:
                    per[coll][int(r.group(1))].append(float(r.group(2)))
    return {c: [(s, round(statistics.median(v), 1)) for s, v in sorted(sizes.items())]
            for c, sizes in sorted(per.items()) if sizes}


def runs_txt(archive: str, folder: str) -> list[tuple[str, list[tuple[int, float]]]]:
    """(collective, [(size, out-of-place busbw)]) per run (one .txt file each) in `folder`, no -G graph runs."""
    out = []
    with tarfile.open(RAW / archive) as tar:
        for m in tar.getmembers():
            name = m.name.rsplit("/", 1)[-1]
            if not m.name.startswith(folder) or not name.endswith(".txt") or ".graph" in name:
                continue
            f = tar.extractfile(m)
            if f is None:
                continue
            rows = [(int(r.group(1)), float(r.group(2))) for line in f.read().decode(errors="replace").splitlines()
                    if (r := ROW.match(line))]
            out.append((name.split(".")[0], rows))
    return out


def runs_json(archive: str, folder: str) -> list[tuple[str, list[tuple[int, float]]]]:
    """(collective, [(size, out-of-place busbw)]) per healthy nccl-tests -J file in `folder` (not cause-*)."""
    out = []
    with tarfile.open(RAW / archive) as tar:
        for m in tar.getmembers():
            name = m.name.rsplit("/", 1)[-1]
            if not m.name.startswith(folder) or not name.endswith(".json") or name.startswith("cause-"):
                continue
            f = tar.extractfile(m)
            if f is None:
                continue
            doc = json.load(io.BytesIO(f.read()))
            rows = [(int(r["size"]), float(r["out_of_place"]["bus_bw"])) for r in doc["results"]]
            out.append((doc["args"][0].removesuffix("_perf"), rows))
    return out


def source_machine(key: tuple[str, int]) -> str:
    """The name of the machine whose visit recorded the curves of `key` (class, GPU count) in SOURCES."""
    archive, _, text = SOURCES[key]
    date = re.search(r"20\d\d-\d\d-\d\d", text)
    return f"{key[1]}x {key[0]} {date.group(0) if date else archive}"


def machines() -> dict[str, tuple[tuple[str, int], list[tuple[str, list[tuple[int, float]]]]]]:
    """Every recorded machine: name -> ((class, GPU count), its healthy runs)."""
    got = {}
    for key, (archive, folder, _) in SOURCES.items():
        got[source_machine(key)] = (key, runs_txt(archive, folder))
    for name, (key, archive, folder, _) in MORE_MACHINES.items():
        got[name] = (key, runs_json(archive, folder))
    return got


def lowest_ratios(curves: dict[tuple[str, int, str], list[tuple[int, float]]],
                  recorded: dict[str, tuple[tuple[str, int], list[tuple[str, list[tuple[int, float]]]]]],
                  ) -> dict[tuple[int, str], list[tuple[int, float, str, int]]]:
    """(GPU count, collective) -> [(size, lowest healthy run / curve, which machine, how many machines had a
    healthy run there)] from BAND_FROM up, each run against the curve of either twin class (the one that judges
    it, and the one that stands in).  The count is of machines (names of `recorded`), not of runs: two runs of one
    machine are one machine's spread."""
    low: dict[tuple[int, str], dict[int, tuple[float, str]]] = defaultdict(dict)
    seen: dict[tuple[int, str], dict[int, set[str]]] = defaultdict(lambda: defaultdict(set))
    for name, ((_, n), runs) in recorded.items():
        for coll, rows in runs:
            for cls in ("H100", "H200"):
                pts = curves.get((cls, n, coll))
                if not pts:
                    continue
                for size, busbw in rows:
                    if size < BAND_FROM or size < pts[0][0]:
                        continue
                    want = _at(pts, size)
                    r = busbw / want
                    seen[(n, coll)][size].add(name)
                    if size not in low[(n, coll)] or r < low[(n, coll)][size][0]:
                        low[(n, coll)][size] = (round(r, 3), name)
    return {k: [(s, r, m, len(seen[k][s])) for s, (r, m) in sorted(v.items())] for k, v in sorted(low.items())}


def _at(pts: list[tuple[int, float]], size: int) -> float:
    """The curve at `size`: log-linear between recorded sizes, flat past the largest (expected_curve.at)."""
    if size >= pts[-1][0]:
        return pts[-1][1]
    for (s0, b0), (s1, b1) in zip(pts, pts[1:]):
        if s0 <= size <= s1:
            t = (math.log(size) - math.log(s0)) / (math.log(s1) - math.log(s0))
            return b0 + t * (b1 - b0)
    return pts[0][1]


def all_curves() -> dict[tuple[str, int, str], list[tuple[int, float]]]:
    """The calibration curves: (class, count, collective) -> [(size, busbw)]."""
    out = {}
    for (cls, n), (archive, folder, _) in SOURCES.items():
        for coll, raw in curves_of(archive, folder).items():
            out[(cls, n, coll)] = with_override((cls, n, coll), raw)
    return out


def with_override(key: tuple[str, int, str], pts: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """`pts` with the sizes OVERRIDES' file measured replaced by its ncclbench out-of-place figures."""
    path = OVERRIDES.get(key)
    if path is None:
        return pts
    doc = json.loads((ROOT / path).read_text())
    over = {int(x["size"]): float(x["ncclbench"]) for x in doc["runs"][key[2]]["busbw_large"] if x["half"] == "oop"}
    return sorted({**dict(pts), **over}.items())


def render() -> str:
    lines = ['"""Recorded healthy busbw curves: explain\'s calibration of the ramp to the plateau.',
             "", "Generated by bench/explain_curve_calibrate.py from the raw archives under bench/results/raw/",
             "(do not edit by hand).  Key: (GPU class, GPU count on one host, collective); value: (size in",
             "bytes, median out-of-place busbw GB/s) from 1 MiB up.  SOURCES says where each came from.", '"""',
             "", "from __future__ import annotations", "",
             f"CEILING_AT_CALIBRATION = {CEILING}  # GB/s: NCCL's model of the GPUs these were measured on", "",
             "SOURCES: dict[tuple[str, int], str] = {"]
    for key, (archive, folder, text) in SOURCES.items():
        over = [f"; {k[2]} from 64 MiB: {v}" for k, v in OVERRIDES.items() if k[:2] == key]
        parts = textwrap.wrap("bench/results/raw/" + archive + " " + folder + ": " + text + "".join(over), 100,
                              drop_whitespace=False)
        lines.append(f"    {key!r}: (" + "\n        ".join(repr(x) for x in parts) + "),")
    lines += ["}", "", "CURVES: dict[tuple[str, int, str], tuple[tuple[int, float], ...]] = {"]
    curves = all_curves()
    for (cls, n, coll), pts in curves.items():
        lines.append(f"    ({cls!r}, {n}, {coll!r}): (")
        for i in range(0, len(pts), 5):
            lines.append("        " + " ".join(f"({s}, {b})," for s, b in pts[i:i + 5]))
        lines.append("    ),")
    lines += ["}", "", "# Machines whose healthy runs set HEALTHY_LOWEST but not CURVES.",
              "MORE_SOURCES: dict[str, str] = {"]
    for name, (_, archive, folder, text) in MORE_MACHINES.items():
        parts = textwrap.wrap("bench/results/raw/" + archive + " " + folder + ": " + text, 90, drop_whitespace=False)
        lines.append(f"    {name!r}: (" + "\n        ".join(repr(x) for x in parts) + "),")
    lines += ["}", "", "# (GPU count, collective) -> (size, lowest healthy run / curve of either twin class, machine,",
              "# machines with a healthy run at that size), every healthy run of every machine above, from 32 MiB:",
              "# the spread a per-size band reads, and how many machines it rests on.",
              "HEALTHY_LOWEST: dict[tuple[int, str], tuple[tuple[int, float, str, int], ...]] = {"]
    for (n, coll), pts in lowest_ratios(curves, machines()).items():
        lines.append(f"    ({n}, {coll!r}): (")
        for i in range(0, len(pts), 2):
            lines.append("        " + " ".join(f"({s}, {r}, {m!r}, {k})," for s, r, m, k in pts[i:i + 2]))
        lines.append("    ),")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    text = render()
    if args.check:
        same = OUT.exists() and OUT.read_text() == text
        print("curve_data.py is up to date" if same else "curve_data.py differs from the archives")
        return 0 if same else 1
    OUT.write_text(text)
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
