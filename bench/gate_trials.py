#!/usr/bin/env python3
"""Issue 22's gate figures: 20 trials each of the regression gate (`ncclbench check`,
i.e. ncclbench.store.compare.gate) whose noise comes from the baseline alone.

  identical   back-to-back runs of an unchanged system, each judged against the run
              before it (a 1-run baseline: the declared prior, "assumed") and against
              the 3 runs before it (`baseline set NAME RUN --runs 3`): every verdict that
              is not "ok" is a false alarm (a regression, or an "unstable candidate").
  slow        a 10 % slowdown, judged against the 3 good runs before it: caught = exit 7.
  contention  another load on the machine, judged against the good run before it (1-run
              baseline): caught = exit 7.

Two setups, one command each (everything in one go; the runs are kept in a SQLite store
under OUT, the verdicts in OUT/gate-trials.{json,md}):

  cpu   The CPU backend over 2 network-namespace hosts (tests/netns_hosts.py, one rank
        each, MPICH over TCP on veth links; root and iproute2 needed), every link shaped
        with `tc tbf` to RATE Mbit/s, as issue 13 did (bench/gate_false_alarms.py, whose
        namespace/tbf set-up and run recorder this reuses).  slow: every link at 0.9 RATE.
        contention: another job's bulk TCP stream over host 0's shaped link during the run
        (the resource that sets the pace; a CPU hog slowed nothing the gate judges on this
        shared VM: see HOG_PORT's comment).  Rounds are interleaved (good, slow,
        contention), after 3 seed runs.
            python bench/gate_trials.py cpu --out DIR
  gpu   The NCCL backend, all visible GPUs of this host (`--nprocs N`, one per GPU).
        contention: bench/gpu_hog.py's memory-bound kernel on one GPU, back to back;
        slow: the same kernel busy only --slow-duty of the time (a lighter slowdown: its
        measured size is printed, not assumed).  The hog runs through a block of trials
        (starting it per run would cost the time budget), so the order is: 3 seeds, the
        good runs, the slowed block, the contention block.
            python bench/gate_trials.py gpu --out DIR

`--results FILE.md` also copies the report (and its .json) there, e.g.
bench/results/gate-trials-cpu-DATE.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

import gate_false_alarms as gfa  # noqa: E402  (bench/: the namespace+tbf setup and the run recorder)
from provenance import commit  # noqa: E402  (bench/: the one answer to 'which commit is this tree')

PY = sys.executable
# After gate_false_alarms.TEST (later options win): 8 B .. 4 MiB, the plateau (the top quarter:
# 256 KiB..4 MiB, 3.5..56 ms an op at 600 Mbit/s) set by the shaped links; about 7 s a run here.
CPU_ARGS = "-b 8 -e 4M -f 2 -n 12 -w 3"
# 8 B .. 64 MiB by 2 (24 sizes: latency 8 B..64 KiB, plateau the top quarter 2..64 MiB); on GPUs a run
# is mostly its start (cuInit, NCCL's communicators), so the sweep costs little
GPU_TEST = ["all_reduce_perf", "-b", "8", "-e", "64M", "-f", "2", "-n", "10", "-w", "3", "-c", "0", "--backend", "nccl"]
SLOWDOWN = 0.9
HOG_SCRIPT = ROOT / "bench" / "gpu_hog.py"
SEEDS = 5  # good runs before the first trial (a 5-run baseline from round 1 on)
# Contention on the CPU setup is another job's bulk TCP stream over the shaped link of the first
# host (the resource that sets the pace there, as HBM bandwidth does for bench/gpu_hog.py on a GPU).
# A CPU hog was tried first and slowed nothing the gate judges on this shared 2-core VM (load 8-13
# from other work): 2 spinning processes moved the plateau -0.6 % and the latency +9.6 % (median of
# 3); 4 at nice -5 on shaped links -0.7 %; on unshaped links identical runs already differed 3.7x.
HOG_PORT = 45999
HOG_WARMUP_S = 1.0


def _commit(given: str | None) -> str:
    """The commit measured: --commit, else bench/provenance.py (env, COMMIT file, git)."""
    return given or commit()


class CpuSetup:
    """2 namespace hosts, links shaped by tbf (gate_false_alarms.Shaped); a CPU hog for contention."""

    blocked = False

    def __init__(self, out: Path, rate_mbit: int, args: str):
        gfa.SHAPED_EXTRA = args.split()
        self.rate = rate_mbit
        self.shaped = gfa.Shaped(out, rate_mbit, nhosts=2)
        self._hog_procs: list[subprocess.Popen] = []
        self.command = " ".join(["ncclbench", *gfa.TEST, *gfa.SHAPED_EXTRA]) + \
            f" over 2 namespace hosts, links tbf {rate_mbit} Mbit/s"

    def begin_block(self, kind: str) -> None:
        """Nothing lasts a block here: every run sets its own condition."""

    def end_block(self) -> None:
        """See begin_block."""

    def _shape(self, mbit: int | None) -> None:
        """Every link at `mbit` (tbf, as gate_false_alarms.Shaped sets it), or unshaped (None)."""
        if mbit == self.shaped.current:
            return
        for h in self.shaped.hosts:
            tc = ["ip", "netns", "exec", h.name, "tc", "qdisc"]
            if mbit is None:
                subprocess.run([*tc, "del", "dev", h.veth, "root"], check=True)
            else:
                subprocess.run([*tc, "replace", "dev", h.veth, "root", "tbf", "rate", f"{mbit}mbit", "burst", "512kb",
                                "limit", "64mb"], check=True)
        self.shaped.current = mbit

    def begin_run(self, kind: str) -> None:
        self._shape(int(round(self.rate * SLOWDOWN)) if kind == "slow" else self.rate)
        if kind == "contention":  # another job's bulk TCP stream over the first host's shaped link
            a, b = self.shaped.hosts[0], self.shaped.hosts[1]
            sink = ("import socket\ns = socket.create_server(('0.0.0.0', %d))\nc, _ = s.accept()\n"
                    "while c.recv(1 << 20):\n    pass\n" % HOG_PORT)
            source = ("import socket, time\nfor _ in range(100):\n    try:\n"
                      "        c = socket.create_connection(('%s', %d)); break\n"
                      "    except OSError:\n        time.sleep(0.05)\nbuf = bytes(1 << 20)\n"
                      "while True:\n    c.sendall(buf)\n" % (b.addr, HOG_PORT))
            sink_proc = subprocess.Popen(b.cmd([PY, "-c", sink]))
            self._hog_procs = [subprocess.Popen(a.cmd([PY, "-c", source])), sink_proc]  # stopped source first
            time.sleep(HOG_WARMUP_S)  # the stream has filled the link before the run starts

    def end_run(self) -> None:
        for p in self._hog_procs:
            p.terminate()
        for p in self._hog_procs:
            p.wait(timeout=10)
        self._hog_procs = []

    def cmd(self) -> list[str]:
        return self.shaped.cmd(False)

    def describe(self) -> dict:
        return {"setup": "cpu", "hosts": 2, "rate_mbit": self.rate, "slow_rate_mbit": int(round(self.rate * SLOWDOWN)),
                "contention": "a bulk TCP stream from host 0 to host 1 over the same shaped link during the run"}

    def close(self) -> None:
        self.end_run()
        self.shaped.close()


class GpuSetup:
    """The NCCL backend on every visible GPU; bench/gpu_hog.py on one GPU for slow/contention."""

    blocked = True

    def __init__(self, out: Path, ngpus: int, hog_device: int, slow_duty: float, args: str, hog_seconds: float):
        self.out, self.ngpus, self.hog_device, self.slow_duty = out, ngpus, hog_device, slow_duty
        self.hog_seconds = hog_seconds
        self.test = GPU_TEST + args.split()
        self._hog: subprocess.Popen | None = None
        self.hog_summaries: list[str] = []
        self.command = " ".join(["ncclbench", *self.test, "--nprocs", str(ngpus)])

    def begin_block(self, kind: str) -> None:
        if kind not in ("slow", "contention"):
            return
        duty = self.slow_duty if kind == "slow" else 1.0
        self._hog = subprocess.Popen([PY, str(HOG_SCRIPT), "--device", str(self.hog_device),
                                      "--seconds", str(self.hog_seconds), "--duty", str(duty)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        said = []
        while self._hog.stderr is not None:  # "gpu_hog: running on device N" once its first kernel ran
            line = self._hog.stderr.readline()
            said.append(line.strip())
            if not line or "running on device" in line:
                break
        if "running on device" not in said[-1]:
            raise SystemExit("gpu_hog did not start: " + " | ".join(x for x in said if x))

    def begin_run(self, kind: str) -> None:
        """The hog runs through its block (begin_block .. end_block)."""

    def end_run(self) -> None:
        """See begin_run."""

    def end_block(self) -> None:
        if self._hog is None:
            return
        self._hog.terminate()
        out, _ = self._hog.communicate(timeout=30)
        self.hog_summaries.append(out.strip())
        self._hog = None

    def cmd(self) -> list[str]:
        return [PY, "-m", "ncclbench", *self.test, "--nprocs", str(self.ngpus)]

    def describe(self) -> dict:
        return {"setup": "gpu", "gpus": self.ngpus, "slow": f"bench/gpu_hog.py on GPU {self.hog_device}, "
                f"busy {self.slow_duty:g} of the time", "contention": f"bench/gpu_hog.py on GPU {self.hog_device}, "
                "back to back", "hog_summaries": self.hog_summaries}

    def close(self) -> None:
        self.end_block()


# (label, what a non-ok verdict is, the checked run's kind, the baseline's kind, the baseline's rounds
# relative to the checked run's: the last is the reference run, the others its history)
TRIALS = {
    "cpu": [("identical, 1-run baseline", "false alarm", "good", "good", (-1,)),
            ("identical, 3-run baseline", "false alarm", "good", "good", (-3, -2, -1)),
            ("identical, 5-run baseline", "false alarm", "good", "good", (-5, -4, -3, -2, -1)),
            ("10 % slower (tbf 0.9 x rate), 3-run baseline", "caught", "slow", "good", (-2, -1, 0)),
            ("10 % slower (tbf 0.9 x rate), 5-run baseline", "caught", "slow", "good", (-4, -3, -2, -1, 0)),
            ("contention (another job's TCP stream on the link), 1-run baseline", "caught", "contention", "good",
             (0,))],
    "gpu": [("identical, 1-run baseline", "false alarm", "good", "good", (-1,)),
            ("identical, 3-run baseline", "false alarm", "good", "good", (-3, -2, -1)),
            ("identical, 5-run baseline", "false alarm", "good", "good", (-5, -4, -3, -2, -1)),
            ("slower (gpu_hog at --slow-duty on one GPU), 3-run baseline", "caught", "slow", "good", (-2, -1, 0)),
            ("slower (gpu_hog at --slow-duty on one GPU), 5-run baseline", "caught", "slow", "good", (-4, -3, -2, -1, 0)),
            ("contention (gpu_hog back to back on one GPU), 1-run baseline", "caught", "contention", "good", (0,))],
}


def schedule(setup: str, trials: int, blocked: bool) -> list[tuple[str, int]]:
    """(kind, round): seeds (rounds -4..0 of the good runs: the 5-run baselines' first), then
    per round one run of each kind, interleaved, or (blocked) kind by kind."""
    kinds = [k for k in ("good", "slow", "contention") if any(k in (t[2], t[3]) for t in TRIALS[setup])]
    seeds = [("good", r) for r in range(-SEEDS + 1, 1)]
    rounds = range(1, trials + 1)
    if blocked:
        return seeds + [(k, r) for k in kinds for r in rounds]
    return seeds + [(k, r) for r in rounds for k in kinds]


def collect(setup, name: str, out: Path, trials: int) -> dict:
    db = out / "runs.sqlite"
    log = open(out / "collect.log", "a")
    runs: dict[str, dict[int, dict]] = {}
    t0 = time.monotonic()
    current = None
    try:
        for kind, rnd in schedule(name, trials, setup.blocked):
            if kind != current:
                setup.end_block()
                setup.begin_block(kind)
                current = kind
            setup.begin_run(kind)
            try:
                rec = gfa._run(setup.cmd(), db, log)
            finally:
                setup.end_run()
            runs.setdefault(kind, {})[rnd] = rec
            print(f"{kind:>10} {rnd:>3}: run {rec['run']} {rec['wall_s']} s load {rec['load_before']}", flush=True)
    finally:
        setup.close()
    return {"runs": runs, "collect_s": round(time.monotonic() - t0, 1)}


def _verdict(g) -> dict:
    return {"status": g.status, "exit_code": g.exit_code, "figures": [
        {"figure": j.figure, "worse_pct": round(j.worse_pct, 2), "limit_pct": round(min(j.limit_pct, 1e6), 2),
         "noise_pct": None if j.noise.pct is None else round(min(j.noise.pct, 1e6), 2), "noise_source": j.noise.source,
         "verdict": j.verdict.lower(), "unstable": j.unstable} for j in g.judgements]}


def judge(out: Path, name: str, trials: int, runs: dict) -> dict:
    from ncclbench.store import ResultStore
    from ncclbench.store.compare import gate

    ids = {k: {int(r): v["run"] for r, v in d.items()} for k, d in runs.items()}
    out_trials = []
    with ResultStore(out / "runs.sqlite", create=False) as store:
        cache: dict = {}

        def get(rid: int):
            if rid not in cache:
                cache[rid] = store.get_run(rid)
            return cache[rid]

        for label, _, kind, base_kind, offsets in TRIALS[name]:
            for r in range(1, trials + 1):
                rounds = [r + o for o in offsets]
                if r not in ids.get(kind, {}) or any(x not in ids.get(base_kind, {}) for x in rounds):
                    continue
                base = [get(ids[base_kind][x]) for x in rounds]
                g = gate(get(ids[kind][r]), base[-1], history=base[:-1])
                out_trials.append({"trial": label, "round": r, "run": ids[kind][r],
                                   "baseline": [ids[base_kind][x] for x in rounds], **_verdict(g)})
    return {"trials": out_trials}


def _count(trials: list[dict], label: str) -> dict:
    vs = [t for t in trials if t["trial"] == label]
    return {"n": len(vs), "ok": sum(v["status"] == "ok" for v in vs),
            "regression": sum(v["exit_code"] == 7 for v in vs), "unstable": sum(v["exit_code"] == 9 for v in vs)}


def _fig(trials: list[dict], label: str, figure: str, field: str) -> str:
    vals = [f[field] for t in trials if t["trial"] == label for f in t["figures"] if f["figure"] == figure
            and f[field] is not None]
    if not vals:
        return "-"
    return f"{statistics.median(vals):.1f} ({min(vals):.1f} .. {max(vals):.1f})"


def report(doc: dict) -> str:
    t = doc["trials"]
    m = doc["meta"]
    lines = [f"# Regression gate trials, {m['setup']['setup'].upper()} ({m['date'][:10]})", "",
             f"Machine: {m['machine']}; load average around the runs {m['load']} (shared with other work). "
             f"Commit {m['commit']}, {m['date']}. {m['collect_s']:.0f} s for {m['nruns']} runs.",
             f"Command: `{m['command']}`; each run: `{m['run_command']}`." +
             (f" Judged again with commit {m['judged_with_commit']} (`{m['judge_command']}`)."
              if m.get("judged_with_commit") else ""),
             f"Setup: {json.dumps(m['setup'])}.", "",
             "Each trial is judged by the gate (`check`, default --max-drop 5 %), whose noise comes from the baseline "
             "alone. A false alarm is any verdict but ok (exit 7 regression or exit 9 unstable candidate); caught is "
             "exit 7.", "",
             "| trials | counted | result | ok | exit 7 | exit 9 |", "|---|---|---:|---:|---:|---:|"]
    for label, what, *_ in TRIALS[m["setup"]["setup"]]:
        c = _count(t, label)
        res = c["n"] - c["ok"] if what == "false alarm" else c["regression"]
        counted = what if what == "caught" else what + "s"
        lines.append(f"| {label} | {counted} | {res} of {c['n']} | {c['ok']} | {c['regression']} | {c['unstable']} |")
    lines += ["", "Per figure (median over the trials, range in brackets):", "",
              "| trials | figure | change, % worse | limit, % | noise (1 sd), % |", "|---|---|---:|---:|---:|"]
    for label, *_ in TRIALS[m["setup"]["setup"]]:
        for figure in ("plateau busbw", "latency"):
            lines.append(f"| {label} | {figure} | {_fig(t, label, figure, 'worse_pct')} | "
                         f"{_fig(t, label, figure, 'limit_pct')} | {_fig(t, label, figure, 'noise_pct')} |")
    srcs: dict[str, int] = {}
    for x in t:
        for f in x["figures"]:
            key = f["noise_source"].split(" (")[0] if "roughness" in f["noise_source"] else f["noise_source"]
            key = "assumed: the baseline's own size-to-size roughness" if "roughness" in key else key
            srcs[key] = srcs.get(key, 0) + 1
    lines += ["", "Where the noise came from (judged figures): " +
              "; ".join(f"{n} x {k}" for k, n in sorted(srcs.items(), key=lambda kv: -kv[1])) + "."]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="setup", required=True)
    c = sub.add_parser("cpu")
    c.add_argument("--rate-mbit", type=int, default=600)
    c.add_argument("--args", default=CPU_ARGS, help=f"options after the test's (default {CPU_ARGS!r})")
    g = sub.add_parser("gpu")
    g.add_argument("--ngpus", type=int, default=0, help="GPUs (default: all visible)")
    g.add_argument("--hog-device", type=int, default=1)
    g.add_argument("--slow-duty", type=float, default=0.2)
    g.add_argument("--hog-seconds", type=float, default=240, help="the hog's own bound (it is stopped after its block)")
    g.add_argument("--args", default="", help="more options after the test's")
    for p in (c, g):
        p.add_argument("--out", required=True)
        p.add_argument("--trials", type=int, default=20)
        p.add_argument("--results", default=None, help="also write the report here (FILE.md and FILE.json)")
        p.add_argument("--commit", default=None, help="the commit of this tree when it is no git checkout")
    j = sub.add_parser("judge", help="judge the runs of an earlier collection again with this tree's gate")
    j.add_argument("--out", required=True)
    j.add_argument("--results", default=None)
    j.add_argument("--commit", default=None)
    args = ap.parse_args()
    out = Path(args.out)
    if args.setup == "judge":
        doc = json.loads((out / "gate-trials.json").read_text())
        doc["meta"]["judged_with_commit"] = _commit(args.commit)
        doc["meta"]["judge_command"] = "python bench/gate_trials.py " + " ".join(sys.argv[1:])
        trials = max(r for k, d in doc["runs"].items() if k != "good" for r in map(int, d))
        doc.update(judge(out, doc["meta"]["setup"]["setup"], trials, doc["runs"]))
        return _write(doc, out, args.results)
    out.mkdir(parents=True, exist_ok=True)
    if args.setup == "cpu":
        setup = CpuSetup(out, args.rate_mbit, args.args)
    else:
        from ncclbench.backends.select import gpu_count

        n = args.ngpus or gpu_count()
        if n < 2:
            raise SystemExit("gate_trials gpu: needs 2 or more GPUs (one rank moves no data)")
        setup = GpuSetup(out, n, args.hog_device, args.slow_duty, args.args, args.hog_seconds)
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    run_command = setup.command
    got = collect(setup, args.setup, out, args.trials)
    all_loads = [x for d in got["runs"].values() for v in d.values() for x in (v["load_before"], v["load_after"])]
    doc = {"meta": {"date": started, "machine": f"{platform.node()} {platform.machine()}, {os.cpu_count()} CPUs",
                    "commit": _commit(args.commit), "command": "python bench/gate_trials.py " + " ".join(sys.argv[1:]),
                    "run_command": run_command, "setup": setup.describe(), "collect_s": got["collect_s"],
                    "nruns": sum(len(d) for d in got["runs"].values()),
                    "load": f"{min(all_loads):.1f} .. {max(all_loads):.1f}, median {statistics.median(all_loads):.1f}"},
           "runs": got["runs"], **judge(out, args.setup, args.trials, got["runs"])}
    return _write(doc, out, args.results)


def _write(doc: dict, out: Path, results: str | None) -> int:
    text = report(doc)
    (out / "gate-trials.json").write_text(json.dumps(doc, indent=1))
    (out / "gate-trials.md").write_text(text)
    if results:
        res = Path(results)
        res.write_text(text)
        res.with_suffix(".json").write_text(json.dumps(doc, indent=1))
    print(text)
    return 0

if __name__ == "__main__":
    sys.exit(main())
