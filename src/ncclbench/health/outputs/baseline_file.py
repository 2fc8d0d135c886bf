"""A health baseline file: the references a later scan is judged against.

`--save-baseline FILE` writes the fleet references of the scan's group shapes
(median and spread per shape, from the scan's JSON); a shape with too few groups
for fleet statistics (one GPU, one host) keeps each scan's figure as a sample,
and from LONE_MIN_SCANS saved scans on their median and robust spread are the
reference.  `--baseline FILE` reads it back as a `health.core.round_judge.Baseline`.
"""

from __future__ import annotations

import json
import os
import statistics

from ... import __version__
from ...core.errors import ArgumentError
from ..core.fleet import Fleet
from ..core.round_judge import Baseline, robust_reference

# A lone measurement (one GPU, one host) has no spread of its own: until a baseline holds
# LONE_MIN_SCANS scans of it, the spread used is this fraction of its median.  Two healthy
# scans of one H100 gave 668 and 604 GB/s for the local 4 MiB figure (-10 %,
# bench/results/health-gpu-h100-2026-11-24.md): at 5 %, a z of -3.5 is a 17.5 % drop.
LONE_BW_SPREAD = 0.05
LONE_MIN_SCANS = 3


def load_baseline(path: str) -> Baseline:
    """The baseline file at `path`; a file that cannot be read is one clear line (exit 255)."""
    try:
        with open(path) as f:
            doc = json.load(f)
        return Baseline({k: tuple(v) for k, v in doc["busbw"].items()},
                        {k: tuple(v) for k, v in doc.get("lat_us", {}).items()}, name=doc.get("name", path),
                        hosts=tuple(str(h) for h in doc.get("hosts", ())), version=str(doc.get("version", "")))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ArgumentError(f"health: cannot read baseline {path}: {exc}") from None


def check_baseline_version(baseline: Baseline) -> None:
    """A baseline saved by another ncclbench version is not this scan's reference: a group's
    size, ops and cycles may be measured another way.  One clear line (exit 255), nothing judged
    against it; a file that records no version (written before it was kept) is not held to it."""
    if baseline.version and baseline.version != __version__:
        raise ArgumentError(f"health: baseline {baseline.name} was saved by ncclbench {baseline.version}, this is "
                            f"{__version__}: its figures may be measured another way, not judged against it "
                            "(save a new one with --save-baseline)")


def save_baseline(path: str, json_path: str) -> None:
    """The run's fleet references per group shape.  A shape with too few groups for
    fleet statistics (one GPU, one host) keeps its measured median as a sample; saving
    again to the same file adds a sample, and from LONE_MIN_SCANS samples on their
    median and robust spread are the reference (before that the spread is unknown and
    LONE_BW_SPREAD / the latency floor stand in).  "measured" says which case holds."""
    with open(json_path) as f:
        doc = json.load(f)
    try:
        with open(path) as f:
            old = json.load(f)
        old_samples, old_hosts = old.get("samples", {}), list(old.get("hosts", []))
    except (OSError, ValueError, AttributeError):
        old_samples, old_hosts = {}, []
    refs = doc.get("references", {})
    tables: dict[str, dict[str, list[float]]] = {"busbw": {}, "lat_us": {}}
    for shape, r in refs.items():
        for metric, table in tables.items():
            if r.get(metric) and r[metric]["source"] == "fleet":
                table[shape] = [r[metric]["center"], r[metric]["spread"]]
    samples: dict[str, dict[str, list[float]]] = {"busbw": {}, "lat_us": {}}
    measured: dict[str, str] = {}
    for shape, groups in unreferenced_groups(doc).items():
        for metric, table in tables.items():
            values = [g[metric] for g in groups if g.get(metric) is not None]
            if shape in table or not values:
                continue
            kept = [float(v) for v in old_samples.get(metric, {}).get(shape, [])] + [statistics.median(values)]
            samples[metric][shape] = kept
            ref = robust_reference(kept, 0.0, LONE_MIN_SCANS)
            if ref is not None:
                table[shape] = [ref.center, ref.spread]
                measured[shape] = (f"{len(groups)} group(s) per scan, too few for fleet statistics: the median "
                                   f"and spread of {len(kept)} saved scans")
            else:
                center = statistics.median(kept)
                table[shape] = [center, LONE_BW_SPREAD * center if metric == "busbw" else 0.0]
                measured[shape] = (f"{len(groups)} group(s) per scan, too few for fleet statistics; "
                                   f"{len(kept)} of {LONE_MIN_SCANS} scans saved: their median, spread unknown "
                                   f"(taken as {LONE_BW_SPREAD:.0%} busbw, the judge's floor for latency); "
                                   f"save again to this file from healthy scans to measure it")
    hosts = sorted(set(doc.get("hosts", [])) | set(old_hosts))
    with open(path, "w") as f:
        json.dump({"name": os.path.basename(path), "version": __version__, "hosts": hosts, **tables,
                   "measured": measured, "samples": samples}, f, indent=1)


def check_baseline_hosts(baseline: Baseline, fleet: Fleet) -> None:
    """A baseline saved on other hosts (or hosts of another shape, `check_baseline_shape`) is not
    this fleet's reference: one clear line (exit 255),
    nothing judged against it.  A baseline that names no hosts (written before they were kept)
    is taken as it is; one that shares any host with the scan (a subset of a fleet) is used."""
    check_baseline_shape(baseline, fleet)
    if baseline.hosts and not set(baseline.hosts) & set(fleet.hosts):
        shown = ", ".join(baseline.hosts[:6]) + (", ..." if len(baseline.hosts) > 6 else "")
        here = ", ".join(fleet.hosts[:6]) + (", ..." if len(fleet.hosts) > 6 else "")
        raise ArgumentError(f"health: baseline {baseline.name} was saved on other hosts ({shown}), none of them "
                            f"in this scan ({here}): not judged against it")


def check_baseline_shape(baseline: Baseline, fleet: Fleet) -> None:
    """A baseline saved on hosts with another number of GPUs is not this fleet's reference: its
    whole-host shapes ("intra:1x8", "pairs:2x8": per-host GPU count after the x) name hosts of
    another size, whose figures are not this fleet's.  One clear line (exit 255), nothing judged
    against it.  A baseline holding a one-GPU shape ("local:1x1", rails) still fits: the shapes
    it shares with the scan are used, the others have nothing to judge."""
    per_host = [int(per) for shape in [*baseline.busbw, *baseline.lat_us] if "x" in shape
                for per in [shape.rsplit("x", 1)[1]] if per.isdigit()]
    sizes = {n for n in per_host if n > 1}
    here = {fleet.gpus(h) for h in range(fleet.nhosts)}
    if sizes and 1 not in per_host and not sizes & here:
        raise ArgumentError(f"health: baseline {baseline.name} was saved on hosts of {', '.join(map(str, sorted(sizes)))} "
                            f"GPU(s), this scan's hosts have {', '.join(map(str, sorted(here)))}: another shape, not "
                            f"judged against it")


def unreferenced_groups(doc: dict) -> dict[str, list[dict]]:
    """shape -> the fleet round's groups of that shape that were measured but had no
    fleet reference for lack of groups (not those whose cycles disagreed or that failed)."""
    out: dict[str, list[dict]] = {}
    for rec in doc.get("measurements", []):
        if not str(rec.get("purpose", "")).startswith("fleet") or str(rec.get("purpose")).endswith("rails"):
            continue
        for g in rec.get("groups", []):
            if g.get("wrong") or g.get("busbw") is None or str(g.get("why") or "").startswith("not judged:"):
                continue  # failed, or its cycles disagreed: not a sample of what is normal
            if "reference" in g:
                if g["reference"] is not None:
                    continue  # judged against the fleet or a baseline already
            elif not str(g.get("why") or "").startswith("no reference"):
                continue  # a scan written before "reference" was recorded
            out.setdefault(str(g.get("shape")), []).append(g)
    return out
