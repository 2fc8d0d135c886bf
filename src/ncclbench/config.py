"""The parsed benchmark configuration: nccl-tests' options plus ncclbench's own.

`ncclbench.options.parse_bench_args` fills this from an nccl-tests command
line; everything downstream (harness, backends, output) reads only this.
Defaults are nccl-tests 2.19.6's (behaviour spec §1.2).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class BenchOptions:
    collective: str = "all_reduce"  # registry name (see ncclbench.collectives)
    program: str = "all_reduce_perf"  # argv[0]-like name shown in banner/JSON
    argv: list[str] = field(default_factory=list)  # full command line, for JSON "args"

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
    run_cycles: int = 1  # -N (0 or negative = forever)
    parallel_init: bool = False  # -p
    check: int = 1  # -c
    ops: list[str] = field(default_factory=lambda: ["sum"])  # -o (expanded `all`)
    op_arg: str = "sum"
    datatypes: list[str] = field(default_factory=lambda: ["float"])  # -d (expanded `all`)
    datatype_arg: str = "float"
    root: int = 0  # -r (-1 = every root)
    blocking: int = 0  # -z
    stream_null: bool = False  # -y
    timeout: int = 0  # -T seconds (0 = off)
    cudagraph: int = 0  # -G launches
    report_cputime: bool = False  # -C
    report_timestamps: bool = False  # -S
    output_file: str | None = None  # -J (only a .json suffix activates it)
    average: int = 1  # -a 0 rank0, 1 mean, 2 min, 3 max
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

    # decided at run time: "datatype/op" pairs the backend cannot run (from `all`)
    skip_pairs: list[str] = field(default_factory=list)

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
