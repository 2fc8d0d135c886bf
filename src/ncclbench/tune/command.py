"""`ncclbench tune`: where the job runs, and --verify after it.

Like a plain benchmark: with `--nprocs N` (or one process per visible GPU)
and no launcher around, N ranks of `ncclbench tune ...` are started here and
this process waits; under a launcher this process is one rank.  The parent
checks the environment once before starting anything, and after a
successful job runs --verify (ordinary runs, which need a parent that can
start jobs: hence not under an external launcher).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..errors import BenchError, ExitCode
from .options import TUNE_HELP, TuneOptions, parse_tune_args


def run_tune(program: str, argv: list[str]) -> int:
    from ..backends.select import choose_backend
    from ..launch.detect import detect_launch
    from ..options import HelpRequested
    from .job import check_environment, run_tune_here

    try:
        topts = parse_tune_args(program, argv)
    except HelpRequested as h:
        print(h.text.replace("USAGE: ", "USAGE: ncclbench tune ", 1), end="")
        print(TUNE_HELP, end="", flush=True)
        return int(h.exit_code)
    backend, note = choose_backend(topts.bench.backend, topts.bench.nccl_lib)
    launch = detect_launch()
    if launch.kind != "single":
        return run_tune_here(topts, backend, launch, note)
    check_environment(topts, backend)
    result_path = Path(topts.out_prefix() + ".json")
    before = _mtime(result_path)  # a tune that measures nothing (one rank) writes no result
    nprocs = topts.bench.nprocs
    if nprocs is None and str(getattr(backend, "value", backend)) == "nccl":
        from ..benchmark import self_launch_count

        n = self_launch_count(topts.bench)
        nprocs = n if n > 1 else None
    if nprocs:
        from ..benchmark import spawn
        from ..launch.spawn import strip_nprocs

        child = strip_nprocs(topts.child_args())
        if "--backend" not in child:
            child += ["--backend", str(getattr(backend, "value", backend))]
        code = spawn(backend, nprocs, child, note)
    else:
        code = run_tune_here(topts, backend, launch, note)
    if code == 0 and topts.verify:
        if _mtime(result_path) in (None, before):
            print("# tune --verify: nothing to verify: this tune wrote no result (see the line above)", flush=True)
            return code
        code = run_verify(topts, str(getattr(backend, "value", backend)), nprocs)
    return code


def _mtime(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None


def run_verify(topts: TuneOptions, backend: str, nprocs: int | None) -> int:
    """--verify on the tune result the job wrote; updates its JSON file."""
    from .result import TuneResult
    from .verify import subprocess_runner, verify

    path = Path(topts.out_prefix() + ".json")
    try:
        doc = json.loads(path.read_text())
        result = TuneResult.from_json(doc)
    except (OSError, ValueError) as e:
        raise BenchError(f"tune --verify: cannot read the tune result {path}: {e}", ExitCode.INTERNAL) from None

    def log(line: str) -> None:
        print(f"# verify run: {line}", file=sys.stderr, flush=True)

    runner = subprocess_runner(topts.program, backend, nprocs, log)
    section = verify(result, topts.bench_args, topts.verify_rounds, runner)
    doc["verify"] = section
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"# verify results added to {path}", flush=True)
    if section["bands"] and not section["all_confirmed"]:
        return int(ExitCode.DATA_ERRORS)
    return 0
