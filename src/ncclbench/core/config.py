"""The parsed benchmark configuration: nccl-tests' options plus ncclbench's own.

`ncclbench.run.bench_args.parse_bench_args` makes this from an nccl-tests command
line (and the importers from nccl-tests output); it is frozen: what the user
asked for, recorded as asked.  What a run actually does (the collective, the
size range after nccl-tests' memory clamp, the datatype/op pairs the backend
can run, ...) is derived once, in `ncclbench.run.plan.RunPlan`.
Defaults are nccl-tests 2.19.6's (docs/behaviour.md).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import Enum, IntEnum


class Backend(str, Enum):
    """Which backend runs the collectives (`--backend auto` is resolved to one
    of these by `backends.select.choose_backend` before anything starts)."""

    NCCL = "nccl"
    MPI = "mpi"

    @property
    def label(self) -> str:
        """How a report names it (health's verdict head, its JSON and stored scans)."""
        return _BACKEND_LABELS[self]


_BACKEND_LABELS = {Backend.NCCL: "NCCL (GPU)", Backend.MPI: "CPU backend (MPI)"}
# `--backend`'s choices: `auto`, resolved by `backends.select.choose_backend`, and each Backend
BACKEND_CHOICES = ("auto", *(b.value for b in Backend))


# The gate's latency rounds (`--gate`, run/gate_rounds.py): how many a gated run makes unless
# --gate-rounds says.  The figure is per size the median of its rounds on GPUs, the fastest round on
# the CPU backend (store/noise.ROUND_FIGURE says why): on 2x H200 a round's level is drawn per fresh
# communicator, and 10 rounds kept the median of rounds at 2.1-4.2 % per run (bench/results/
# gate-latency-2026-11-28-pm/); on fresh communicators a round costs about 0.5 s on 1x H200
# (14 runs of 5 rounds: 4.4 s a gated run, bench/results/gate-rounds-1xH200-2026-11-28/); a gated run
# of 10 rounds took 9.2-10.3 s on 2x H200.
GATE_ROUNDS = 10
GATE_ROUNDS_MAX = 100


# Fields of BenchOptions that say where results go or how the run is shown and judged, not what is
# measured: the command line as typed, -J/--csv/--metrics files, the store and its baseline, explain
# and its trap policy, and --nprocs (the rank count is compared as such).  A baseline's history
# (`baseline set NAME RUN --runs N`) must not split on them.
OUTPUT_ONLY_OPTIONS = frozenset({"argv", "output_file", "csv_file", "metrics_file", "store", "baseline",
                                 "explain", "fail_on_trap", "nprocs"})


class Blocking(IntEnum):
    """-z: what the host does between timed operations (nccl-tests' 0/1, and the two modes
    ncclbench adds; the banner of each is output/text.py's BLOCKING_BANNERS)."""

    NONE = 0  # enqueue every op, wait once at the end (nccl-tests' default)
    WAIT_BARRIER_EACH_OP = 1  # wait and barrier after each inner iteration (-m), as nccl-tests -z 1
    WAIT_EACH_OP = 2  # wait after each inner iteration (-m), no barrier
    TIME_EACH_ITERATION = 3  # wait and barrier after each outer iteration (-n); time excludes the barrier


class Average(IntEnum):
    """-a: which rank's time the table prints, as nccl-tests."""

    RANK0 = 0
    MEAN = 1
    MIN = 2
    MAX = 3


@dataclass(frozen=True)
class BenchOptions:
    collective: str = "all_reduce"  # registry name (see ncclbench.collectives)
    program: str = "all_reduce_perf"  # argv[0]-like name shown in banner/JSON
    argv: tuple[str, ...] = ()  # full command line, for JSON "args"

    # nccl-tests options (short letter in comments)
    nthreads: int = 1  # -t
    ngpus: int = 1  # -g
    min_bytes: int = 32 * 1024 * 1024  # -b
    max_bytes: int = 32 * 1024 * 1024  # -e
    step_bytes: int = 1024 * 1024  # -i
    step_factor: int = 1  # -f (integer; <= 1 means additive steps)
    iters: int = 20  # -n
    agg_iters: int = 1  # -m
    warmup_iters: int = 1  # -w
    run_cycles: int = 1  # -N (0 = forever)
    parallel_init: bool = False  # -p
    check: int = 1  # -c
    ops: tuple[str, ...] = ("sum",)  # -o (expanded `all`)
    op_arg: str = "sum"
    datatypes: tuple[str, ...] = ("float",)  # -d (expanded `all`)
    datatype_arg: str = "float"
    root: int = 0  # -r (-1 = every root)
    blocking: int = Blocking.NONE  # -z (Blocking)
    stream_null: bool = False  # -y
    timeout: int = 0  # -T seconds (0 = off)
    cudagraph: int = 0  # -G launches
    report_cputime: bool = False  # -C
    report_timestamps: bool = False  # -S
    output_file: str | None = None  # -J (only a .json suffix activates it)
    average: int = Average.MEAN  # -a (Average)
    local_register: int = 0  # -R
    cta_policy: int | None = None  # -x
    device_implementation: int = 0  # -D
    device_cta_count: int = 16  # -V
    memory_report: bool = False  # -M
    unalign: int = 0  # -u (elements)
    per_iter_timing: bool = False  # -I
    per_iter_skip: int = 0  # -K

    # ncclbench additions
    backend: str = "auto"  # --backend {auto,nccl,mpi}
    nprocs: int | None = None  # --nprocs N: start N local processes
    nccl_lib: str | None = None  # --nccl-lib PATH
    store: bool = True  # --no-store opts out of the result store
    baseline: str | None = None  # --baseline NAME
    explain: bool = True  # --no-explain (or NCCLBENCH_EXPLAIN=0): the run is not judged, nccl-tests' output alone
    fail_on_trap: str | None = None  # --fail-on-trap error|warn: such a trap ends the run with exit 7
    cpu_bind: str = "none"  # --cpu-bind {none,numa,core}: run on the GPU's NUMA-local cores (core: one)
    metrics_file: str | None = None  # --metrics FILE: Prometheus text (output/metrics.py)
    csv_file: str | None = None  # --csv FILE: the table as CSV (output/csvout.py)
    # --gate / --gate-rounds N (and --baseline NAME, unless --gate-rounds says otherwise): after the sweep,
    # the sizes <= 64 KiB are measured again for the regression gate in this many rounds (0: not;
    # run/gate_rounds.py).  A measured option: runs with and without rounds are different experiments.
    gate_rounds: int = 0

    def measured(self) -> dict[str, object]:
        """The options that change what is measured, as a dict: every field but those of
        OUTPUT_ONLY_OPTIONS.  Two runs with equal dicts (and equal ranks, hosts and NCCL settings)
        are one experiment, whatever files they wrote or how their output was shown."""
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in OUTPUT_ONLY_OPTIONS}

    def __post_init__(self) -> None:
        # Sequences arrive as lists from JSON (the store, imports): keep them immutable too.
        for name in ("argv", "ops", "datatypes"):
            object.__setattr__(self, name, tuple(getattr(self, name)))

    @property
    def json_enabled(self) -> bool:
        """-J is active only for a path whose extension is `json` (case-insensitive)."""
        if not self.output_file:
            return False
        tail = self.output_file.rsplit("/", 1)[-1]
        if "." not in tail:
            return False
        ext = tail.rsplit(".", 1)[1]
        return ext.lower() == "json"
