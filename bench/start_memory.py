#!/usr/bin/env python3
"""What each step of a GPU run's start costs in resident memory and time, one
fresh process per sequence, steps in the order a run takes them.

Issue 14 asks for a peak RSS within 1.15x nccl-tests'.  A whole-run figure
(bench/stability.py, bench/explain_rss.py) says how far off a run is; this
says where the memory goes: after each step the process' VmRSS and VmHWM
(peak) are read from /proc/self/status, and the step's wall time is taken.

Sequences (each in its own interpreter):
  cuda      import cuda.bindings.runtime; cudaGetDeviceCount; cudaSetDevice(0); cudaFree(0) (context)
  nvrtc     cuda, then import cuda.bindings.nvrtc; nvrtcVersion() (what the kernel cache's key did
            before it named only the source and the architecture)
  kernels   cuda, then ncclbench's DeviceKernels(0) (cubin from the cache, module load)
  nvml      cuda, then import pynvml; nvmlInit; explain's read of every GPU; nvmlShutdown; malloc_trim(0)
  nccl      cuda, then ncclbench's NCCL binding: one communicator of one rank (ncclCommInitRank)

  python bench/start_memory.py [--repeat 3] [--out DIR]    (needs a GPU for all but the imports)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

SEQUENCES = ("cuda", "nvrtc", "kernels", "nvml", "nccl")


def _status() -> tuple[int, int]:
    rss = hwm = 0
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1])
    return rss, hwm


def _child(sequence: str) -> None:
    """Run one sequence in this process; print one JSON line per step."""
    steps: list[dict] = []
    t = time.perf_counter()

    def mark(name: str) -> None:
        nonlocal t
        now = time.perf_counter()
        rss, hwm = _status()
        steps.append({"step": name, "ms": round((now - t) * 1e3, 2), "rss_kb": rss, "hwm_kb": hwm})
        t = time.perf_counter()

    mark("python")
    from cuda.bindings import runtime as rt

    mark("import cuda.bindings.runtime")
    err, n = rt.cudaGetDeviceCount()
    assert int(err) == 0 and n > 0, err
    mark("cudaGetDeviceCount (cuInit)")
    rt.cudaSetDevice(0)
    rt.cudaFree(0)
    mark("primary context")
    if sequence == "nvrtc":
        from cuda.bindings import nvrtc

        mark("import cuda.bindings.nvrtc")
        nvrtc.nvrtcVersion()
        mark("nvrtcVersion (loads libnvrtc)")
    elif sequence == "kernels":
        from ncclbench.cuda.kernels import DeviceKernels

        mark("import ncclbench.cuda.kernels")
        DeviceKernels(0).close()
        mark("DeviceKernels(0) (cache, module load)")
    elif sequence == "nvml":
        import ctypes

        import pynvml

        mark("import pynvml")
        pynvml.nvmlInit()
        mark("nvmlInit")
        from ncclbench.explain import nvml_reader

        mark("import explain.nvml_reader")
        gpus, _, why = nvml_reader.read_gpus(pynvml)  # inits and shuts down once more itself
        mark(f"read_gpus ({len(gpus)} GPUs{', ' + why if why else ''})")
        pynvml.nvmlShutdown()
        mark("nvmlShutdown")
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        mark("malloc_trim(0)")
    elif sequence == "nccl":
        from ncclbench.nccl.binding import get_library

        lib = get_library(None)
        mark("load libnccl")
        comm = lib.comm_init_rank(1, lib.get_unique_id(), 0)
        mark("ncclCommInitRank (1 rank)")
        lib.comm_destroy(comm)
        mark("ncclCommDestroy")
    print(json.dumps(steps))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--child", choices=SEQUENCES, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        _child(a.child)
        return 0
    runs: dict[str, list[list[dict]]] = {s: [] for s in SEQUENCES}
    for _ in range(a.repeat):
        for s in SEQUENCES:
            p = subprocess.run([sys.executable, __file__, "--child", s], capture_output=True, text=True,
                               env=dict(os.environ, NCCL_NVLS_ENABLE="0"), timeout=120)
            if p.returncode != 0:
                print(f"{s}: rc {p.returncode}: {p.stderr.strip()[-300:]}", file=sys.stderr)
                continue
            runs[s].append(json.loads(p.stdout.strip().splitlines()[-1]))
    lines = ["| sequence | step | ms (median) | VmRSS after, MB | change, MB | VmHWM after, MB |",
             "|---|---|---:|---:|---:|---:|"]
    for s, rs in runs.items():
        if not rs:
            continue
        for i, step in enumerate(rs[0]):
            col = [r[i] for r in rs if len(r) > i]
            ms = statistics.median(c["ms"] for c in col)
            rss = statistics.median(c["rss_kb"] for c in col) / 1024
            prev = statistics.median(r[i - 1]["rss_kb"] for r in rs if len(r) > i) / 1024 if i else 0.0
            hwm = statistics.median(c["hwm_kb"] for c in col) / 1024
            lines.append(f"| {s} | {step['step']} | {ms:.1f} | {rss:.1f} | {rss - prev:+.1f} | {hwm:.1f} |")
    text = "\n".join(lines)
    print(text)
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "start_memory.md").write_text(text + "\n")
        (a.out / "start_memory.json").write_text(json.dumps(runs, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
