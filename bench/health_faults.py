#!/usr/bin/env python3
"""`ncclbench health` against a catalog of faults on one host with N GPUs (issue 22): each fault
must be convicted with its cause named, and healthy scans must raise no alarm.

    PYTHONPATH=src python bench/health_faults.py --ngpus 4 --out DIR [--healthy 5]

The catalog (each a fresh `ncclbench health --backend nccl --nprocs N` scan, one process per GPU,
coordinated from the starting process; NCCL_NVLS_ENABLE stays as the caller set it):

| fault | how | expected verdict |
|---|---|---|
| p2p_off | NCCL_P2P_DISABLE=1 in the ranks' environment | node intra slow, cause p2p-disabled (a setting) |
| p2p_shm_off | NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 | node intra slow, cause p2p-shm-disabled (the socket path) |
| channels_2 | NCCL_MAX_NCHANNELS=2 | node intra slow, cause channels-capped |
| gpu_busy | bench/gpu_hog.py copying on the last GPU during the scan | that GPU slow (local phase), no trap names it |

then `--healthy` scans with nothing injected: exit 0 and no finding each (0 false alarms).

Out: DIR/health_faults.json and DIR/health_faults.md (machine, NCCL, commit, date, command, per
scan: exit, wall time, figures, thresholds and their source, findings with cause; the checks),
and each scan's JSON/stdout/stderr.  Exit 0 when every check holds.  `--backend mpi` runs the
same pipeline on the CPU backend (a smoke test of the script: NCCL settings and the GPU hog act
on GPUs only, so the conviction checks are reported as not applicable there).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from health_gpu import checks_table, machine, run_scan_command, scan_outputs, start_hog, stop_hog  # noqa: E402  (bench/ is not a package)
from provenance import commit  # noqa: E402

from ncclbench.health.core.findings import finding_slot  # noqa: E402


@dataclass(frozen=True)
class Fault:
    name: str
    env: dict[str, str] = field(default_factory=dict)
    hog: bool = False
    component: str = "node intra"  # the confirmed finding expected
    causes: tuple[str, ...] = ()  # any of these trap names must be among the finding's causes
    how: str = ""


CATALOG = (
    Fault("p2p_off", {"NCCL_P2P_DISABLE": "1"}, causes=("p2p-disabled",), how="NCCL_P2P_DISABLE=1"),
    Fault("p2p_shm_off", {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"},
          causes=("p2p-shm-disabled", "p2p-disabled", "net-socket-fallback"),
          how="NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1"),
    Fault("channels_2", {"NCCL_MAX_NCHANNELS": "2"}, causes=("channels-capped",), how="NCCL_MAX_NCHANNELS=2"),
    Fault("gpu_busy", hog=True, component="gpu", how="bench/gpu_hog.py on the last GPU"),
)
FAULT_ENV = ("NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_MAX_NCHANNELS", "NCCL_MIN_NCHANNELS", "NCCL_ALGO",
             "NCCL_PROTO", "NCCL_P2P_LEVEL")


def scan_command(backend: str, ngpus: int, json_path: Path, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "ncclbench", "health", "--backend", backend, "--nprocs", str(ngpus),
            "--json", str(json_path), "--no-store", "--round-timeout", "60", "--join-timeout", "60", *extra]


def run_scan(name: str, out: Path, backend: str, ngpus: int, extra: list[str], env: dict, timeout_s: float) -> dict:
    js = out / f"{name}.json"
    js.unlink(missing_ok=True)
    cmd = scan_command(backend, ngpus, js, extra)
    res = run_scan_command(name, out, cmd, js, timeout_s, env, "health_faults")
    env_shown = {k: env[k] for k in sorted(env) if k.startswith("NCCL_")}
    return {**res, "env": env_shown,
            "command": " ".join([*(f"{k}={shlex.quote(v)}" for k, v in env_shown.items()), res["command"]])}


# -- judging the scans (pure: tests/test_health_faults_bench.py) ------------------------------------

def confirmed(doc: dict | None) -> list[dict]:
    return [f for f in (doc or {}).get("findings", []) if f.get("confirmed")]


def check_fault(fault: Fault, scan: dict, hog_device: int | None = None) -> tuple[bool, str]:
    """Convicted with its cause named: exit 8, a confirmed finding of the expected component (for the
    hog: exactly that GPU) whose causes include one of the expected traps (the hog: none, said so)."""
    found = confirmed(scan.get("doc"))
    if scan.get("exit_code") != 8 or not found:
        return False, f"exit {scan.get('exit_code')}, confirmed {[(f['component'], f['detail']) for f in found]}"
    hits = [f for f in found if f["component"] == fault.component
            and (not fault.hog or finding_slot(f) == hog_device)]
    if not hits:
        return False, f"no confirmed {fault.component}: {[(f['component'], f['detail']) for f in found]}"
    f = hits[0]
    if fault.causes:
        named = [c for c in f.get("cause", []) if c in fault.causes]
        ok = bool(named)
        return ok, (f"{f['component']} {f['detail']}: {f.get('measured')} GB/s; cause "
                    f"{', '.join(f.get('cause', [])) or 'none named'}; drained: {f['hosts'][0] in scan['doc']['drain']}")
    others = [x for x in found if x is not f and x["component"] == "gpu"]
    said = any("no trap explains it" in e for e in f.get("evidence", []))
    return not others and said, (f"gpu {hog_device}: {f.get('measured')} GB/s against {f.get('expected')}; "
                                 f"other GPUs named: {len(others)}; 'no trap explains it' said: {said}")


def check_healthy(scan: dict) -> tuple[bool, str]:
    """No alarm: exit 0, no finding confirmed or suspect, every host judged healthy."""
    doc = scan.get("doc") or {}
    found = [(f["component"], f.get("detail"), f["verdict"]) for f in doc.get("findings", [])
             if f.get("confirmed") or str(f.get("verdict", "")).startswith("suspect")]
    ok = scan.get("exit_code") == 0 and not found and doc.get("outcome") == "healthy"
    return ok, f"exit {scan.get('exit_code')}, outcome {doc.get('outcome')}, findings {found}"


def figures(doc: dict | None) -> dict[str, str]:
    """round -> its groups' figures, one line."""
    out = {}
    for rec in (doc or {}).get("measurements", []):
        out[rec["round"]] = ", ".join(f"{g['group']}: {g['busbw']:.1f}" if g.get("busbw") is not None
                                      else f"{g['group']}: -" for g in rec.get("groups", []))
    return out


def thresholds(doc: dict | None) -> dict[str, str]:
    return {shape: (e.get("physics") or {}).get("text") or f"ceiling unknown: {e.get('text')}"
            for shape, e in ((doc or {}).get("expected") or {}).items()}


def markdown(result: dict) -> str:
    lines = [f"# ncclbench health: fault catalog on one host ({result['ngpus']} GPU(s), {result['backend']})", "",
             f"* machine: {result['machine']}", f"* date: {result['date']}", f"* commit: {result['commit']}",
             f"* NCCL: {result.get('nccl')}", f"* command: `{result['command']}`",
             f"* caller's NCCL settings: {result.get('base_env') or 'none'}",
             f"* wall time: {result['wall_s']:.0f} s", "",
             "| scan | injected | exit | wall s | confirmed findings (cause) |", "|---|---|---|---|---|"]
    for s in result["scans"]:
        found = "; ".join(f"{f['component']} {f['detail']} {f['verdict']} ({', '.join(f.get('cause', [])) or '-'})"
                          for f in confirmed(s.get("doc"))) or "-"
        lines.append(f"| {s['name']} | {s.get('how') or '-'} | {s['exit_code']} | {s['wall_s']} | {found} |")
    lines += checks_table(result["checks"])
    first = next((s for s in result["scans"] if s.get("doc")), None)
    if first is not None:
        lines += ["", "Thresholds (the scan's bandwidth size) and where they come from:", ""]
        lines += [f"* {shape}: {text}" for shape, text in thresholds(first["doc"]).items()] or \
            ["* none: no ceiling was known for any group shape (no GPU facts)"]
    lines += scan_outputs(result["scans"])
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ngpus", type=int, required=True, help="GPUs of this host to scan (one rank each), >= 2")
    ap.add_argument("--out", required=True, help="directory for the results")
    ap.add_argument("--healthy", type=int, default=5, help="healthy scans (default 5)")
    ap.add_argument("--backend", choices=("nccl", "mpi"), default="nccl",
                    help="mpi: the CPU backend, a smoke test of this script (no fault acts there)")
    ap.add_argument("--scan-timeout", type=float, default=90.0, help="seconds each scan may take (default 90)")
    ap.add_argument("--budget", type=float, default=270.0,
                    help="seconds after which no scan starts (skipped scans are said so; default 270, so the run "
                         "ends within budget + scan timeout = 6 min)")
    ap.add_argument("--only", default="", help="comma-separated fault names to run (default: the catalog)")
    ap.add_argument("--scan-args", default="", help="more `ncclbench health` options for every scan")
    args = ap.parse_args(argv)
    if args.ngpus < 2:
        ap.error("--ngpus must be at least 2 (the intra-node phase needs two GPUs)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.monotonic()
    base = dict(os.environ)
    base["PYTHONPATH"] = str(ROOT / "src") + (os.pathsep + base["PYTHONPATH"] if base.get("PYTHONPATH") else "")
    for k in FAULT_ENV:
        base.pop(k, None)  # the healthy scans and every fault start from the same clean settings
    hog_device = args.ngpus - 1
    extra = args.scan_args.split()
    gpu = args.backend == "nccl"
    wanted = [f for f in CATALOG if not args.only or f.name in args.only.split(",")]
    scans: list[dict] = []
    checks: list[tuple[str, bool | str, str]] = []
    plan: list[tuple[str, Fault | None]] = [("healthy_1", None)] + [(f.name, f) for f in wanted] + \
        [(f"healthy_{i}", None) for i in range(2, args.healthy + 1)]
    for name, fault in plan:
        if time.monotonic() - t_start > args.budget:
            checks.append((f"{name} ran", False, f"skipped: the {args.budget:.0f} s budget was spent"))
            continue
        env = dict(base, **(fault.env if fault else {}))
        hog = None
        hog_summary = None
        if fault is not None and fault.hog:
            if not gpu:
                checks.append((f"{name}: convicted with its cause", "n/a", "the GPU hog needs a GPU"))
                continue
            try:
                hog = start_hog(hog_device, args.scan_timeout + 30, out, env)
            except SystemExit as exc:
                checks.append((f"{name}: convicted with its cause", False, f"no hog: {exc}"))
                continue
        try:
            scan = run_scan(name, out, args.backend, args.ngpus, extra, env, args.scan_timeout)
        finally:
            if hog is not None:
                hog_summary = stop_hog(hog, out)
        scan["how"] = fault.how if fault else "nothing"
        if hog_summary is not None:
            scan["hog"] = hog_summary
        scans.append(scan)
        if fault is None:
            ok, detail = check_healthy(scan)
            checks.append((f"{name}: no alarm", ok if gpu else "n/a", detail if gpu else
                           f"{detail} (one CPU host has no ceiling to judge its intra group: exit 9 expected)"))
        else:
            ok, detail = check_fault(fault, scan, hog_device)
            checks.append((f"{name}: convicted with its cause", ok if gpu else "n/a",
                           detail if gpu else f"{detail} (NCCL settings act on GPUs only)"))
    healthy = [c for c in checks if c[0].startswith("healthy") and c[0].endswith("no alarm")]
    false_alarms = sum(1 for c in healthy if c[1] is False)
    doc = next((s["doc"] for s in scans if s.get("doc")), None) or {}
    result = {"ngpus": args.ngpus, "backend": args.backend, "hog_device": hog_device, "machine": machine(),
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "commit": commit(), "nccl": doc.get("nccl"),
              "base_env": " ".join(f"{k}={v}" for k, v in sorted(base.items()) if k.startswith("NCCL_")),
              "command": " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv]),
              "wall_s": time.monotonic() - t_start, "false_alarms": f"{false_alarms} of {len(healthy)}",
              "checks": checks,
              "scans": [{**{k: v for k, v in s.items() if k != "doc"}, "doc": s["doc"], "figures": figures(s["doc"])}
                        for s in scans]}
    (out / "health_faults.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    (out / "health_faults.md").write_text(markdown(result))
    print(markdown(result).split("\n## ")[0])
    return 0 if all(ok is True or ok == "n/a" for _, ok, _ in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
