"""The issue-16 figures on the CPU backend, measured side by side in one script:

1. `ncclbench tune all_reduce ... --backend mpi --nprocs 4` finds a setting
   >= 5 % faster than MPICH's default in at least one size band, and the
   --verify step (ordinary runs with the emitted env, default and setting
   alternating) confirms it;
2. tune's wall time against one plain sweep per candidate (`ncclbench
   all_reduce` with the same options and the candidate's env), run right
   after it: interleaving must not cost extra runs.

Run:  .venv/bin/python bench/tune_cpu.py [--nprocs 4] [-b 8] [-e 1M] [-f 4] [-n 40]
      [--rounds 5] [--verify-rounds 3] [--out bench/results/tune-cpu]
Writes OUT.json (everything measured) and OUT.md (the figures), plus the tune's
own OUT-tune.{json,env}.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from provenance import commit  # noqa: E402  (bench/: the one answer to 'which commit is this tree')


def sh(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, env={**os.environ, "NCCLBENCH_NO_STORE": "1", **(env or {})}, capture_output=True,
                       text=True)
    return time.perf_counter() - t0, p


def machine() -> dict:
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    return {"host": platform.node(), "cpus": os.cpu_count(), "cpu": cpu, "loadavg": os.getloadavg(),
            "python": platform.python_version()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nprocs", type=int, default=4)
    ap.add_argument("-b", default="8")
    ap.add_argument("-e", default="1M")
    ap.add_argument("-f", default="4")
    ap.add_argument("-n", default="40")
    ap.add_argument("--rounds", default="5")
    ap.add_argument("--verify-rounds", type=int, default=3)
    ap.add_argument("--algos", default=None, help="MPICH algorithms (default: all)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "tune-cpu"))
    a = ap.parse_args()

    py = sys.executable
    common = ["-b", a.b, "-e", a.e, "-f", a.f, "-n", a.n]
    tune_prefix = a.out + "-tune"
    tune_cmd = [py, "-m", "ncclbench", "tune", "all_reduce", *common, "--backend", "mpi", "--nprocs",
                str(a.nprocs), "--rounds", a.rounds, "--out", tune_prefix]
    if a.algos:
        tune_cmd += ["--algos", a.algos]
    record: dict = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "machine_before": machine(),
                    "commit": commit(),
                    "tune_command": tune_cmd[2:]}

    # 1. tune (timed on its own: the --verify step below is separate ordinary runs)
    tune_wall, p = sh(tune_cmd)
    print(p.stdout, end="")
    if p.returncode != 0:
        print(p.stderr, file=sys.stderr)
        return p.returncode
    doc = json.loads(Path(tune_prefix + ".json").read_text())
    record["tune_wall_s"] = tune_wall
    record["tune_report"] = [ln for ln in p.stdout.splitlines() if ln.startswith("#")]

    # 2. one plain sweep per candidate, same options, the candidate's env
    from ncclbench.tune.result import TuneResult

    result = TuneResult.from_json(doc)
    sweeps = []
    for cand in result.candidates:
        env = dict(cand.process_env())
        wall, q = sh([py, "-m", "ncclbench", "all_reduce", *common, "--backend", "mpi", "--nprocs", str(a.nprocs)], env)
        sweeps.append({"candidate": cand.label, "env": env, "wall_s": wall, "rc": q.returncode})
    record["plain_sweeps"] = sweeps
    record["plain_sweeps_total_s"] = sum(s["wall_s"] for s in sweeps)

    # 3. --verify, the same function the command runs after a tune
    from ncclbench.tune.verify import subprocess_runner, verify

    lines: list[str] = []
    runner = subprocess_runner("all_reduce", "mpi", a.nprocs, lambda line: lines.append(line))
    section = verify(result, common, a.verify_rounds, runner, lambda line: (print(line), lines.append(line)))
    record["verify"] = section
    record["verify_log"] = lines
    record["machine_after"] = machine()

    won = [b for b in doc["bands"] if b["winner"] != "default" and b["min_gain"] >= 0.05]
    confirmed = [b for b in section["bands"] if b["confirmed"] and b["gain"] >= 0.05]
    record["figure_gain"] = {"bands_5pct": [(b["lo"], b["hi"], b["winner"], b["median_gain"]) for b in won],
                             "confirmed_5pct": [(b["lo"], b["hi"], b["winner"], b["gain"]) for b in confirmed],
                             "met": bool(won) and bool(confirmed)}
    record["figure_wall"] = {"tune_s": tune_wall, "plain_sum_s": record["plain_sweeps_total_s"],
                             "met": tune_wall <= record["plain_sweeps_total_s"]}
    Path(a.out + ".json").write_text(json.dumps(record, indent=1) + "\n")
    write_md(a, record, doc)
    print(f"wrote {a.out}.json and {a.out}.md")
    return 0


def write_md(a, rec: dict, doc: dict) -> None:
    m0, m1 = rec["machine_before"], rec["machine_after"]
    fg, fw = rec["figure_gain"], rec["figure_wall"]
    ncand = len(doc["candidates"])
    nsizes = len(doc["times_us"])
    lines = [
        f"# tune on the CPU backend: all_reduce, {a.nprocs} MPI processes ({rec['date']})",
        "",
        f"Machine: {m0['host']}, {m0['cpus']} CPUs ({m0['cpu']}), shared with other jobs; load average "
        f"{m0['loadavg'][0]:.1f} before, {m1['loadavg'][0]:.1f} after. Library: {doc['library']}. "
        f"Commit {rec['commit']}. Command: `python bench/tune_cpu.py --nprocs {a.nprocs} -b {a.b} -e {a.e} "
        f"-f {a.f} -n {a.n} --rounds {a.rounds} --verify-rounds {a.verify_rounds}`.",
        "",
        "## Figure 1: a setting >= 5 % faster than the default, confirmed by --verify",
        "",
        f"Met: **{'yes' if fg['met'] else 'no'}**.",
        "",
        "Tune's report (median of the interleaved rounds per size; a gain is claimed only beyond the "
        "larger run-to-run spread of default and setting in the same job):",
        "",
        "```",
        *rec["tune_report"],
        "```",
        "",
        "--verify (separate ordinary `ncclbench all_reduce` runs over each band, default and setting "
        f"alternating, {a.verify_rounds} runs each):",
        "",
        "| band | setting | tune gain | ordinary-run gain | noise | confirmed |",
        "|---|---|---|---|---|---|",
    ]
    for b in rec["verify"]["bands"]:
        lines.append(f"| {b['lo']} .. {b['hi']} B | {b['winner']} | {b['tune_gain'] * 100:+.1f} % | "
                     + (f"{b['gain'] * 100:+.1f} % | {b['noise'] * 100:.1f} % | " if b["gain"] is not None else "- | - | ")
                     + ("yes" if b["confirmed"] else "no") + " |")
    if not rec["verify"]["bands"]:
        lines.append("| - | no band won | | | | |")
    lines += [
        "",
        "## Figure 2: tune's wall time against one plain sweep per candidate",
        "",
        f"Met: **{'yes' if fw['met'] else 'no'}**: tune {fw['tune_s']:.1f} s for {ncand} settings (default "
        f"included) x {nsizes} sizes in one job; {ncand} plain sweeps with the same options took "
        f"{fw['plain_sum_s']:.1f} s together.",
        "",
        f"Work per setting and size: tune times {doc['rounds']} rounds x {doc['iters_per_round']} iterations "
        f"(-n {a.n} split over the rounds), out-of-place only, plus one untimed call and a -c check in round 0; "
        f"a plain sweep times -n {a.n} iterations out-of-place and -n {a.n} in-place and checks both. "
        "Tune saves the per-job start (mpiexec, MPI_Init, warm-up) of every setting but the first and the "
        "in-place half; it adds the interleaving's host-side agreement per measurement.",
        "",
        "| plain sweep | env | wall (s) |",
        "|---|---|---|",
        *[f"| {s['candidate']} | {' '.join(f'{k}={v}' for k, v in s['env'].items()) or '-'} | {s['wall_s']:.1f} |"
          for s in rec["plain_sweeps"]],
        "",
        f"Raw numbers: `{Path(a.out).name}.json`; tune's own result: `{Path(a.out).name}-tune.json`.",
    ]
    Path(a.out + ".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
