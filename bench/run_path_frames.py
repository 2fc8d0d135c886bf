#!/usr/bin/env python3
"""How a run's options reach the timed loop, recorded on the CPU backend for the benchmark
and for tune, from the command line (`ncclbench.commands.main(argv)`) to the entry of the
timed loop (`run.timing._timed`).

For each path it prints one JSON object:
  `frames`   the call stack at the timed loop's entry, `commands.main` and `_timed` counted
  `modules`  that stack's modules in call order, consecutive frames of one module merged
  `returns`  modules the stack leaves and comes back to (listed twice in `modules`)
  `trace`    every call between the two, as calls from one module of the package into
             another: `stops` (how many), `modules` (how many distinct), `climbs` (calls into a
             higher layer than the caller's, the layers of tests/test_import_graph.py), `visits`
             (calls into each of the modules called most)

Run:  python bench/run_path_frames.py [bench|tune|both]
The benchmark runs as one process (`--backend mpi`, one rank), once with its defaults (the
store, in a temporary file, and explain on) and once with --no-store --no-explain; tune needs
two ranks, so for
it this script starts itself under the mpiexec next to the interpreter (rank 0 prints).
"""

from __future__ import annotations

import inspect
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH_ARGV = ["all_reduce_perf", "-b", "8", "-e", "8", "-n", "1", "-w", "0", "-c", "0", "--backend", "mpi"]
BARE = ["--no-store", "--no-explain"]  # the benchmark without the store and explain (its `bench-bare` line)
TUNE_ARGV = ["tune", "all_reduce", "-b", "8", "-e", "8", "-n", "2", "-w", "0", "-c", "0", "--rounds", "1",
             "--backend", "mpi", "--no-store"]


def module_chain(stack: list[inspect.FrameInfo]) -> tuple[int, list[str]]:
    """(frames from commands.main to the timed loop, both counted; the modules of those frames
    in call order, consecutive frames of one module merged)."""
    frames = list(reversed(stack))  # outermost first; the last is the recorder standing in for _timed
    start = next(i for i, f in enumerate(frames)
                 if f.function == "main" and f.filename.endswith(os.path.join("commands", "__init__.py")))
    chain = frames[start:]
    names = [str(f.frame.f_globals.get("__name__", "?")) for f in chain[:-1]] + ["ncclbench.run.timing"]
    modules: list[str] = []
    for name in names:
        if not modules or modules[-1] != name:
            modules.append(name)
    return len(chain), modules


def returns(modules: list[str]) -> list[str]:
    """Modules that appear in more than one run of the chain, in the order they come back."""
    seen: set[str] = set()
    back = []
    for m in modules:
        if m in seen and m not in back:
            back.append(m)
        seen.add(m)
    return back


LAYER_OF = {"commands": 0, "cli": 0, "__main__": 0, "benchmark": 1, "explain": 1, "health": 1, "tune": 1, "run": 2,
            "backends": 3, "launch": 4, "output": 5, "store": 5, "report": 5, "collectives": 6, "cuda": 6,
            "nccl": 6, "core": 7}


def layer(module: str) -> int:
    """0 for the entry layer, growing downwards (tests/test_import_graph.py's LAYERS)."""
    parts = module.split(".")
    return LAYER_OF.get(parts[1] if len(parts) > 1 else "core", 7)


class Trace:
    """Calls from one module of the package into another, until the timed loop is entered."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.on = True

    def __call__(self, frame, event, arg):  # sys.setprofile's hook
        if event != "call" or not self.on or frame.f_code.co_name == "<module>":
            return
        callee = str(frame.f_globals.get("__name__", ""))
        if not callee.startswith("ncclbench."):
            return
        caller_frame = frame.f_back
        while caller_frame is not None and not str(caller_frame.f_globals.get("__name__", "")).startswith("ncclbench"):
            caller_frame = caller_frame.f_back
        caller = str(caller_frame.f_globals.get("__name__", "")) if caller_frame is not None else ""
        if caller.startswith("ncclbench") and caller != callee:
            self.calls.append((caller, callee))

    def summary(self) -> dict:
        visits: dict[str, int] = {}
        for _, callee in self.calls:
            visits[callee] = visits.get(callee, 0) + 1
        top = dict(sorted(visits.items(), key=lambda kv: -kv[1])[:8])
        climbs = [f"{a} -> {b}" for a, b in self.calls if layer(b) < layer(a)]
        return {"stops": len(self.calls), "modules": len({m for c in self.calls for m in c}),
                "climbs": len(climbs), "visits": top, "climbed": sorted(set(climbs))}


def probe(argv: list[str]) -> dict:
    """Run `ncclbench argv` here with the timed loop's entry recorded (the first one)."""
    from ncclbench import commands
    from ncclbench.run import timing

    seen: list[tuple[int, list[str]]] = []
    real = timing._timed
    trace = Trace()

    def recording(*args, **kwargs):
        if not seen:
            trace.on = False
            seen.append(module_chain(inspect.stack()))
        return real(*args, **kwargs)

    timing._timed = recording
    with tempfile.TemporaryDirectory() as tmp:
        argv = [*argv, "--out", str(Path(tmp) / "t")] if argv[0] == "tune" else argv
        sys.setprofile(trace)
        try:
            code = commands.main(argv)
        finally:
            sys.setprofile(None)
    timing._timed = real
    if not seen:
        raise SystemExit(f"ncclbench {' '.join(argv)}: exit {code}, the timed loop was never entered")
    frames, modules = seen[0]
    return {"argv": argv[:2], "exit": code, "frames": frames, "modules": modules, "returns": returns(modules),
            "trace": trace.summary()}


def under_mpiexec(what: str) -> dict:
    exe = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")
    if exe is None:
        raise SystemExit("tune needs two ranks: no mpiexec found")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
               NCCLBENCH_NO_STORE="1")
    p = subprocess.run([exe, "-n", "2", sys.executable, __file__, what, "--rank"], capture_output=True, text=True,
                       env=env, timeout=300)
    found = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not found:
        raise SystemExit(f"mpiexec -n 2 {what}: exit {p.returncode}\n{p.stdout}\n{p.stderr}")
    return json.loads(found[-1])


def main() -> None:
    what = sys.argv[1] if len(sys.argv) > 1 else "both"
    if "--rank" in sys.argv:  # one rank of the tune job
        result = probe(TUNE_ARGV)
        if os.environ.get("PMI_RANK", "0") == "0":
            print(json.dumps(result), flush=True)
        return
    if what in ("bench", "both"):
        with tempfile.TemporaryDirectory() as tmp:  # the store on (in a file of its own) and explain on
            os.environ["NCCLBENCH_DB"] = str(Path(tmp) / "runs.sqlite")
            os.environ.pop("NCCLBENCH_NO_STORE", None)
            print(json.dumps(probe(BENCH_ARGV)), flush=True)
            print(json.dumps(probe([*BENCH_ARGV, *BARE])), flush=True)
    if what in ("tune", "both"):
        print(json.dumps(under_mpiexec("tune")), flush=True)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "src"))
    main()
