#!/usr/bin/env python3
"""Issue 25's multi-host figures on one 4-GPU machine, through fake hosts (bench/fakehosts.py).

    python3 bench/multihost_gpu.py OUT [--nccl-tests DIR] [--iproute2 DIR] [--budget-s 470]

Steps (each writes into OUT/<step>/ and appends its result to OUT/summary.md at once, so a
later step's failure or the device's time running out loses nothing already measured; run in
the order 1, 3, 2, 1b, each started only while --budget-s leaves it time):

1. explain: all_reduce 16 B - 256 MiB across 2 fake hosts x 2 GPUs (env launch, sockets over the veths):
   the banner's topology of both hosts, per-size algorithm/protocol/channels, the transport,
   a verdict or its reason; `ncclbench explain latest` on the stored run (the second route).
   With mpirun: the same run under mpirun's fake hosts (UTS + NCCL_HOSTID), and with
   --nccl-tests the nccl-tests binary beside it and `ncclbench explain` on its log.
2. health on 8 fake hosts x 1 GPU, two fake hosts per GPU (fleet statistics need >= 3 groups
   of a shape per round: 4 host pairs; NCCL allows two ranks on one GPU when their hosts
   differ; the pairs phase only, as a one-GPU figure would measure the sharing), every link shaped to
   BASE so the network, not the CPUs, sets the pace (sockets on one box are CPU-bound: judged
   against the rate set here):
   a. 5 healthy scans: false alarms counted (any confirmed finding, exit 8);
   b. node2's link at half of BASE: node2's NIC must be named, no other host;
   c. the link node1<->node3 at half (not a round-1 pair: found only because the default schedule
      on <= 16 hosts pairs every host with every other, 7 + 1 rounds here): that link named, no
      host drained;
   d. node2's rank killed mid-scan, e. node2's rank stopped (SIGSTOP) mid-scan: named, the
      scan's end bounded.
3. tune all_reduce across 2 fake hosts x 2 GPUs; a band won is re-checked by alternating
   plain runs with and without its settings (tune --verify refuses under a launcher).

NVLink SHARP is off in every process (fakehosts.NVLS_OFF).  Result store: OUT/store.sqlite.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "src"))

import fakehosts  # noqa: E402
import provenance  # noqa: E402

NB = [sys.executable, "-m", "ncclbench"]
BASE_RATE, HALF_RATE = "4gbit", "2gbit"
# pairs only: two fake hosts share each GPU here, and a local (one-GPU) figure would measure that sharing
HEALTH = ["health", "--backend", "nccl", "--phases", "pairs", "--bw-size", "32M", "--lat-size", "8",
          "-n", "10", "-w", "2", "--cycles", "3", "--round-timeout", "30", "--join-timeout", "60", "--no-store"]


CPU_DRY = False  # --cpu-dry: no GPU check (on a CPU machine every step runs and records its failure)


def _ngpus() -> int | None:
    return None if CPU_DRY else fakehosts.gpu_count()


class Run:
    """The session: output folder, summary, budget."""

    def __init__(self, out: Path, budget_s: float):
        self.out, self.budget_s, self.t0 = out, budget_s, time.monotonic()
        self.summary = out / "summary.md"
        self.results: dict[str, dict] = {}
        out.mkdir(parents=True, exist_ok=True)

    def left(self) -> float:
        return self.budget_s - (time.monotonic() - self.t0)

    def write(self, text: str) -> None:
        with open(self.summary, "a") as f:
            f.write(text.rstrip() + "\n\n")
        print(text, flush=True)

    def step(self, name: str, need_s: float, body: Callable[[Path], dict]) -> None:
        """Run one step into OUT/name; its result (or why not) goes to the summary at once."""
        d = self.out / name
        d.mkdir(parents=True, exist_ok=True)
        if self.left() < need_s:
            res = {"status": "not run", "why": f"{self.left():.0f} s of the budget left, the step needs ~{need_s:.0f}"}
        else:
            t = time.monotonic()
            try:
                res = body(d)
            except Exception as exc:
                (d / "error.txt").write_text(traceback.format_exc())
                res = {"status": "failed", "why": f"{type(exc).__name__}: {exc}"}
            res["wall_s"] = round(time.monotonic() - t, 1)
        self.results[name] = res
        (self.out / "results.json").write_text(json.dumps(self.results, indent=1))
        self.write(f"## {name}\n" + "\n".join(f"- {k}: {v}" for k, v in res.items()))


def _env(out: Path) -> dict[str, str]:
    return {"PYTHONPATH": str(ROOT / "src"), "NCCLBENCH_DB": str(out / "store.sqlite"), "PYTHONUNBUFFERED": "1"}


def _lines(text: str, *marks: str) -> list[str]:
    return [ln for ln in text.splitlines() if any(m in ln for m in marks)]


def _after_avg(text: str) -> list[str]:
    lines = text.splitlines()
    for i, ln in enumerate(lines):
        if ln.startswith("# Avg bus bandwidth"):
            return lines[i:]
    return []


def _choice_lines(text: str) -> list[str]:
    """Explain's per-size algorithm/protocol lines (those naming Ring, Tree, ... after the table)."""
    return [ln for ln in _after_avg(text) if any(a in ln for a in ("Ring", "Tree", "NVLS", "CollNet", "PAT"))]


# -- 1. explain --------------------------------------------------------------------------------------

def step_explain(run: Run, tools: fakehosts.Tools, nccl_tests: str | None) -> Callable[[Path], dict]:
    # to 256 MiB: below 64 MiB the plateau is latency-bound and not judged (explain/plateau_verdict.py); sockets
    # move ~4 GB/s, so 256 MiB costs ~0.1 s an op (13 sizes, factor 4 from 16 B)
    args = ["all_reduce", "--backend", "nccl", "-b", "16", "-e", "256M", "-f", "4", "-n", "10", "-w", "3"]

    def body(d: Path) -> dict:
        with fakehosts.FakeHosts(2, 2, tools, ngpus=_ngpus()) as fh:
            if len(fh.hosts) < 2:
                return {"status": "not run", "why": f"{len(fh.hosts)} fake host(s) made"}
            job = fh.start([*NB, *args, "-J", str(d / "run.json")], d, "env", extra_env=_env(run.out))
            codes = job.wait(150)
            out = job.stdout(0)
            # the second route: with the user's own NCCL_DEBUG (to a file) the per-call choice comes from
            # ncclbench's profiler plugin where it is built (docs/explain.md), the log file read as well
            job2 = fh.start([*NB, *args, "--no-store"], d, "env-userlog",
                            extra_env={**_env(run.out), "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV,TUNING",
                                       "NCCL_DEBUG_FILE": str(d / "nccl.%h.%p.log")})
            codes2 = job2.wait(150)
            out2 = job2.stdout(0)
        explained = subprocess.run([*NB, "explain", "latest"], env={**os.environ, **_env(run.out)},
                                   capture_output=True, text=True, timeout=60)
        (d / "explain-latest.txt").write_text(explained.stdout + explained.stderr)
        res = {"status": "ok" if codes == [0] * len(codes) else "failed", "exit codes": codes,
               "topology": _lines(out, "# Topology", "NICs:"),
               "explain": _after_avg(out)[:30],
               "socket transport named": "Socket" in out or "socket" in out,
               "stored route": explained.stdout.splitlines()[:25],
               "second run (NCCL_DEBUG to a file) exit codes": codes2,
               "second run explain": _after_avg(out2)[:30]}
        a, b = (_choice_lines(x) for x in (out, out2))
        res["per-size choice, both runs"] = "agree" if a == b and a else f"differ or missing: {a} / {b}"
        return res

    return body


def step_mpirun(run: Run, nccl_tests: str | None) -> Callable[[Path], dict]:
    """The mpirun route (UTS + NCCL_HOSTID fake hosts): ncclbench, and nccl-tests when given."""

    def body(d: Path) -> dict:
        mpirun = fakehosts.shutil.which("mpirun") or fakehosts.shutil.which(
            "mpirun", path=str(Path(sys.executable).parent))
        if mpirun is None:
            return {"status": "not run", "why": "no mpirun here"}
        fh = fakehosts.FakeHosts(2, 2, None, ngpus=_ngpus(), netns=False)
        fh.up()
        env = {**os.environ, **_env(run.out)}
        res: dict = {}
        args = ["-b", "8", "-e", "64M", "-f", "8", "-n", "10", "-w", "3"]
        argv = fh.mpirun_argv([*NB, "all_reduce", *args], d, mpirun,
                              extra_env={"PYTHONPATH": _env(run.out)["PYTHONPATH"],
                                         "NCCLBENCH_DB": _env(run.out)["NCCLBENCH_DB"]})
        p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=150)
        (d / "ncclbench.txt").write_text(p.stdout + p.stderr)
        res["ncclbench exit"] = p.returncode
        res["ncclbench topology"] = _lines(p.stdout, "# Topology", "NICs:")
        res["ncclbench explain"] = _after_avg(p.stdout)[:20]
        if nccl_tests:
            exe = str(Path(nccl_tests) / "all_reduce_perf")
            argv = fh.mpirun_argv([exe, *args], d, mpirun, extra_env={"NCCL_DEBUG": "INFO",
                                                                     "NCCL_DEBUG_SUBSYS": "INIT,ENV,GRAPH,TUNING"})
            q = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=150)
            log = d / "nccl-tests.log"
            log.write_text(q.stdout + q.stderr)
            e = subprocess.run([*NB, "explain", str(log)], env=env, capture_output=True, text=True, timeout=60)
            (d / "nccl-tests-explained.txt").write_text(e.stdout + e.stderr)
            res["nccl-tests exit"] = q.returncode
            res["nccl-tests explained"] = e.stdout.splitlines()[:25]
        res["status"] = "ok" if p.returncode == 0 else "failed"
        return res

    return body


# -- 2. health ---------------------------------------------------------------------------------------

def as_expected(doc: dict, drain: list[str] | None, expect: tuple[str, set[str], list[str]]) -> bool:
    """Exactly the expected component on the expected hosts confirmed (at least once), nothing
    else confirmed, and the drain list as expected."""
    comp, hosts, want_drain = expect
    found = [(f["component"], set(f["hosts"])) for f in doc["findings"] if f["confirmed"]]
    return bool(found) and all(c == comp and h == hosts for c, h in found) and sorted(drain or []) == sorted(want_drain)


def _health(run: Run, fh: fakehosts.FakeHosts, d: Path, name: str,
            fault: tuple[str, int] | None = None, bound_s: float = 150,
            expect: tuple[str, set[str], list[str]] | None = None) -> dict:
    """One scan over the fake hosts; `fault` = (signal name, rank) sent once 'pairs r1' is done;
    `expect` = (component, hosts, drain): exactly that confirmed, and that drain list."""
    js, drain = d / f"{name}.json", d / f"{name}.drain"
    # the default schedule on 8 hosts pairs every host with every other (7 rounds + 1 confirming suspect
    # links, docs/health.md), so a slow link between any two hosts is measured and a fault sent after the
    # first round lands mid-scan
    job = fh.start([*NB, *HEALTH, "--json", str(js), "--drain", str(drain)], d, name,
                   extra_env={**_env(run.out), "NCCLBENCH_HEALTH_PROGRESS": "1"})
    sent_at = None
    if fault is not None:
        sig, rank = fault
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and "pairs r1" not in job.stderr(0):
            if job.procs[0].poll() is not None:
                break
            time.sleep(0.2)
        if job.procs[rank].poll() is not None or "pairs r1" not in job.stderr(0):
            job.kill()
            return {"status": "failed", "why": f"the scan ended or never finished 'pairs r1' before {sig} could be "
                    "sent", "exit codes": [p.poll() for p in job.procs], "stderr": job.stderr(0).splitlines()[-5:]}
        try:
            os.kill(job.procs[rank].pid, getattr(signal, sig))
            sent_at = time.monotonic()
        except OSError as exc:
            return {"status": "failed", "why": f"could not send {sig} to rank {rank}: {exc}"}
    res: dict = {}
    if fault is None:
        codes = job.wait(bound_s)
    else:  # the verdict is rank 0's (its coordinator): its end is the scan's; a stopped rank never ends
        try:
            job.procs[0].wait(bound_s)
        except subprocess.TimeoutExpired:
            pass
        if sent_at is not None:
            res[f"rank 0 ended after {fault[0]} (s)"] = round(time.monotonic() - sent_at, 1)
        grace = time.monotonic() + 20
        for q in job.procs:
            try:
                q.wait(max(0.1, grace - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        codes = [q.poll() for q in job.procs]
        res["still running 20 s after rank 0 (then killed)"] = [r for r, c in enumerate(codes) if c is None]
        job.kill()
    res.update({"rank 0 exit": codes[0], "exit codes": codes})
    try:
        doc = json.loads(js.read_text())
    except (OSError, ValueError) as exc:
        res["status"] = "failed"
        res["json"] = f"none ({exc})"
        res["stderr"] = job.stderr(0).splitlines()[-5:]
        return res
    res["status"] = "ok"
    res["confirmed"] = sorted(f"{f['component']} {','.join(f['hosts'])} {f['detail']}".strip()
                              for f in doc["findings"] if f["confirmed"])
    res["drain"] = [h for ln in drain.read_text().splitlines() if not ln.startswith("#") for h in ln.split()] \
        if drain.exists() else None  # "#" lines name hosts not judged (not drained)
    if expect is not None:
        res["as expected"] = as_expected(doc, res["drain"], expect)
        res["expected"] = f"only '{expect[0]}' on {sorted(expect[1])} confirmed, drain {expect[2]}"
    res["host_status"] = doc.get("host_status")
    res["verdict lines"] = [ln for ln in job.stdout(0).splitlines() if ln.startswith("#")][-12:]
    return res


def step_health(run: Run, tools: fakehosts.Tools) -> Callable[[Path], dict]:
    def body(d: Path) -> dict:
        out: dict = {}
        with fakehosts.FakeHosts(8, 1, tools, ngpus=_ngpus(), share_gpus=True) as fh:
            if len(fh.hosts) < 6:
                return {"status": "not run", "why": f"{len(fh.hosts)} fake host(s) made; fleet statistics need 6+"}
            out["fake hosts"] = ", ".join(f"{h.name}: GPU {h.gpus[0]}" for h in fh.hosts)
            shaped = fh.shape(BASE_RATE)
            # The faults first, then the healthy scans: each scan measures every host pair (~30 s on 8
            # hosts), and a device visit cut short should still have shown what a fault scan names.
            out["links"] = f"every link {BASE_RATE}" if shaped else f"unshaped ({'; '.join(fh.unshaped)})"
            if run.left() > 60 and fh.shape(BASE_RATE, slow_host=(2, HALF_RATE)):
                out["slow host node2 (half)"] = _health(run, fh, d, "slow-node2",
                                                        expect=("node nic", {"node2"}, ["node2"]))
            if run.left() > 60 and fh.shape(BASE_RATE, slow_link=(1, 3, HALF_RATE)):
                out["slow link node1-node3 (half)"] = _health(run, fh, d, "slow-link13",
                                                              expect=("link", {"node1", "node3"}, []))
            fh.shape(BASE_RATE)
            alarms = []
            for i in range(5):
                if run.left() < 60:
                    out[f"healthy {i + 1}"] = "not run: budget"
                    continue
                r = _health(run, fh, d, f"healthy{i + 1}")
                out[f"healthy {i + 1}"] = {k: r.get(k) for k in ("status", "rank 0 exit", "confirmed", "host_status",
                                                                 "stderr")}
                if r["status"] == "ok":  # a scan that gave no verdict is neither a false alarm nor a pass
                    alarms.append(bool(r.get("confirmed")) or r["rank 0 exit"] == 8)
            out["false alarms"] = (f"{sum(alarms)} of {len(alarms)} judged healthy scans"
                                   + (f" ({5 - len(alarms)} gave no verdict)" if len(alarms) < 5 else ""))
            if run.left() > 60:
                out["rank 2 (node2) killed mid-scan"] = _health(run, fh, d, "killed", ("SIGKILL", 2), bound_s=90,
                                                                expect=("no answer", {"node2"}, ["node2"]))
                fh.shape(BASE_RATE)  # a fresh start: the namespaces stay, the shaping is set again
            if run.left() > 60:
                out["rank 2 (node2) stopped mid-scan"] = _health(run, fh, d, "stopped", ("SIGSTOP", 2), bound_s=120,
                                                                 expect=("no answer", {"node2"}, ["node2"]))
        scans = [v for v in out.values() if isinstance(v, dict)]
        out["status"] = "ok" if scans and all(v.get("status") == "ok" for v in scans) else "failed"
        return out

    return body


# -- 3. tune -----------------------------------------------------------------------------------------

def _busbw(text: str) -> dict[int, float]:
    from ncclbench.output.parse import parse_text

    _, rows = parse_text(text)
    return {r.size: r.out_of_place.busbw for r in rows}


def step_tune(run: Run, tools: fakehosts.Tools) -> Callable[[Path], dict]:
    def body(d: Path) -> dict:
        res: dict = {}
        with fakehosts.FakeHosts(2, 2, tools, ngpus=_ngpus()) as fh:
            if len(fh.hosts) < 2:
                return {"status": "not run", "why": f"{len(fh.hosts)} fake host(s) made"}
            prefix = d / "tune"
            job = fh.start([*NB, "tune", "all_reduce", "--backend", "nccl", "-b", "256K", "-e", "64M", "-f", "4",
                            "-n", "40", "-w", "5",
                            "--rounds", "5", "--algos", "Ring,Tree", "--protos", "LL,LL128,Simple",
                            "--out", str(prefix)], d, "tune", extra_env=_env(run.out))
            codes = job.wait(200)
            res["exit codes"] = codes
            res["tune says"] = [ln for ln in job.stdout(0).splitlines() if ln.strip()][-25:]
            try:
                bands = json.loads(Path(f"{prefix}.json").read_text()).get("bands", [])
            except (OSError, ValueError) as exc:
                res["status"] = "failed"
                res["why"] = f"no tune JSON ({exc})"
                return res
            won = [b for b in bands if b["winner"] != "default" and b["env"]]
            if not won:
                res["verdict"] = "default best: no setting beat NCCL's default beyond the noise (tune says per size)"
            for b in won[:2]:
                if run.left() < 45:
                    res[f"verify {b['winner']}"] = "not run: budget"
                    continue
                extra = dict(e.split("=", 1) for e in b["env"])
                per: dict[str, list[dict[int, float]]] = {"default": [], "setting": []}
                for i, which in enumerate(["default", "setting", "setting", "default"]):
                    j = fh.start([*NB, "all_reduce", "-b", str(b["lo"]), "-e", str(b["hi"]), "-f", "4", "-n", "40",
                                  "-w", "5", "--no-store", "--no-explain"], d, f"verify-{b['winner']}-{i}-{which}",
                                 extra_env={**_env(run.out), **(extra if which == "setting" else {})})
                    j.wait(90)
                    per[which].append(_busbw(j.stdout(0)))
                sizes = sorted(set.intersection(*(set(x) for x in per["default"] + per["setting"])) or [])
                gains = [statistics.median(x[s] for x in per["setting"]) / statistics.median(x[s] for x in per["default"])
                         - 1 for s in sizes if all(x[s] > 0 for x in per["default"])]
                spread = [abs(per["default"][0][s] / per["default"][1][s] - 1) for s in sizes]
                g, n = (statistics.median(gains), statistics.median(spread)) if gains and spread else (None, None)
                res[f"verify {b['winner']} ({' '.join(b['env'])})"] = {
                    "sizes": sizes, "median gain": g, "default's run-to-run spread": n,
                    "confirmed": bool(g is not None and n is not None and g > n and g > 0)}
        res["status"] = "ok" if codes == [0] * len(codes) else "failed"
        return res

    return body


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--nccl-tests", default=None, help="folder of the nccl-tests binaries (built with MPI)")
    p.add_argument("--iproute2", default=None, help="folder from bench/fetch_iproute2.sh (the image has no ip/tc)")
    p.add_argument("--budget-s", type=float, default=470.0, help="stop starting steps past this (default 470)")
    p.add_argument("--steps", default="explain,mpirun,health,tune")
    p.add_argument("--cpu-dry", action="store_true", help="skip the GPU count (to try the script on a CPU machine)")
    a = p.parse_args()
    global CPU_DRY
    CPU_DRY = a.cpu_dry
    run = Run(Path(a.out), a.budget_s)
    commit = provenance.commit()
    smi = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout if \
        fakehosts.shutil.which("nvidia-smi") else "no nvidia-smi"
    ver = subprocess.run([*NB, "--version"], capture_output=True, text=True, env={**os.environ, **_env(run.out)})
    run.write(f"# multihost_gpu at {commit}, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}\n\n```\n{smi.strip()}\n"
              f"{ver.stdout.strip()}\n```\nNVLS off in every process: {fakehosts.NVLS_OFF}")
    steps = a.steps.split(",")
    try:
        tools = fakehosts.find_tools(a.iproute2)
    except fakehosts.SetupError as e:
        tools = None
        run.write(f"fakehosts: {e}: the network-namespace steps (explain, health, tune) are not run")
    if tools is not None and "explain" in steps:
        run.step("1-explain", 40, step_explain(run, tools, a.nccl_tests))
    if tools is not None and "tune" in steps:
        run.step("3-tune", 60, step_tune(run, tools))
    if tools is not None and "health" in steps:
        run.step("2-health", 120, step_health(run, tools))
    if "mpirun" in steps:  # last: the extra route, where time is left
        run.step("1b-mpirun", 40, step_mpirun(run, a.nccl_tests))
    run.write(f"total {time.monotonic() - run.t0:.0f} s")
    return 0 if all(r.get("status") == "ok" for r in run.results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
