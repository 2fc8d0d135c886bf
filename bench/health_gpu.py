#!/usr/bin/env python3
"""`ncclbench health` on real GPUs: a healthy scan, then a scan with one GPU made slow by
ncclbench's own memory-bound kernel (bench/gpu_hog.py), side by side in one run.

    PYTHONPATH=src python bench/health_gpu.py --ngpus N --out DIR

* N >= 2: the hog runs on the last GPU; the check is that the second scan names
  exactly that GPU (component gpu, "gpu K", confirmed) and nothing else, and that
  the healthy scan names nothing.
* N = 1: one GPU has no fleet: the healthy scan is judged against its memory's
  ceiling where NVML gives it (exit 0), else says there is nothing to compare
  with (exit 9); three healthy scans save one baseline (--save-baseline
  to the same file: its median and the scans' own spread), a fourth healthy scan
  judged against it must raise no alarm, and the figure is reported with and
  without the hog (the hog's effect, measured), the hog scan judged against the
  baseline too - the way a lone GPU is judged at all.

Each scan is `python -m ncclbench health --backend nccl --nprocs N` (one process
per GPU, coordinated from the starting process), bounded by --scan-timeout; the
hog ends by itself and is stopped after the scan.  Out: DIR/health_gpu.json and
DIR/health_gpu.md (machine, command, commit, date, figures, verdicts), each
scan's JSON, stdout and stderr, the hog's log.  Exit 0 when the checks hold.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from provenance import commit  # noqa: E402  (bench/: the one answer to 'which commit is this tree')

from ncclbench.health.core.findings import finding_slot  # noqa: E402

SCAN_ARGS: list[str] = []  # --scan-args: options every scan gets (e.g. --bw-size 256M)


def scan_command(ngpus: int, json_path: Path, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "ncclbench", "health", "--backend", "nccl", "--nprocs", str(ngpus),
            "--json", str(json_path), "--no-store", "--round-timeout", "60", "--join-timeout", "60",
            *SCAN_ARGS, *extra]


def run_scan(name: str, out: Path, ngpus: int, extra: list[str], timeout_s: float, env: dict) -> dict:
    """One scan; its exit code, wall time, document (None when it wrote none) and the command."""
    js = out / f"{name}.json"
    return run_scan_command(name, out, scan_command(ngpus, js, extra), js, timeout_s, env, "health_gpu")


def run_scan_command(name: str, out: Path, cmd: list[str], js: Path, timeout_s: float, env: dict, tag: str) -> dict:
    """Run one `ncclbench health` command line (bench/health_faults.py runs its catalog through it
    too): keep its stdout/stderr under OUT, echo its table, read the JSON it wrote (None when none)."""
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env, cwd=ROOT)
        code, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        code = None
        stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        stderr = (exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")) + \
            f"\n[{tag}: killed after {timeout_s:.0f} s]\n"
    wall = time.monotonic() - t0
    (out / f"{name}.stdout").write_text(stdout)
    (out / f"{name}.stderr").write_text(stderr)
    doc = json.loads(js.read_text()) if js.exists() else None
    print(f"[{name}] exit {code} in {wall:.1f} s", file=sys.stderr, flush=True)
    sys.stderr.write(stdout)
    return {"name": name, "exit_code": code, "wall_s": round(wall, 2), "doc": doc, "stdout": stdout,
            "stderr_tail": stderr[-2000:], "command": " ".join(shlex.quote(c) for c in cmd)}


def local_figures(doc: dict | None) -> dict[int, float]:
    """GPU slot -> its lone-GPU figure (algbw GB/s) in the fleet round of the local phase."""
    if not doc:
        return {}
    for rec in doc.get("measurements", []):
        if rec.get("round") == "local r1":
            return {int(g["gpus"][0]): float(g["busbw"]) for g in rec["groups"] if g.get("busbw") is not None}
    return {}


def confirmed(doc: dict | None) -> list[tuple[str, str, str]]:
    if not doc:
        return []
    return [(f["component"], ",".join(f["hosts"]), str(f.get("detail"))) for f in doc.get("findings", [])
            if f.get("confirmed")]


def start_hog(device: int, seconds: float, out: Path, env: dict, ready_s: float = 30.0) -> subprocess.Popen:
    """The hog, once its first kernel has run (its "running" line on stderr, read by a thread)."""
    log_path = out / "gpu_hog.log"
    proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "gpu_hog.py"), "--device", str(device),
                             "--seconds", str(seconds)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    ready = threading.Event()

    def copy_log() -> None:
        assert proc.stderr is not None
        with open(log_path, "a") as log:
            for line in proc.stderr:
                log.write(line)
                log.flush()
                if line.startswith("gpu_hog: running"):
                    ready.set()

    threading.Thread(target=copy_log, daemon=True).start()
    deadline = time.monotonic() + ready_s
    while time.monotonic() < deadline and proc.poll() is None and not ready.is_set():
        ready.wait(0.2)
    if ready.is_set():
        return proc
    exited = proc.poll() is not None
    proc.kill()
    proc.wait()
    time.sleep(0.2)  # the log thread's last lines
    why = f"exited with {proc.returncode}" if exited else f"did not start in {ready_s:.0f} s"
    raise SystemExit(f"health_gpu: the hog {why}: "
                     f"{log_path.read_text().strip()[-500:] if log_path.exists() else ''}")


def stop_hog(proc: subprocess.Popen, out: Path) -> dict | None:
    """Stop the hog (SIGTERM, then SIGKILL after 20 s); its summary line from stdout."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    assert proc.stdout is not None
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    rest = proc.stdout.read()
    with open(out / "gpu_hog.log", "a") as log:
        log.write(rest or "")
    for line in reversed((rest or "").splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return None


def machine() -> str:
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.strip().splitlines()
    except (OSError, subprocess.TimeoutExpired):
        smi = []
    gpus = f"{len(smi)}x {smi[0]}" if smi else "GPU unknown (no nvidia-smi)"
    return f"{platform.node()}: {gpus}"


BASELINE_SCANS = 3  # N = 1: healthy scans saved to one baseline (health/outputs/baseline_file.py LONE_MIN_SCANS)


def judge(ngpus: int, hog_device: int, healthy: dict, slowed: dict,
          again: dict | None = None) -> list[tuple[str, bool, str]]:
    """(check, passed, detail) for the scans (`again`: N = 1's second healthy scan, judged
    against the first one's baseline)."""
    checks = []
    checks.append(("healthy scan ran", healthy["exit_code"] in (0, 8, 9) and healthy["doc"] is not None,
                   f"exit {healthy['exit_code']}"))
    checks.append(("slowed scan ran", slowed["exit_code"] in (0, 8, 9) and slowed["doc"] is not None,
                   f"exit {slowed['exit_code']}"))
    before, after = local_figures(healthy["doc"]), local_figures(slowed["doc"])
    checks.append(("every GPU measured in both scans", set(before) == set(after) == set(range(ngpus)),
                   f"healthy {sorted(before)}, slowed {sorted(after)}"))
    if hog_device in before and hog_device in after:
        ratio = after[hog_device] / before[hog_device]
        checks.append(("the hog slowed its GPU's figure by 10 % or more", ratio <= 0.9,
                       f"gpu {hog_device}: {before[hog_device]:.1f} -> {after[hog_device]:.1f} GB/s (x{ratio:.3f})"))
    if ngpus == 1:
        ceiling = ((healthy["doc"] or {}).get("expected") or {}).get("local:1x1", {}).get("ceiling")
        if ceiling is not None:  # judged against its memory (issue 22): healthy, exit 0
            checks.append(("healthy lone GPU: judged against its memory's ceiling, exit 0",
                           healthy["exit_code"] == 0 and "judged against its memory's ceiling" in healthy["stdout"],
                           f"exit {healthy['exit_code']}, ceiling {ceiling:.0f} GB/s"))
        else:  # no NVML memory facts: not judged (exit 9), and says so
            checks.append(("healthy lone GPU: exit 9, says there is nothing to compare with",
                           healthy["exit_code"] == 9 and "one GPU: nothing to compare" in healthy["stdout"],
                           f"exit {healthy['exit_code']}"))
        if again is not None:
            checks.append(("healthy again, against its own baseline: no alarm",
                           again["exit_code"] == 0 and "one GPU: judged against baseline" in again["stdout"],
                           f"exit {again['exit_code']}, {confirmed(again['doc'])}, figure "
                           f"{local_figures(again['doc']).get(0)} GB/s"))

    else:
        found = confirmed(healthy["doc"])
        checks.append(("healthy scan names nothing", healthy["exit_code"] == 0 and not found, f"{found}"))
        found = confirmed(slowed["doc"])
        exact = [f for f in (slowed["doc"] or {}).get("findings", []) if f.get("confirmed")
                 and finding_slot(f) == hog_device]
        checks.append((f"slowed scan names exactly gpu {hog_device} and nothing else",
                       slowed["exit_code"] == 8 and len(exact) == 1 and len(found) == 1, f"{found}"))
    return checks


def markdown(result: dict) -> str:
    lines = [f"# ncclbench health on GPUs: healthy scan vs one GPU slowed by bench/gpu_hog.py ({result['ngpus']} GPU(s))",
             "", f"* machine: {result['machine']}", f"* date: {result['date']}", f"* commit: {result['commit']}",
             f"* NCCL: {result.get('nccl')}", f"* command: `{result['command']}`",
             f"* hog: device {result['hog_device']}, {result.get('hog') or 'no summary'}", "",
             "| scan | exit | wall s | GPU figures (local algbw GB/s) | confirmed findings |", "|---|---|---|---|---|"]
    for s in result["scans"]:
        figs = ", ".join(f"gpu {k}: {v:.1f}" for k, v in sorted(s["local"].items())) or "-"
        lines.append(f"| {s['name']} | {s['exit_code']} | {s['wall_s']} | {figs} | {s['confirmed'] or '-'} |")
    lines += checks_table(result["checks"]) + scan_outputs(result["scans"])
    return "\n".join(lines) + "\n"


def checks_table(checks: list) -> list[str]:
    """The report's checks, one row each: PASS / FAIL, or the word a check gave instead (such as a
    skip's reason), so that every health bench report shows its checks alike."""
    lines = ["", "| check | result | detail |", "|---|---|---|"]
    for name, ok, detail in checks:
        lines.append(f"| {name} | {ok if isinstance(ok, str) else ('PASS' if ok else 'FAIL')} | {detail} |")
    return lines


def scan_outputs(scans: list[dict]) -> list[str]:
    """Each scan's command and its whole output, verbatim, after the report's tables."""
    lines: list[str] = []
    for s in scans:
        lines += ["", f"## {s['name']}: `{s['command']}`", "", "```", s["stdout"].rstrip(), "```"]
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ngpus", type=int, required=True, help="GPUs to scan (one rank each)")
    ap.add_argument("--out", required=True, help="directory for the results")
    ap.add_argument("--scan-timeout", type=float, default=50.0, help="seconds each scan may take (default 50)")
    ap.add_argument("--hog-device", type=int, default=None, help="GPU to slow (default: the last one scanned)")
    ap.add_argument("--scan-args", default="", help="more `ncclbench health` options for every scan")
    args = ap.parse_args(argv)
    SCAN_ARGS[:] = args.scan_args.split()
    if args.ngpus < 1:
        ap.error("--ngpus must be at least 1")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    hog_device = args.ngpus - 1 if args.hog_device is None else args.hog_device
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src") + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("NCCL_NVLS_ENABLE", "0")
    baseline = out / "baseline.json"
    one = args.ngpus == 1
    healthy = run_scan("healthy", out, args.ngpus, ["--save-baseline", str(baseline)] if one else [],
                       args.scan_timeout, env)
    again = None
    for i in range(2, BASELINE_SCANS + 1 if one and baseline.exists() else 0):  # the baseline's own spread
        run_scan(f"healthy_{i}", out, 1, ["--save-baseline", str(baseline)], args.scan_timeout, env)
    if one and baseline.exists():
        again = run_scan("healthy_vs_baseline", out, 1, ["--baseline", str(baseline)], args.scan_timeout, env)
    hog_summary: dict | str | None
    try:
        hog = start_hog(hog_device, args.scan_timeout + 60, out, env)
    except SystemExit as exc:  # no hog: the slowed scan is not run, the checks say so
        hog_summary = str(exc)
        slowed = {"name": "slowed (not run: no hog)", "exit_code": None, "wall_s": 0.0, "doc": None, "stdout": "",
                  "stderr_tail": "", "command": "-"}
    else:
        try:
            extra = ["--baseline", str(baseline)] if one and baseline.exists() else []
            slowed = run_scan("slowed", out, args.ngpus, extra, args.scan_timeout, env)
        finally:
            hog_summary = stop_hog(hog, out)
    checks = judge(args.ngpus, hog_device, healthy, slowed, again)
    doc = healthy["doc"] or slowed["doc"] or {}
    result = {"ngpus": args.ngpus, "hog_device": hog_device, "hog": hog_summary, "machine": machine(),
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "commit": commit(), "nccl": doc.get("nccl"),
              "command": " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv]),
              "checks": checks, "scans": []}
    for s in (healthy, again, slowed):
        if s is None:
            continue
        figs = local_figures(s["doc"])
        result["scans"].append({"name": s["name"], "exit_code": s["exit_code"], "wall_s": s["wall_s"],
                                "command": s["command"], "local": figs, "confirmed": confirmed(s["doc"]),
                                "local_median": statistics.median(figs.values()) if figs else None,
                                "stdout": s["stdout"], "stderr_tail": s["stderr_tail"]})
    (out / "health_gpu.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "health_gpu.md").write_text(markdown(result))
    print(markdown(result))
    return 0 if all(ok for _, ok, _ in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
