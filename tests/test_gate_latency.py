"""Issue 31 item 3, latency you can gate: runs measured for the gate (`--gate`, implied by
`--baseline`) carry the small sizes again in rounds on fresh communicators; the gate's latency
figure is then per size one value of the rounds (GPU: their median; the CPU backend: the fastest)
and its noise the baseline runs' own shifts (the per-process prior
only bounds it); each baseline says the smallest rise it can see (`check`'s line, `baseline set`),
from the same noise model as the limit; and the limit's multiple is one rule: Student's t on the
dof of the estimate, every estimate updating the prior by its dof (a roughness once stood in with
2.576 against the prior's t)."""

from __future__ import annotations

import copy
import json
import math
import os
import random
import re
import sqlite3
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from ncclbench.commands import main as ncclbench_main
from ncclbench.commands.show import show_text
from ncclbench.core.config import GATE_ROUNDS
from ncclbench.core.errors import ArgumentError
from ncclbench.core.results import RunSummary
from ncclbench.run.bench_args import parse_bench_args
from ncclbench.store import noise
from ncclbench.store import summary_stats as stats
from ncclbench.store.baseline_advice import baseline_noise_note, projected_limit
from ncclbench.store.gate import gate
from ncclbench.store.gate_figures import LATENCY, Metric
from ncclbench.store.gate_format import format_gate, gate_to_dict
from ncclbench.store.importers import load_file

ROOT = Path(__file__).resolve().parents[1]
AR = ROOT / "tests" / "fixtures" / "nccl_tests_output" / "all_reduce_1proc_4gpu.txt"
TEMPLATE = load_file(AR)[0]
KiB = 1 << 10


def gated_run(rng: random.Random, rounds: int = GATE_ROUNDS, process: float = 0.0, per_round: float = 0.0,
              level: float = 1.0, table_shift: float | None = None, label: str = "x", backend: str | None = None):
    """A copy of the H200 fixture as one process of a gated run would record it: the table's small
    sizes moved by this process's draw (N(0.127), the per-process prior: what the table shows), and
    gate rounds whose small-size times carry a draw per process (`process`) and one per round
    (`per_round`, what a fresh communicator renews), all `level` times the fixture's.  `backend`: the
    run's backend where not the fixture's (an imported nccl-tests log: GPU)."""
    run = copy.deepcopy(TEMPLATE)
    if backend is not None:
        run.info.backend = backend
    shift = rng.gauss(0, 0.127) if table_shift is None else table_shift
    small = [r for r in run.rows if 0 < r.size <= 64 * KiB]
    for r in small:
        for h in (r.out_of_place, r.in_place):
            h.time_us *= level * math.exp(shift)
    proc = rng.gauss(0, process) if process else 0.0
    sizes = [r.size for r in small]
    oop, ip = [], []
    for _ in range(rounds):
        d = proc + (rng.gauss(0, per_round) if per_round else 0.0)
        oop.append([r.out_of_place.time_us / math.exp(shift) * math.exp(d + rng.gauss(0, 0.01)) for r in small])
        ip.append([r.in_place.time_us / math.exp(shift) * math.exp(d + rng.gauss(0, 0.01)) for r in small])
    run.summary = RunSummary(0, math.nan, None, None)
    run.summary.gate_latency = {"rounds": rounds, "fresh": "in a fresh NCCL communicator", "loop_us": 2000.0,
                                "seconds": 1.0, "iterations": [170],
                                "series": [{"type": "float", "redop": "sum", "root": -1, "sizes": sizes,
                                            "out_of_place": oop, "in_place": ip}]}
    run.content_hash += f"-{label}-{rng.random()}"
    return run


def latency(g):
    return next(j for j in g.judgements if j.figure == LATENCY)


def test_gate_rounds_see_a_rise_the_table_times_of_the_same_runs_cannot():
    """Five gated baseline runs (GPU) whose rounds agree: the latency figure is per size the median of
    its rounds, its noise the runs' own shifts pooled with the gated figure's recorded prior (4.5 % per
    run on 20 dof: GPU whole-run shifts of that figure as measured on 2x H200), narrower than the table
    times' (12.7 % per process, and no rounds to floor it): an identical run is ok, a +60 % rise a
    regression, which the table's figure of the same runs cannot confirm against --max-rise 45."""
    rng = random.Random(3)
    base = [gated_run(rng, per_round=0.05, label=f"b{i}") for i in range(5)]
    same = gated_run(rng, per_round=0.05, label="same")
    slow = gated_run(rng, per_round=0.05, level=1.6, label="slow")
    j = latency(gate(same, base[-1], history=base[:-1]))
    assert j.verdict == "ok" and j.how.startswith("gate rounds: 10 rounds, each in a fresh NCCL communicator")
    assert j.how.endswith("; per size the median of its rounds")
    assert "pooled with the prior" in j.noise.source and j.noise.dof == 4 + noise.PRIOR_MAX_DOF
    assert noise.prior_for("nccl-tests", noise.GATED_LATENCY).sigma == pytest.approx(0.045)
    assert "4.5 % (1 sd)" in j.noise.source and "per size the median of its rounds" in j.noise.source
    assert j.detectable_pct < 45
    g = gate(slow, base[-1], max_rise_pct=45, history=base[:-1])
    assert g.exit_code == 7 and [f.figure for f in g.failures] == [LATENCY]
    text = format_gate(g)
    assert "this 5-run baseline can see a latency rise of" in text and "gate rounds: 10 rounds" in text
    for r in (*base, slow):
        r.summary.gate_latency = None
    t = latency(gate(slow, base[-1], max_rise_pct=45, history=base[:-1]))
    assert t.how is None and t.detectable_pct > j.detectable_pct and t.verdict != "regression"


def test_rounds_that_renew_nothing_leave_the_figure_as_wide_as_the_table():
    """Where a fresh communicator does not renew the per-process draw (all of it shared by a run's
    rounds) and that draw is far wider than the recorded prior, the runs' own shifts say so: the limit stays wide and a +30 % rise is not called a
    regression on noise it cannot see (the gate says it cannot confirm)."""
    rng = random.Random(11)
    base = [gated_run(rng, process=0.30, label=f"b{i}") for i in range(5)]
    slow = gated_run(rng, process=0.30, level=1.3, label="slow")
    j = latency(gate(slow, base[-1], max_rise_pct=15, history=base[:-1]))
    assert j.detectable_pct > 30 and j.verdict == "CANNOT CONFIRM"


@pytest.mark.parametrize("backend,figure,what,per_round_var", [
    (None, noise.RoundFigure.MEDIAN, "rounds' spread around their median", noise.median_variance(GATE_ROUNDS)),
    ("mpi", noise.RoundFigure.FASTEST, "rounds' spread at the floor", noise.min_variance(GATE_ROUNDS))])
def test_runs_that_agree_closer_than_their_rounds_allow_get_their_rounds_spread_as_the_floor(
        backend, figure, what, per_round_var):
    """A run's figure is made of its rounds (GPU: per size their median; CPU backend: the fastest): it
    moves at least by their spread.  Five runs whose figures agree by chance closer than that are judged
    on the rounds' spread of their backend's figure (said), never on less, and not far above it."""
    rng = random.Random(5)
    base = [gated_run(rng, per_round=0.30, label=f"b{i}", backend=backend) for i in range(5)]
    med = [stats.round_profile(stats.gate_round_values(r.summary)[("float", "sum", -1)], figure) for r in base]
    for r, m in zip(base, med):  # pull each run's rounds so their figures agree exactly
        s = r.summary.gate_latency["series"][0]
        for rnd in s["out_of_place"]:
            for i, size in enumerate(s["sizes"]):
                rnd[i] *= med[0][size] / m[size]
    j = latency(gate(gated_run(rng, per_round=0.30, label="c", backend=backend), base[-1], history=base[:-1]))
    assert f"{what} within runs, more than the runs moved" in j.noise.source, j.noise.source
    per_run = 0.30 * math.sqrt(per_round_var)
    measured = j.noise.measured
    assert measured is not None and 0.5 * per_run < measured[0] < 2 * per_run


def _as_process_rounds(run):
    run.summary.gate_latency.update(fresh="in a fresh process (the job started again)", renews="process")
    return run


def test_rounds_in_fresh_processes_are_the_runs_noise_and_a_3_run_baseline_sees_80pct():
    """Rounds that are each a process of their own are independent draws of what moves between runs:
    their spread (GPU: around each run's median, MAD-based, on 0.37 (R - 1) dof a run) enters as a measure
    of the whole-run noise, pooled with the runs' shifts on both their dof -- a 3-run baseline is judged
    on 2 + 3 x 3 dof, not Student's t on 2 -- and a +80 % rise is caught while an identical run is ok."""
    rng = random.Random(21)
    base = [_as_process_rounds(gated_run(rng, per_round=0.05, label=f"b{i}")) for i in range(3)]
    same = _as_process_rounds(gated_run(rng, per_round=0.05, label="same"))
    slow = _as_process_rounds(gated_run(rng, per_round=0.05, level=1.8, label="slow"))
    j = latency(gate(same, base[-1], history=base[:-1]))
    assert j.verdict == "ok" and "each a fresh process" in j.noise.source
    assert j.noise.dof == 2 + 3 * round(noise.MAD_EFFICIENCY * (GATE_ROUNDS - 1)) + noise.PRIOR_MAX_DOF
    g = gate(slow, base[-1], history=base[:-1])
    assert g.exit_code == 7 and [f.figure for f in g.failures] == [LATENCY]
    # the same numbers read as rounds of one process (a fresh communicator): only a floor, 2 dof
    for r in (*base, slow):
        r.summary.gate_latency["renews"] = "communicator"
    k = latency(gate(slow, base[-1], history=base[:-1]))
    assert k.noise.dof == 2 + noise.PRIOR_MAX_DOF and k.detectable_pct >= j.detectable_pct


def test_a_one_run_baseline_of_process_rounds_cannot_bound_a_rise():
    """One gated run whose rounds were processes of their own: its rounds' spread around their median on
    0.37 (R - 1) dof, pooled with the recorded prior (4.5 % per run on 20 dof): it sees no rise under
    15 %, so a 10 % rise cannot be confirmed either way; a doubling is never ok."""
    rng = random.Random(8)
    base = _as_process_rounds(gated_run(rng, per_round=0.08, label="b"))
    same = _as_process_rounds(gated_run(rng, per_round=0.08, label="same"))
    j = latency(gate(same, base, max_rise_pct=10))
    assert j.noise.dof == round(noise.MAD_EFFICIENCY * (GATE_ROUNDS - 1)) + noise.PRIOR_MAX_DOF
    assert "each a fresh process" in j.noise.source
    assert j.verdict == "CANNOT CONFIRM" and j.detectable_pct > 15
    double = _as_process_rounds(gated_run(rng, per_round=0.08, level=2.0, label="x2"))
    assert gate(double, base, max_rise_pct=15).exit_code in (7, 9)


def test_a_baseline_measured_without_gate_keeps_table_times_and_says_why():
    rng = random.Random(7)
    base = [gated_run(rng, per_round=0.05, label=f"b{i}") for i in range(3)]
    base[0].summary.gate_latency = None
    j = latency(gate(gated_run(rng, per_round=0.05, label="c"), base[-1], max_rise_pct=30, history=base[:-1]))
    assert j.how.startswith("table times:") and "measured without --gate" in j.how
    assert "--gate" in (j.not_judged or "")
    assert gate_to_dict(gate(base[1], base[-1]))["judgements"][1]["measured"].startswith("gate rounds")


def test_one_rule_for_the_multiple_a_rough_baseline_never_narrows_the_limit():
    """The issue-31 mismatch: a one-run baseline whose roughness was a little above the prior was judged
    with 2.576 while the prior it replaced was judged with t on its dof, so the limit NARROWED as the
    baseline got rougher.  Now the roughness updates the prior on its effective dof: the limit grows
    with the roughness, and the multiple is t at the pooled dof."""
    p = noise.prior_for("mpi", "bandwidth", "one host")  # 5 % per run on 9 dof
    limits = []
    for r in (0.04, 0.051, 0.06, 0.10, 0.30, 1.0):
        nz = noise.assumed_noise("mpi", "bandwidth", noise.Spread(r, 4, "size-to-size roughness"), "one host")
        assert nz.dof is not None and nz.multiple == noise.noise_multiple(nz.dof)
        limits.append(nz.multiple * (nz.sigma or 0))
    prior = noise.prior_noise("mpi", "bandwidth", system="one host")
    assert limits[0] == pytest.approx(prior.multiple * (prior.sigma or 0))
    assert limits == sorted(limits) and limits[1] >= limits[0]
    assert noise.roughness_dof(noise.Spread(0.1, 4, "x"), "bandwidth") < 1 < noise.roughness_dof(
        noise.Spread(0.1, 6, "x"), "latency")
    assert p.dof == 9


def test_projected_limit_is_the_gates_own_noise_path():
    """`baseline set`'s projections and `check`'s limit are one computation: a baseline of n runs moving
    by sigma gets the limit `gate` gives it (posterior, combine, t)."""
    rng = random.Random(2)
    base = [gated_run(rng, per_round=0.05, label=f"b{i}") for i in range(5)]
    j = latency(gate(base[-1], base[-1], history=base[:-1]))
    # the baseline's own per-run figure, as the verdict states it before pooling with the prior
    measured = re.search(r"\(([0-9.]+)% per run on 4 dof\) pooled with", j.noise.source)
    assert measured is not None, j.noise.source
    per_run = float(measured.group(1)) / 100  # printed as 100 x the log sigma, to 0.1
    want = projected_limit(5, "nccl-tests", "NVIDIA H200", noise.GATED_LATENCY, Metric.TIME, per_run)
    assert j.detectable_pct == pytest.approx(want, rel=0.02)


def test_baseline_set_says_what_it_can_see_and_suggests_runs(tmp_path, capsys):
    """`baseline set` prints the smallest plateau drop and latency rise the baseline lets `check` see -- the
    very figures `check` prints against it -- and, where the latency rise is more than 30 %, the runs that
    would see it, and --gate for table times."""
    db = str(tmp_path / "r.sqlite")
    f = tmp_path / "run.txt"
    f.write_text(show_text(TEMPLATE))
    assert ncclbench_main(["import", "--db", db, str(f)]) == 0
    capsys.readouterr()
    assert ncclbench_main(["baseline", "set", "one", "1", "--db", db]) == 0
    out = capsys.readouterr().out
    j = latency(gate(load_file(f)[0], load_file(f)[0], max_rise_pct=30))
    assert "note: this 1-run baseline can see a plateau drop of" in out
    assert f"a latency rise of {j.detectable_pct:.1f}% or more" in out
    assert "too few runs to see a latency rise of 30%" in out and "--gate" in out
    assert ncclbench_main(["check", "1", "--against", "one", "--db", db, "--max-rise", "30"]) == 9
    assert f"this 1-run baseline can see a latency rise of {j.detectable_pct:.1f}% or more" in capsys.readouterr().out
    lines = baseline_noise_note([load_file(f)[0]], rise_pct=80)
    assert not any("latency rise of 80" in x for x in lines)  # 80 % it can see: nothing suggested


def test_gate_options():
    assert parse_bench_args("all_reduce", ["-b", "8"]).gate_rounds == 0
    assert parse_bench_args("all_reduce", ["--gate"]).gate_rounds == GATE_ROUNDS
    assert parse_bench_args("all_reduce", ["--gate-rounds", "4", "--gate"]).gate_rounds == 4
    assert parse_bench_args("all_reduce", ["--baseline", "nightly"]).gate_rounds == GATE_ROUNDS
    assert parse_bench_args("all_reduce", ["--baseline", "nightly", "--gate-rounds", "0"]).gate_rounds == 0
    with pytest.raises(ArgumentError, match="--gate-rounds"):
        parse_bench_args("all_reduce", ["--gate-rounds", "many"])
    # a measured option: runs with and without rounds are not one experiment (a baseline's history)
    assert "gate_rounds" in parse_bench_args("all_reduce", ["--gate"]).measured()


@pytest.mark.skipif(sys.platform != "linux", reason="the CPU backend's ranks")
def test_a_gated_cpu_run_records_its_rounds_and_leaves_the_table_alone(tmp_path):
    """A real run of two CPU ranks with --gate-rounds 3: the table has the rows a plain run has, one line
    after it says what the rounds did (asked for round jobs, and ncclbench started the ranks, so each round
    was a job of its own, run/gate_processes.py), and the store keeps the rounds the gate reads; a plain run has no such line and
    no rounds."""
    env = {**os.environ, "NCCLBENCH_DB": str(tmp_path / "r.sqlite"), "PYTHONPATH": str(ROOT / "src"),
           "NCCLBENCH_EXPLAIN": "0"}
    args = [sys.executable, "-m", "ncclbench", "all_reduce_perf", "-b", "8", "-e", "128K", "-f", "4", "-n", "5",
            "-w", "1", "-c", "0", "--backend", "mpi", "--nprocs", "2"]
    plain = subprocess.run(args, capture_output=True, text=True, env=env, timeout=240)
    gated = subprocess.run([*args, "--gate-rounds", "3", "-J", str(tmp_path / "g.json")], capture_output=True,
                           text=True, env={**env, "NCCLBENCH_GATE_ROUND_JOBS": "1"}, timeout=240)
    assert plain.returncode == 0 and gated.returncode == 0, gated.stderr[-2000:]
    rows = [[ln.split()[0] for ln in p.stdout.splitlines() if ln.strip() and not ln.startswith("#")]
            for p in (plain, gated)]
    assert rows[0] == rows[1] and len(rows[0]) == 8
    assert "# gate latency" not in plain.stdout
    line = next(ln for ln in gated.stdout.splitlines() if ln.startswith("# gate latency (float sum)"))
    assert "3 rounds, each in a fresh process (the job started again), of 7 sizes 8 B..32 KiB" in line
    assert "the median over sizes of each size's fastest round" in line  # the CPU backend's figure
    c = sqlite3.connect(tmp_path / "r.sqlite")
    sums = [json.loads(x[0]) for x in c.execute("SELECT summary FROM runs ORDER BY id")]
    assert len(sums) == 2  # the round jobs are not stored as runs
    assert sums[0]["gate_latency"] is None
    g = sums[1]["gate_latency"]
    assert g["rounds"] == 3 and len(g["series"][0]["out_of_place"]) == 3 and g["renews"] == "process"
    assert g["series"][0]["sizes"] == [8, 32, 128, 512, 2048, 8192, 32768]
    assert json.loads((tmp_path / "g.json").read_text())["ncclbench"]["gate_latency"]["rounds"] == 3


@pytest.mark.skipif(sys.platform != "linux", reason="the CPU backend's ranks")
def test_under_a_launcher_it_did_not_start_the_rounds_stay_in_the_run(tmp_path):
    """Ranks started by mpiexec itself cannot start the job again, even with round jobs asked for: the
    rounds run in the ranks, each in a duplicated MPI communicator, and the record says a round renews the
    communicator only."""
    from ncclbench.launch.spawn import find_mpiexec

    mpiexec = find_mpiexec()
    if mpiexec is None:
        pytest.skip("no mpiexec")
    env = {**os.environ, "NCCLBENCH_DB": str(tmp_path / "r.sqlite"), "PYTHONPATH": str(ROOT / "src"),
           "NCCLBENCH_EXPLAIN": "0", "NCCLBENCH_GATE_ROUND_JOBS": "1"}
    p = subprocess.run([mpiexec, "-n", "2", sys.executable, "-m", "ncclbench", "all_reduce_perf", "-b", "8", "-e",
                        "8K", "-f", "4", "-n", "5", "-w", "1", "-c", "0", "--backend", "mpi", "--gate-rounds", "2",
                        "-J", str(tmp_path / "g.json")], capture_output=True, text=True, env=env, timeout=240)
    assert p.returncode == 0, p.stderr[-2000:]
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith("# gate latency (float sum)"))
    assert "2 rounds, each in a duplicated MPI communicator" in line
    g = json.loads((tmp_path / "g.json").read_text())["ncclbench"]["gate_latency"]
    assert g["rounds"] == 2 and g["renews"] == "communicator"


class _Lib:
    """Just enough libnccl for NcclWorker.fresh_communicators."""

    def __init__(self):
        from ncclbench.nccl.binding import Capabilities

        self.caps = Capabilities(*([True] * len(Capabilities.__dataclass_fields__)))
        self.made, self.destroyed, self.groups = [], [], 0

    def get_unique_id(self):
        return b"u" * 128

    def make_config(self, **values):
        return values

    def group_start(self):
        self.groups += 1

    def group_end(self):
        pass

    def comm_init_rank(self, nranks, uid, rank, config=None):
        self.made.append((nranks, rank, config))
        return 900 + len(self.made)

    def comm_destroy(self, h):
        self.destroyed.append(h)


def test_nccl_rounds_run_on_fresh_communicators_and_give_the_runs_back():
    """Each round's communicators are new ones of the same ranks, made with the run's own config in one
    group; after the round the run's own are back and the fresh ones destroyed.  -t > 1 or -R: the run's."""
    from test_nccl_worker_cpu import FakeCuda, make_worker

    from ncclbench.core.config import BenchOptions

    lib = _Lib()
    w = make_worker(FakeCuda(), lib, BenchOptions(ngpus=2))
    w.setup.config_values = {"cgaClusterSize": 2}
    before = [(s.handle, s.comm) for s in w.slots]
    with w.fresh_communicators() as how:
        assert how == "in a fresh NCCL communicator"
        assert [s.handle for s in w.slots] == [901, 902] and all(s.comm.handle == s.handle for s in w.slots)
    assert [(s.handle, s.comm) for s in w.slots] == before
    assert lib.destroyed == [901, 902] and lib.groups == 1
    assert [(n, r, c) for n, r, c in lib.made] == [(2, 0, {"cgaClusterSize": 2}), (2, 1, {"cgaClusterSize": 2})]
    w.setup.register_mode = 1
    with w.fresh_communicators() as how:
        assert how.startswith("on the run's communicator (-R")
    assert len(lib.made) == 2


def test_the_gated_figure_per_size_is_the_median_of_rounds_on_gpus_and_the_fastest_on_the_cpu_backend():
    """One declared choice per backend (noise.ROUND_FIGURE): GPU (NCCL runs, imported nccl-tests logs) the
    median of a size's rounds -- on 2x H200 a round's level is drawn per fresh communicator and the fastest
    of 10 flips between levels from run to run -- the CPU backend the fastest round, since its rounds are
    at the floor or lifted whole.  Three rounds, two of them lifted 40 %: the median is the lifted level,
    the fastest the floor; a real rise of every round's cost moves either by that rise."""
    assert [noise.round_figure(b) for b in ("nccl", "nccl-tests", "mpi")] == [
        noise.RoundFigure.MEDIAN, noise.RoundFigure.MEDIAN, noise.RoundFigure.FASTEST]
    floor = {8: 5.0, 64: 5.2, 512: 5.5}
    lifted = [floor, {s: t * 1.4 for s, t in floor.items()}, {s: t * 1.3 for s, t in floor.items()}]
    assert stats.round_profile(lifted, noise.RoundFigure.FASTEST) == floor
    assert stats.round_profile(lifted, noise.RoundFigure.MEDIAN) == pytest.approx({s: t * 1.3 for s, t in floor.items()})
    risen = [{s: t * 1.3 for s, t in r.items()} for r in lifted]
    assert stats.round_profile(risen, noise.RoundFigure.FASTEST) == pytest.approx({s: t * 1.3 for s, t in floor.items()})
    assert stats.round_profile(risen, noise.RoundFigure.MEDIAN) == pytest.approx(
        {s: t * 1.3 * 1.3 for s, t in floor.items()})
    assert noise.min_variance(3) == pytest.approx(0.5595) and noise.min_variance(20) == pytest.approx(0.2745, rel=0.01)


@pytest.mark.parametrize("backend,figure,text", [
    (None, noise.RoundFigure.MEDIAN, "per size the median of its rounds"),
    ("mpi", noise.RoundFigure.FASTEST, "per size the fastest round")])
def test_the_gate_reads_a_gpu_runs_median_of_rounds_and_a_cpu_runs_fastest_round(backend, figure, text):
    """Through the gate: a run's latency figure is, per size, the median of its rounds for a GPU run and
    the fastest round for a CPU-backend run, then the median over sizes; the verdict says which, and the
    prior is that figure's."""
    rng = random.Random(13)
    base = [gated_run(rng, per_round=0.2, label=f"b{i}", backend=backend) for i in range(3)]
    run = gated_run(rng, per_round=0.2, label="c", backend=backend)
    j = latency(gate(run, base[-1], history=base[:-1]))
    assert j.how.endswith(f"; {text}") and j.gated

    def figure_of(r, pick):
        rounds = stats.gate_round_values(r.summary)[("float", "sum", -1)]
        per_size = [pick([x[s] for x in rounds]) for s in sorted(rounds[0]) if s in j.sizes]
        return statistics.median(per_size)

    pick = statistics.median if figure is noise.RoundFigure.MEDIAN else min
    other = min if figure is noise.RoundFigure.MEDIAN else statistics.median
    assert j.value == pytest.approx(figure_of(run, pick)) and j.value != pytest.approx(figure_of(run, other))
    ref = noise.reference_profile([stats.round_profile(stats.gate_round_values(r.summary)[("float", "sum", -1)],
                                                       figure) for r in base])
    assert j.baseline == pytest.approx(statistics.median(ref[s] for s in j.sizes))
    assert text in noise.prior_for(base[0].info.backend, noise.GATED_LATENCY).evidence


def test_the_median_figures_rounds_spread_is_their_mad_around_the_median_times_sqrt_pi_over_2r():
    """noise.median_round_spread against a hand computation.  Run 1, five rounds each lifted whole by
    exp(d), d = 0, 0.10, -0.05, 0.20, 0.02: the per-size median of its rounds is exp(0.02) x the floor, so
    the rounds' shifts are -0.02, 0.08, -0.07, 0.18, 0.00, their median 0, the absolute deviations'
    median 0.07: sigma 1.4826 x 0.07, times sqrt(pi/2 / 5); dof round(0.37 x 4) = 1.  Run 2, three rounds,
    d = 0, 0.1, 0.3: shifts -0.1, 0, 0.2, MAD 0.1, times sqrt(pi/2 / 3), 1 dof.  Pooled on their dof."""
    floor = {8: 5.0, 64: 5.2, 512: 5.5, 4096: 6.1}

    def run(ds):
        return [{s: t * math.exp(d) for s, t in floor.items()} for d in ds]

    one = noise.median_round_spread([run([0, 0.10, -0.05, 0.20, 0.02])], sorted(floor))
    a = 1.4826 * 0.07 * math.sqrt(math.pi / 2 / 5)
    # (MEDIAN_EFFICIENCY is sqrt(pi/2) to 5 digits: 1e-4)
    assert one is not None and one.sigma == pytest.approx(a, rel=1e-4) and one.dof == 1
    b = 1.4826 * 0.10 * math.sqrt(math.pi / 2 / 3)
    both = noise.median_round_spread([run([0, 0.10, -0.05, 0.20, 0.02]), run([0, 0.1, 0.3])], sorted(floor))
    assert both is not None and both.sigma == pytest.approx(math.sqrt((a * a + b * b) / 2), rel=1e-4)
    assert both.dof == 2 and both.what == "rounds' spread around their median"
    # one round lifted far (x 3) does not set it: the MAD of 0, 0, 0, 0, ln 3 around 0 is 0
    calm = noise.median_round_spread([run([0, 0, 0, 0, math.log(3)])], sorted(floor))
    assert calm is not None and calm.sigma == pytest.approx(0.0, abs=1e-12)
    assert noise.median_round_spread([run([0])], sorted(floor)) is None


def test_the_runs_gate_line_states_its_backends_figure():
    """The line after the table gives the figure the gate will read: per size the median of the rounds
    (GPU) or the fastest round (CPU backend), then the median over sizes."""
    from ncclbench.run.gate_rounds import gate_lines

    record = {"rounds": 3, "fresh": "in a fresh NCCL communicator", "loop_us": 2000.0, "seconds": 1.0,
              "iterations": [170], "series": [{"type": "float", "redop": "sum", "root": -1, "sizes": [8, 64, 512],
                                               "out_of_place": [[7.0, 7.2, 7.4], [10.0, 10.4, 10.6], [10.2, 10.5, 10.8]],
                                               "in_place": [[7.0, 7.2, 7.4]] * 3}]}
    med, fast = gate_lines(record, True)[0], gate_lines(record, False)[0]
    assert ": 10.40 us out of place, the median over sizes of each size's median of its rounds" in med
    assert ": 7.20 us out of place, the median over sizes of each size's fastest round" in fast
