"""Does explain call a healthy run "as expected" whatever size it stops at, and still catch the
injected causes (issue 30)?  2 GPUs are enough; any count works.

Steps, most important first; each run starts only while the budget (`--budget-s`) leaves it its
estimated time, and a step or run not started is recorded as "not run" with why:

    healthy_full   each of the 11 collectives once, -b 1M -e 8G -f 2 (stored), then judged again with
                   its rows cut at -e 32M, 128M, 1G and 8G (the stored run's own facts, rows truncated)
    healthy_128M   a real short run per collective, -b 1M -e 128M -f 2 (the issue's shape)
    causes         all_reduce -b 1M -e 1G -f 4 with NCCL_P2P_DISABLE=1; + NCCL_SHM_DISABLE=1;
                   NCCL_MAX_NCHANNELS=1 and 2; a busy GPU (bench/gpu_hog.py on the last GPU);
                   NCCL_PROTO=Simple and LL forced: each must be below expected or trapped
    nccl_tests     only with --nccl-tests DIR (a prebuilt nccl-tests build directory, never built here):
                   each collective -b 1M -e 8G -f 2 with NCCL_DEBUG=INFO and without, imported and
                   explained (and cut at the same -e values); then the causes through nccl-tests
    healthy_more   real short runs per collective at -e 32M and 1G

    python bench/explain_curve_gpu.py OUT --ngpus 2 --budget-s 300 [--nccl-tests DIR]
    python bench/explain_curve_gpu.py OUT --cpu --budget-s 60      # control flow on the CPU backend

Healthy verdicts are counted per label ("below expected" must be 0); a cause counts as caught when
the verdict is "below expected" or a trap named a cause.  Writes OUT/explain_curve_gpu.json and
OUT/explain_curve_gpu.md (machine, GPU count, NCCL version, command, commit, date) after every run,
so a cut loses nothing measured, and OUT/runs/<name>.txt (each run's output).  The caller sets
NCCL_NVLS_ENABLE and the like; this script sets only the NCCL_* variable a cause injects.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import select
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "src"))
from provenance import commit  # noqa: E402  (bench/: the one answer to 'which commit is this tree')

COLLECTIVES = ("all_reduce", "all_gather", "broadcast", "reduce_scatter", "reduce", "alltoall", "alltoallv",
               "scatter", "gather", "sendrecv", "hypercube")
GiB, MiB = 2**30, 2**20
CUTS = {"32M": 32 * MiB, "128M": 128 * MiB, "1G": GiB, "8G": 8 * GiB}
# The CPU backend cannot move gigabytes on a 2-core host: the same shapes, 1024x smaller.
CPU_SCALE = 1024
CAUSES: dict[str, dict[str, str]] = {
    "p2p_off": {"NCCL_P2P_DISABLE": "1"},
    "p2p_shm_off": {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"},
    "channels_1": {"NCCL_MAX_NCHANNELS": "1"},
    "channels_2": {"NCCL_MAX_NCHANNELS": "2"},
    "gpu_busy": {},
    "proto_simple": {"NCCL_PROTO": "Simple"},
    "proto_ll": {"NCCL_PROTO": "LL"},
}
# Estimated seconds per run, from the 2-GPU parity visit (bench/results/gpu-h100x4-2026-11-26/
# parity-2gpu.md: 3.1-3.8 s a sweep 8 B-8 GiB -f 4 -n 10 per tool) plus the explain probe and a
# second Python start; a run starts only with this much budget left.
EST_S = {"full": 8.0, "short": 5.0, "cause": 10.0, "nccl_tests": 6.0}


@dataclass
class Bench:
    out: Path
    ngpus: int
    cpu: bool
    budget_s: float
    nccl_tests: Path | None
    t0: float = field(default_factory=time.monotonic)
    doc: dict[str, Any] = field(default_factory=dict)

    def left(self) -> float:
        return self.budget_s - (time.monotonic() - self.t0)

    def size(self, text: str) -> str:
        """A size argument, scaled down on the CPU backend."""
        if not self.cpu:
            return text
        n = parse_size(text) // CPU_SCALE
        return str(max(n, 1024))

    def cut(self, nbytes: int) -> int:
        return nbytes // CPU_SCALE if self.cpu else nbytes


def parse_size(text: str) -> int:
    mult = {"K": 2**10, "M": MiB, "G": GiB}
    return int(text[:-1]) * mult[text[-1]] if text[-1] in mult else int(text)


def rejudge(ref: str, db: Path | None, max_bytes: int | None, collective: str | None = None) -> dict[str, Any]:
    """The run's verdict and causes, judged again from what was kept of it (a stored run or an
    nccl-tests log), its rows cut at `max_bytes` as if the sweep had stopped there."""
    from ncclbench.commands._runs import RunRefs
    from ncclbench.explain.run_explain import explain_run
    from ncclbench.explain.stored import run_facts

    args = argparse.Namespace(db=str(db) if db else None, collective=collective)
    with RunRefs(args) as refs:
        run = refs.get(ref)
    if max_bytes is not None:
        run.rows = [r for r in run.rows if r.size <= max_bytes]
    ex = explain_run(run_facts(run))
    j = ex.judgement
    return {"verdict": j.verdict.label, "text": j.verdict.text, "causes": j.traps.causes(),
            "plateau": j.plateau.busbw, "lines": [ln for ln in ex.lines if "Plateau" in ln or "expected" in ln]}


def ncclbench_cmd(b: Bench, coll: str, lo: str, hi: str, f: int, json_path: Path) -> list[str]:
    cmd = [sys.executable, "-m", "ncclbench", f"{coll}_perf", "-b", b.size(lo), "-e", b.size(hi), "-f", str(f),
           "-n", "10", "-w", "2", "--nprocs", str(b.ngpus), "-J", str(json_path)]
    return cmd + (["--backend", "mpi"] if b.cpu else [])


def run_proc(b: Bench, name: str, cmd: list[str], extra_env: dict[str, str], timeout: float) -> dict[str, Any]:
    """One process, its output kept in OUT/runs/NAME.txt; never raises on a failed or hung run."""
    env = {**os.environ, **extra_env, "PYTHONPATH": str(ROOT / "src")}
    runs = b.out / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    t = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)
        rc, text = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        rc, text = 124, f"{e.stdout or ''}{e.stderr or ''}\n[cut after {timeout:.0f} s]"
    (runs / f"{name}.txt").write_text(f"$ {' '.join(cmd)}\n# env {extra_env}\n{text}")
    return {"name": name, "command": " ".join(cmd), "env": extra_env, "rc": rc, "wall_s": round(time.monotonic() - t, 2)}


def live_run(b: Bench, name: str, coll: str, lo: str, hi: str, f: int, extra_env: dict[str, str],
             est: float) -> dict[str, Any] | None:
    """A ncclbench run stored in its own store (OUT/db/NAME.sqlite); None when the budget is spent."""
    if b.left() < est:
        not_run(b, name, f"budget: {b.left():.0f} s left, the run needs ~{est:.0f} s")
        return None
    db = b.out / "db" / f"{name}.sqlite"
    db.parent.mkdir(parents=True, exist_ok=True)
    json_path = b.out / "runs" / f"{name}.json"
    (b.out / "runs").mkdir(parents=True, exist_ok=True)
    res = run_proc(b, name, ncclbench_cmd(b, coll, lo, hi, f, json_path),
                   {**extra_env, "NCCLBENCH_DB": str(db)}, timeout=max(10.0, min(120.0, b.left())))
    res.update(collective=coll, db=str(db))
    try:
        doc = json.loads(json_path.read_text())
        ex = doc.get("ncclbench_explain") or {}
        res["verdict"] = ((ex.get("judgement") or {}).get("verdict") or {}).get("label")
        res["causes"] = ex.get("causes", [])
        res["nccl_version"] = doc.get("nccl_version")
        res["lines"] = [ln for ln in ex.get("lines", []) if "Plateau" in ln or "expected" in ln]
    except (OSError, ValueError) as e:
        res["error"] = f"no JSON from the run: {e}"
    return res


def not_run(b: Bench, name: str, why: str) -> None:
    b.doc.setdefault("not_run", []).append({"name": name, "why": why})


def record(b: Bench, kind: str, res: dict[str, Any] | None) -> None:
    if res is not None:
        b.doc.setdefault(kind, []).append(res)
        print(f"{kind} {res['name']}: rc {res['rc']}, verdict {res.get('verdict')}, causes {res.get('causes')}",
              flush=True)
    write(b)


def add_cuts(b: Bench, res: dict[str, Any], ref: str, db: Path | None, collective: str | None = None) -> None:
    """The run judged again at each -e of CUTS (its own rows up to there)."""
    cuts = {}
    for label, nbytes in CUTS.items():
        try:
            cuts[label] = rejudge(ref, db, b.cut(nbytes), collective)
        except Exception as e:  # noqa: BLE001  (one bad cut is recorded, the rest still run)
            cuts[label] = {"verdict": "error", "text": f"{type(e).__name__}: {e}", "causes": []}
    res["cuts"] = cuts


def step_healthy_full(b: Bench) -> None:
    for coll in COLLECTIVES:
        res = live_run(b, f"full-{coll}", coll, "1M", "8G", 2, {}, EST_S["full"])
        if res is not None and res["rc"] == 0:
            add_cuts(b, res, "latest", Path(res["db"]))
        record(b, "healthy", res)


def step_healthy_short(b: Bench, hi: str) -> None:
    for coll in COLLECTIVES:
        record(b, "healthy", live_run(b, f"short{hi}-{coll}", coll, "1M", hi, 2, {}, EST_S["short"]))


def start_hog(b: Bench) -> subprocess.Popen[str] | None:
    """bench/gpu_hog.py on the last GPU, waited for until its first kernel ran."""
    cmd = [sys.executable, str(ROOT / "bench" / "gpu_hog.py"), "--device", str(b.ngpus - 1), "--seconds", "60"]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert p.stderr is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        ready, _, _ = select.select([p.stderr], [], [], max(0.0, deadline - time.monotonic()))
        line = p.stderr.readline() if ready else ""
        if "running on device" in line:
            return p
        if not line and p.poll() is not None:
            return None
    p.terminate()
    p.wait(timeout=30)
    return None


def step_causes(b: Bench) -> None:
    for name, extra in CAUSES.items():
        hog = None
        if name == "gpu_busy":
            if b.cpu:
                not_run(b, f"cause-{name}", "the CPU backend has no GPU to keep busy")
                continue
            if b.left() < EST_S["cause"]:
                not_run(b, f"cause-{name}", f"budget: {b.left():.0f} s left")
                continue
            hog = start_hog(b)
            if hog is None:
                not_run(b, f"cause-{name}", "bench/gpu_hog.py did not start")
                continue
        try:
            res = live_run(b, f"cause-{name}", "all_reduce", "1M", "1G", 4, extra, EST_S["cause"])
        finally:
            if hog is not None:
                hog.terminate()
                hog.wait(timeout=30)
        if res is not None:
            res["caught"] = caught(b, res)
        record(b, "causes", res)


def caught(b: Bench, res: dict[str, Any]) -> bool | None:
    """Below expected or trapped; None (not judged) on the CPU backend, which has no NCCL to inject into."""
    if b.cpu and not res["name"].startswith("nt-"):
        return None
    return res.get("verdict") == "below expected" or bool(res.get("causes"))


def nt_run(b: Bench, name: str, coll: str, extra_env: dict[str, str], hi: str, f: int) -> dict[str, Any] | None:
    """One nccl-tests run (-g NGPUS, one process), then imported and explained like a user's log."""
    assert b.nccl_tests is not None
    if b.left() < EST_S["nccl_tests"]:
        not_run(b, name, f"budget: {b.left():.0f} s left")
        return None
    binary = b.nccl_tests / f"{coll}_perf"
    if not binary.exists():
        not_run(b, name, f"{binary} missing")
        return None
    cmd = [str(binary), "-b", "1M", "-e", hi, "-f", str(f), "-g", str(b.ngpus), "-n", "10", "-w", "2"]
    res = run_proc(b, name, cmd, extra_env, timeout=max(10.0, min(120.0, b.left())))
    res["collective"] = coll
    log = b.out / "runs" / f"{name}.txt"
    try:
        got = rejudge(str(log), None, None, coll)
        res.update(verdict=got["verdict"], causes=got["causes"], lines=got["lines"])
    except Exception as e:  # noqa: BLE001  (the import's failure is the finding, recorded)
        res["error"] = f"{type(e).__name__}: {e}"
    if hi == "8G" and "error" not in res:
        add_cuts(b, res, str(log), None, coll)
    return res


def step_nccl_tests(b: Bench) -> None:
    if b.nccl_tests is None:
        not_run(b, "nccl_tests", "no --nccl-tests DIR given (a prebuilt nccl-tests build directory)")
        return
    for debug in ("INFO", ""):
        for coll in COLLECTIVES:
            env = {"NCCL_DEBUG": "INFO"} if debug else {}
            record(b, "nccl_tests", nt_run(b, f"nt-{debug or 'plain'}-{coll}", coll, env, "8G", 2))
    for name, extra in CAUSES.items():
        if name == "gpu_busy":
            continue
        res = nt_run(b, f"nt-cause-{name}", "all_reduce", {**extra, "NCCL_DEBUG": "INFO"}, "1G", 4)
        if res is not None:
            res["caught"] = caught(b, res)
        record(b, "nccl_tests_causes", res)


def counts(b: Bench) -> dict[str, Any]:
    """Verdict labels over every healthy judgement (live runs, their cuts, nccl-tests logs and cuts)."""
    labels: dict[str, int] = {}
    below: list[str] = []
    for kind in ("healthy", "nccl_tests"):
        for r in b.doc.get(kind, []):
            judged = [(r["name"], r.get("verdict"))] + [(f"{r['name']}@{k}", c.get("verdict"))
                                                         for k, c in (r.get("cuts") or {}).items()]
            for name, v in judged:
                labels[str(v)] = labels.get(str(v), 0) + 1
                if v == "below expected":
                    below.append(name)
    runs = [r for k in ("causes", "nccl_tests_causes") for r in b.doc.get(k, [])]
    return {"healthy_labels": labels, "healthy_below": below,
            "causes_caught": [r["name"] for r in runs if r.get("caught") is True],
            "causes_missed": [r["name"] for r in runs if r.get("caught") is False],
            "causes_not_judged": [r["name"] for r in runs if r.get("caught") is None]}


def nccl_version(b: Bench) -> str | None:
    return next((r.get("nccl_version") for r in b.doc.get("healthy", []) if r.get("nccl_version")), None)


def machine() -> str:
    try:
        gpus = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        gpus = ""
    return f"{platform.node()} ({platform.platform()}); {gpus or 'no nvidia-smi'}"


def write(b: Bench) -> None:
    b.doc["summary"] = counts(b)
    b.doc["meta"]["nccl_version"] = nccl_version(b)
    b.doc["meta"]["elapsed_s"] = round(time.monotonic() - b.t0, 1)
    (b.out / "explain_curve_gpu.json").write_text(json.dumps(b.doc, indent=1, default=str) + "\n")
    (b.out / "explain_curve_gpu.md").write_text(markdown(b.doc))


def _row(r: dict[str, Any]) -> str:
    cuts = " ".join(f"{k}:{c.get('verdict')}" for k, c in (r.get("cuts") or {}).items()) or "-"
    env = " ".join(f"{k}={v}" for k, v in r.get("env", {}).items() if k != "NCCLBENCH_DB") or "-"
    return (f"| {r['name']} | {env} | {r['rc']} | {r.get('verdict')} | {cuts} | "
            f"{', '.join(r.get('causes') or []) or '-'} | {r.get('caught', '-')} |")


def markdown(doc: dict[str, Any]) -> str:
    m, s = doc["meta"], doc["summary"]
    md = [f"# Explain's expected curve on {m['ngpus']} GPU(s), {m['date']}", "",
          f"Machine: {m['machine']}; NCCL {m.get('nccl_version')}; commit {m['commit']}; "
          f"{'CPU backend (control flow only)' if m['cpu'] else 'NCCL backend'}", "", f"`{m['command']}`", "",
          f"Healthy verdicts: {s['healthy_labels']}; below expected: {len(s['healthy_below'])} "
          f"{s['healthy_below'] or ''}", f"Causes caught: {len(s['causes_caught'])}, missed: {s['causes_missed'] or 'none'}",
          "", "| run | env | rc | verdict | cuts (-e: verdict) | causes | caught |", "|---|---|---|---|---|---|---|"]
    for kind in ("healthy", "causes", "nccl_tests", "nccl_tests_causes"):
        md += [_row(r) for r in doc.get(kind, [])]
    md += ["", "Not run: " + ("; ".join(f"{n['name']} ({n['why']})" for n in doc.get("not_run", [])) or "none")]
    return "\n".join(md) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--ngpus", type=int, default=2)
    ap.add_argument("--budget-s", type=float, default=300.0)
    ap.add_argument("--cpu", action="store_true", help="CPU backend, sizes 1024x smaller: the control flow only")
    ap.add_argument("--nccl-tests", type=Path, default=None, help="a prebuilt nccl-tests build directory (*_perf)")
    ap.add_argument("--steps", default="healthy_full,healthy_128M,causes,nccl_tests,healthy_more")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    b = Bench(args.out, args.ngpus, args.cpu, args.budget_s, args.nccl_tests)
    b.doc["meta"] = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                     "machine": machine(), "ngpus": args.ngpus, "commit": commit(), "cpu": args.cpu,
                     "budget_s": args.budget_s,
                     "command": " ".join(["bench/explain_curve_gpu.py", *(argv if argv is not None else sys.argv[1:])])}
    steps = {"healthy_full": lambda: step_healthy_full(b), "healthy_128M": lambda: step_healthy_short(b, "128M"),
             "causes": lambda: step_causes(b), "nccl_tests": lambda: step_nccl_tests(b),
             "healthy_more": lambda: (step_healthy_short(b, "32M"), step_healthy_short(b, "1G"))}
    for name in args.steps.split(","):
        if name not in steps:
            print(f"explain_curve_gpu.py: unknown step {name!r} (known: {', '.join(steps)})", file=sys.stderr)
            return 2
        if b.left() <= 0:
            not_run(b, name, "budget spent before the step")
            continue
        steps[name]()
    write(b)
    print(markdown(b.doc))
    s = b.doc["summary"]
    return 1 if s["healthy_below"] or s["causes_missed"] else 0


if __name__ == "__main__":
    sys.exit(main())
