#!/usr/bin/env python3
"""Issue 29's fake-host figures: a slow NIC or link on small fleets (3, 4, 5, 8 hosts), on 2 GPUs.

    python3 bench/health_fleet_gpu.py OUT [--iproute2 DIR] [--budget-s 400] [--cpu] [--cases A,B]

Every case is one `ncclbench health --phases pairs` scan over fake hosts (bench/fakehosts.py:
network + UTS namespaces, NCCL_HOSTID, veths into a bridge), one rank per host, the hosts sharing
the GPUs round robin (NCCL allows two ranks on one GPU when their hosts differ; the pairs phase
only, as a one-GPU figure would measure the sharing); an odd fleet's hosts all share GPU 0
(`gpus_for`: every round then runs as many ranks on it).  Every veth is shaped with tc tbf to BASE so
the network, not the CPUs, sets the pace; a case then slows one host's veth to 75, 50 or 25 % of
BASE ("nic"), or one host pair's traffic on both ends to 50 % ("link"), or nothing ("healthy").

Each case records: exit code of rank 0 (the coordinator's verdict), what was confirmed (component,
hosts, detail), the drain list, which other host was drained, whether the verdict is exactly the
expected one (the slow host named and drained, or the link named and no host drained; healthy:
exit 0 and nothing confirmed), and the verdict lines.  Results are written after each case
(OUT/results.json, OUT/summary.md), so a device visit cut short keeps what ran; cases the budget
did not reach are listed as "not run" with the reason.

Order (most important first): 4 hosts NIC 50 %, 4 hosts NIC 25 % (a quarter-rate host used to make
the scan call its pairs "stuck"), 3 hosts NIC 50 %, 8 hosts NIC 25 %, 4 hosts link 50 %, a healthy
scan at 3/4/5/8, then the other rates and sizes, then more healthy scans (5 per size in all).

`--cpu` is the dry run (no GPU; root + ip/tc still needed): every case's fleet is made and shaped at
100 Mbit/s as on the GPUs, and `ncclbench preflight` runs across it in place of the scan (the CPU
backend's ranks need MPI's own launcher, which the env launch of fake hosts is not), so the
namespaces, the rendezvous over the veths, the shaping, the budget and the records are exercised.
NVLink SHARP is off in every process (fakehosts.NVLS_OFF).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "src"))

import fakehosts  # noqa: E402
import provenance  # noqa: E402

NB = [sys.executable, "-m", "ncclbench"]


@dataclass(frozen=True)
class Mode:
    """What the scans run on: NCCL over sockets on GPUs, or the CPU backend (dry run)."""

    backend: str
    base_mbit: int  # every veth's rate
    health_args: tuple[str, ...]


# 4 Gbit/s on every veth, as bench/multihost_gpu.py (sockets on one box move more, so tc sets the pace);
# 32 MiB pairs, 10 iterations x 3 cycles, the product's default round deadline (the stuck case
# ran with the defaults).
GPU = Mode("nccl", 4000, ("--bw-size", "32M", "--lat-size", "8", "-n", "10", "-w", "2", "--cycles", "3"))
# the dry run: 100 Mbit/s as tests/test_health_netns.py, preflight in place of the scan
CPU = Mode("cpu", 100, ())


@dataclass(frozen=True)
class Case:
    """One scan: fleet size, fault kind ("nic", "link", "healthy"), the slow rate in % of BASE, repeat."""

    hosts: int
    kind: str
    pct: int = 100
    rep: int = 1

    @property
    def name(self) -> str:
        tail = "" if self.kind == "healthy" else f"{self.pct}"
        return f"{self.hosts}h-{self.kind}{tail}-{self.rep}"

    def slow(self) -> tuple[int, int] | None:
        """The slowed part: host 2 for a NIC (node2, as in the issue), hosts (1, 3) or (1, 2) for a link."""
        if self.kind == "nic":
            return (2, 2)
        if self.kind == "link":
            return (1, 3) if self.hosts > 3 else (1, 2)
        return None

    def expect(self) -> tuple[str, set[str], list[str]] | None:
        """(component, hosts, drain) a right verdict gives; None for a healthy scan."""
        s = self.slow()
        if s is None:
            return None
        if self.kind == "nic":
            return ("node nic", {f"node{s[0]}"}, [f"node{s[0]}"])
        return ("link", {f"node{s[0]}", f"node{s[1]}"}, [])


def plan() -> list[Case]:
    """Every case, most important first (the order the budget cuts from the end)."""
    first = [Case(4, "nic", 50), Case(4, "nic", 25), Case(3, "nic", 50), Case(8, "nic", 25), Case(4, "link", 50)]
    healthy1 = [Case(n, "healthy") for n in (3, 4, 5, 8)]
    rest = [Case(n, "nic", p) for n in (4, 3, 5, 8) for p in (75, 50, 25)]
    rest += [Case(n, "link", 50) for n in (3, 5, 8)]
    more_healthy = [Case(n, "healthy", rep=r) for r in range(2, 6) for n in (3, 4, 5, 8)]
    seen: set[str] = set()
    out = []
    for c in first + healthy1 + rest + more_healthy:
        if c.name not in seen:
            seen.add(c.name)
            out.append(c)
    return out


def need_s(case: Case, mode: Mode) -> float:
    """A case's expected wall time: start + ~1 round per host (every pair, <= 16 hosts) at a few s each,
    more where a slow host stretches every round it is in.  Only decides whether a case is started."""
    if mode.backend == "cpu":
        return 5.0
    per_round = 6.0
    stretch = 100 / case.pct if case.kind != "healthy" else 1.0
    return 10 + case.hosts * per_round * min(stretch, 2.5)


def as_expected(doc: dict, drain: list[str] | None, case: Case) -> bool:
    """Exactly the expected component on the expected hosts confirmed, nothing else confirmed, and the
    drain list as expected; a healthy scan: nothing confirmed and nothing drained."""
    found = [(f["component"], set(f["hosts"])) for f in doc.get("findings", []) if f.get("confirmed")]
    want = case.expect()
    if want is None:
        return not found and not drain
    comp, hosts, want_drain = want
    return bool(found) and all(c == comp and h == hosts for c, h in found) and sorted(drain or []) == sorted(want_drain)


def read_drain(path: Path) -> list[str] | None:
    """Hosts to take out ("#" lines name hosts not judged, not drained); None when no file was written."""
    if not path.exists():
        return None
    return [h for ln in path.read_text().splitlines() if not ln.startswith("#") for h in ln.split()]


# A 2-rank all_reduce carries its busbw on the wire each way: 1 GB/s of pair busbw is 8 Gbit/s through the
# veths.  A shaped rate 10 % or more under what the other pairs reached limits the slowed pairs ("landed");
# 10 % or more above it cannot ("did not land"); between, the fault is at the cap the others meet anyway
# ("at the cap": 1x H200, 8 hosts, NIC 50 % = 2.0 Gbit/s against 1.98 was still seen, 0.68-0.85x, link 50 %
# against 2.01 was not: counted, and said).
LANDED_MARGIN = 0.1


def injection_landed(case: Case, doc: dict | None, base_mbit: int) -> tuple[str | None, str]:
    """Whether the case's slowdown can limit its pairs at all: its shaped rate against the wire rate the scan's
    other pairs (neither the slow host nor the slow link) reached: "landed", "at the cap" or "did not land".
    Where every pair is capped under the shaped rate by something else (8 contexts time-sliced on one GPU),
    the fault is not in the data, and a scan that names nothing is right, not a miss.  (None, why): a
    healthy case, or no pair figures."""
    s = case.slow()
    if s is None or doc is None:
        return None, "no injection" if s is None else "no scan"
    slow = {f"node{s[0]}", f"node{s[1]}"}
    others = [g["busbw"] for r in doc.get("measurements", []) for g in r.get("groups", [])
              if g.get("busbw") and len(g.get("hosts", [])) == 2 and not (
                  (case.kind == "nic" and slow & set(g["hosts"])) or (case.kind == "link" and set(g["hosts"]) == slow))]
    if not others:
        return None, "no pair figures"
    others.sort()
    wire_gbit = 8 * others[len(others) // 2]
    shaped_gbit = base_mbit * case.pct / 100 / 1000
    why = f"shaped {shaped_gbit:.2f} Gbit/s, the other pairs reached {wire_gbit:.2f} Gbit/s (median)"
    if shaped_gbit <= (1 - LANDED_MARGIN) * wire_gbit:
        return "landed", why
    return ("did not land" if shaped_gbit >= (1 + LANDED_MARGIN) * wire_gbit else "at the cap"), why


def judge_case(case: Case, code: int | None, doc: dict | None, drain: list[str] | None) -> dict:
    """What a case's scan said, against what it should have said."""
    res: dict = {"exit": code}
    if doc is None:
        res["status"] = "no verdict (no JSON)"
        return res
    want = case.expect()
    res["confirmed"] = sorted(f"{f['component']} {','.join(f['hosts'])} {f.get('detail', '')}".strip()
                              for f in doc.get("findings", []) if f.get("confirmed"))
    res["drain"] = drain
    named = want[1] if want else set()
    res["other hosts drained"] = sorted(set(drain or []) - (named if want and want[0] == "node nic" else set()))
    res["as expected"] = as_expected(doc, drain, case) and code == (8 if want else 0)
    res["host_status"] = doc.get("host_status")
    res["bounded groups"] = [g["upper_bound"] for r in doc.get("measurements", []) for g in r.get("groups", [])
                             if g.get("upper_bound")]
    res["no answer groups"] = [f"{r['round']}: {g['group']}: {g.get('why')}" for r in doc.get("measurements", [])
                               for g in r.get("groups", []) if g.get("status") == "no answer"]
    res["status"] = "ok"
    return res


def scan_argv(mode: Mode, js: Path, drain: Path) -> list[str]:
    if mode.backend == "cpu":
        return [*NB, "preflight"]
    return [*NB, "health", "--backend", mode.backend, "--phases", "pairs", *mode.health_args, "--join-timeout", "60",
            "--no-store", "--json", str(js), "--drain", str(drain)]


def gpus_for(nhosts: int, ngpus: int | None) -> int | None:
    """The GPUs a fleet's fake hosts share: all of them for an even fleet (every round then runs
    every host, so each GPU as many ranks), one for an odd fleet.  An odd fleet leaves one host out
    of each pair round; spread over 2 GPUs, its rounds alternate between 2 and 3 ranks on GPU 0
    (5 hosts: pairs 3 % slower at 3), which ncclbench health rightly refuses to compare
    (health/core/sharing.py); on one GPU every round runs as many ranks as the next, as on a fleet
    where each rank has its own GPU."""
    if ngpus is None or nhosts % 2 == 0:
        return ngpus
    return 1


def run_case(case: Case, mode: Mode, tools: fakehosts.Tools, out: Path, ngpus: int | None,
             bound_s: float = 240) -> dict:
    """Make the fleet, shape it, scan (killed past `bound_s`: the budget), judge the verdict."""
    d = out / case.name
    d.mkdir(parents=True, exist_ok=True)
    base = f"{mode.base_mbit}mbit"
    slow_rate = f"{mode.base_mbit * case.pct // 100}mbit"
    with fakehosts.FakeHosts(case.hosts, 1, tools, ngpus=gpus_for(case.hosts, ngpus), share_gpus=True) as fh:
        if len(fh.hosts) < case.hosts:
            return {"status": "not run", "why": f"{len(fh.hosts)} of {case.hosts} fake hosts made"}
        s = case.slow()
        shaped = fh.shape(base, slow_host=(s[0], slow_rate) if case.kind == "nic" and s else None,
                          slow_link=(s[0], s[1], slow_rate) if case.kind == "link" and s else None)
        if not shaped:
            return {"status": "not run", "why": f"tc could not shape ({'; '.join(fh.unshaped)})"}
        js, drain = d / "health.json", d / "health.drain"
        env = {"PYTHONPATH": str(ROOT / "src"), "PYTHONUNBUFFERED": "1", "NCCLBENCH_NO_STORE": "1",
               "NCCLBENCH_HEALTH_PROGRESS": "1"}
        job = fh.start(scan_argv(mode, js, drain), d, "health", extra_env=env)
        codes = job.wait(bound_s)
        stdout = job.stdout(0)
    if mode.backend == "cpu":
        return {"status": "dry", "exit codes": codes, "links": links_text(case, base, slow_rate),
                "preflight": [ln for ln in stdout.splitlines() if "host(s)" in ln][:2]}
    try:
        doc = json.loads(js.read_text())
    except (OSError, ValueError):
        doc = None
    res = judge_case(case, codes[0], doc, read_drain(drain))
    res["landed"], res["landed why"] = injection_landed(case, doc, mode.base_mbit)
    res["exit codes"] = codes
    res["links"] = links_text(case, base, slow_rate)
    if codes[0] is None:
        res["status"] = f"cut: still running after {bound_s:.0f} s (the budget's end), killed"
    res["verdict lines"] = [ln for ln in stdout.splitlines() if ln.startswith("#")][-12:]
    # a slow pair must never read as a member that stopped (issue 29)
    res["stuck or stopped said"] = [ln for ln in (stdout + job.stderr(0)).splitlines()
                                    if "stuck" in ln or "stopped" in ln][:5]
    if doc is None:
        res["stderr"] = job.stderr(0).splitlines()[-5:]
    return res


def links_text(case: Case, base: str, slow_rate: str) -> str:
    s = case.slow()
    what = "" if s is None else (f", node{s[0]}'s veth at {slow_rate}" if case.kind == "nic"
                                 else f", link node{s[0]}-node{s[1]} at {slow_rate}")
    return f"every veth {base}{what}"


def nccl_version() -> str:
    """NCCL's version as the library in use reports it (ncclGetVersion), or why not."""
    try:
        import ctypes

        from ncclbench.nccl.loader import open_library
        handle, _, path = open_library()
        v = ctypes.c_int()
        handle.ncclGetVersion(ctypes.byref(v))
        return f"{v.value} ({path})"
    except Exception as exc:  # noqa: BLE001 - the record says why, the run goes on
        return f"unknown ({type(exc).__name__}: {exc})"


def header(argv: Sequence[str], mode: Mode, ngpus: int | None) -> dict:
    return {"script": "bench/health_fleet_gpu.py", "command": " ".join(argv), "commit": provenance.commit(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "machine": platform.node(),
            "gpus": ngpus, "nccl": nccl_version() if mode.backend == "nccl" else "not used (CPU backend)",
            "backend": mode.backend, "base rate": f"{mode.base_mbit} Mbit/s per veth (tc tbf)",
            "nvls off": fakehosts.NVLS_OFF}


def tally(results: dict[str, dict]) -> dict:
    """Per kind: cases named as expected, and false alarms over the healthy scans that gave a verdict."""
    ran = [r for n, r in results.items() if "healthy" not in n and r.get("status") == "ok"]
    faults = [r for r in ran if r.get("landed") != "did not land"]
    healthy = [r for n, r in results.items() if "healthy" in n and r.get("status") == "ok"]
    return {"faults named as expected": f"{sum(bool(r['as expected']) for r in faults)} of {len(faults)} run",
            "faults whose injection did not land (not counted above)":
                [f"{n}: {r['landed why']}" for n, r in results.items() if r.get("landed") == "did not land"],
            "faults at the cap the other pairs met (counted above)":
                [f"{n}: {r['landed why']}" for n, r in results.items() if r.get("landed") == "at the cap"],
            "healthy scans with an alarm (exit 8 or a confirmed finding)":
                f"{sum(r['exit'] == 8 or bool(r['confirmed']) for r in healthy)} of {len(healthy)} run",
            "not run": [n for n, r in results.items() if r.get("status") == "not run"]}


def write(out: Path, head: dict, results: dict[str, dict]) -> None:
    """JSON and markdown, rewritten after every case."""
    doc = {**head, "tally": tally(results), "cases": results}
    (out / "results.json").write_text(json.dumps(doc, indent=1))
    lines = [f"# health_fleet_gpu {head['date']}", ""] + [f"- {k}: {v}" for k, v in head.items()] + [""]
    lines += ["| case | exit | as expected | confirmed | other hosts drained | wall s |", "|---|---|---|---|---|---|"]
    for n, r in results.items():
        if r.get("status") == "dry":
            lines.append(f"| {n} | {r['exit codes']} | dry: fleet made and shaped ({r['links']}) | | | {r.get('wall_s')} |")
            continue
        if r.get("status") != "ok":
            lines.append(f"| {n} | {r.get('exit', '-')} | {r.get('status')}: {r.get('why', '')} | | | |")
            continue
        expected = r["as expected"] if r.get("landed") in (None, "landed") else f"{r['as expected']} ({r['landed']})"
        lines.append(f"| {n} | {r['exit']} | {expected} | {'; '.join(r['confirmed']) or '-'} | "
                     f"{', '.join(r['other hosts drained']) or '-'} | {r.get('wall_s')} |")
    lines += ["", *(f"- {k}: {v}" for k, v in tally(results).items())]
    (out / "summary.md").write_text("\n".join(lines) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--iproute2", default=None, help="folder of Debian's ip/tc (the image has none)")
    p.add_argument("--budget-s", type=float, default=400.0, help="start no case past this (default 400)")
    p.add_argument("--cpu", action="store_true", help="dry run: CPU backend, 100 Mbit/s, no GPU needed")
    p.add_argument("--cases", default=None, help="only these case names (e.g. 4h-nic50-1,3h-healthy-1)")
    a = p.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    mode = CPU if a.cpu else GPU
    try:
        tools = fakehosts.find_tools(a.iproute2)
    except fakehosts.SetupError as exc:
        print(f"health_fleet_gpu: {exc}", file=sys.stderr)
        return 6
    ngpus = None if a.cpu else fakehosts.gpu_count()
    if not a.cpu and not ngpus:
        print("health_fleet_gpu: no GPU found (--cpu runs the dry run)", file=sys.stderr)
        return 6
    head = header(sys.argv if argv is None else ["bench/health_fleet_gpu.py", *argv], mode, ngpus)
    wanted = set(a.cases.split(",")) if a.cases else None
    t0, results = time.monotonic(), {}
    for case in plan():
        if wanted is not None and case.name not in wanted:
            continue
        left = a.budget_s - (time.monotonic() - t0)
        if left < need_s(case, mode):
            results[case.name] = {"status": "not run", "why": f"{left:.0f} s of the budget left, "
                                  f"the case needs ~{need_s(case, mode):.0f}"}
        else:
            t = time.monotonic()
            results[case.name] = run_case(case, mode, tools, out, ngpus, bound_s=max(60.0, min(240.0, left)))
            results[case.name]["wall_s"] = round(time.monotonic() - t, 1)
        print(f"{case.name}: {results[case.name]}", flush=True)
        write(out, head, results)
    write(out, head, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
