"""`ncclbench tune COLLECTIVE [nccl-tests options] [tune options]`: the command line.

The benchmark options are nccl-tests' own (`ncclbench.run.bench_args`, getopt
quirks included), so tune's few options are taken out first and the rest is
handed to that parser unchanged: `-b 8 -e 64M -f 2 -n 20 -d float` mean what
they mean in a plain run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..core.config import BenchOptions
from ..core.errors import ArgumentError
from .candidates import parse_ctas, split_names

# option -> takes a value
TUNE_OPTIONS = {"--algos": True, "--protos": True, "--ctas": True, "--rounds": True, "--verify": False,
                "--verify-rounds": True, "--out": True, "--report": True}

TUNE_HELP = """tune options (besides every nccl-tests option and --backend/--nprocs/--nccl-lib/--no-store):
  --algos LIST        algorithms to try (NCCL: Tree,Ring,NVLS,...; MPICH: its names, e.g.
                      recursive_doubling,ring); default: every one the library knows; 'auto' keeps
                      the library's choice on this axis
  --protos LIST       NCCL protocols to try (LL,LL128,Simple; default all; 'auto' as above)
  --ctas LIST         NCCL CTA (channel) counts to try, e.g. 4,8,16 (ncclConfig_t minCTAs=maxCTAs)
  --rounds N          interleaved rounds per size (default 5, the fewest that can claim a gain;
                      -n is split over them)
  --verify            re-run default vs each winning setting as ordinary runs and confirm the gain
  --verify-rounds N   ordinary runs per setting in --verify, alternating (default 2)
  --out PREFIX        write PREFIX.json, PREFIX.env and (NCCL) PREFIX.conf
                      (default: ncclbench-tune-<collective> in a tune/ folder beside the
                      result store, ~/.local/share/ncclbench/tune/ unless NCCLBENCH_DB moves it)
  --report PATH       also write an HTML report: busbw vs size, one line per candidate
"""


@dataclass(frozen=True)
class TuneOptions:
    bench: BenchOptions
    program: str  # the collective as typed (all_reduce or all_reduce_perf)
    bench_args: tuple[str, ...]  # the nccl-tests part of the command line
    algos: tuple[str, ...] | None = None
    protos: tuple[str, ...] | None = None
    ctas: tuple[int, ...] | None = None
    rounds: int | None = None
    verify: bool = False
    verify_rounds: int = 2
    out: str | None = None
    report: str | None = None

    def out_prefix(self) -> str:
        """--out, else ncclbench-tune-<collective> in a `tune` folder beside the result store: not the
        working directory, which a tune started from a checkout or $HOME would litter."""
        if self.out:
            return self.out
        from ..store.db import default_db_path

        return str(default_db_path().parent / "tune" / f"ncclbench-tune-{self.bench.collective}")

    def make_default_dir(self) -> None:
        """Create the default folder of out_prefix (a folder given with --out must exist already)."""
        if not self.out:
            Path(self.out_prefix()).parent.mkdir(parents=True, exist_ok=True)

    def child_args(self) -> list[str]:
        """The command line each started rank gets (--nprocs is stripped by the caller)."""
        argv = ["tune", self.program, *self.bench_args]
        for flag, value in (("--algos", self.algos), ("--protos", self.protos), ("--ctas", self.ctas)):
            if value is not None:
                argv += [flag, ",".join(map(str, value))]
        if self.rounds is not None:
            argv += ["--rounds", str(self.rounds)]
        argv += ["--out", self.out_prefix()]
        if self.report is not None:
            argv += ["--report", self.report]
        return argv


def split_tune_args(args: list[str]) -> tuple[dict[str, str | bool], list[str]]:
    """(tune options found, the remaining nccl-tests arguments); '--x v' and '--x=v'."""
    own: dict[str, str | bool] = {}
    rest: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        name, eq, value = a.partition("=")
        if name in TUNE_OPTIONS:
            if not TUNE_OPTIONS[name]:
                if eq:
                    raise ArgumentError(f"tune: {name} takes no value")
                own[name] = True
            elif eq:
                own[name] = value
            elif i + 1 < len(args):
                own[name] = args[i + 1]
                i += 1
            else:
                raise ArgumentError(f"tune: {name} needs a value")
        else:
            rest.append(a)
        i += 1
    return own, rest


def _positive(text: str, option: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise ArgumentError(f"tune: invalid value '{text}' for '{option}' (need an integer >= 1)")
    return int(text)


def parse_tune_args(program: str, args: list[str]) -> TuneOptions:
    """Parse a tune command line (everything after `tune`'s collective).
    Raises run.bench_args.HelpRequested for -h, like a plain run."""
    from ..run.bench_args import parse_bench_args

    own, rest = split_tune_args(args)
    bench = parse_bench_args(program, rest)
    if len(bench.datatypes) != 1 or (len(bench.ops) != 1):
        raise ArgumentError("tune measures one datatype and one op: give -d TYPE and -o OP, not 'all'")
    if bench.per_iter_timing:
        raise ArgumentError("tune: -I (per-iteration timing) is not used by tune; leave it out")
    if bench.nthreads != 1:
        raise ArgumentError("tune runs one thread per process (-t 1); use -g for several GPUs per process")
    algos = split_names(own.get("--algos"), "--algos")  # type: ignore[arg-type]
    protos = split_names(own.get("--protos"), "--protos")  # type: ignore[arg-type]
    ctas = parse_ctas(own.get("--ctas"))  # type: ignore[arg-type]
    rounds = _positive(own["--rounds"], "--rounds") if "--rounds" in own else None  # type: ignore[arg-type]
    vrounds = _positive(own["--verify-rounds"], "--verify-rounds") if "--verify-rounds" in own else 2  # type: ignore[arg-type]
    return TuneOptions(bench=bench, program=program, bench_args=tuple(rest),
                       algos=tuple(algos) if algos else None, protos=tuple(protos) if protos else None,
                       ctas=tuple(ctas) if ctas else None, rounds=rounds, verify=bool(own.get("--verify")),
                       verify_rounds=vrounds, out=own.get("--out"),  # type: ignore[arg-type]
                       report=own.get("--report"))  # type: ignore[arg-type]
