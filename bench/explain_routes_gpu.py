"""GPU check of the two routes to NCCL's per-size choice, and of what they cost the timed loop.

One process drives every visible GPU (or --ngpus), one communicator over them.

  route check (default): NCCL's log captured in phases (explain.log_capture:
      init / timed / probe files) and ncclbench's profiler plugin loaded through
      NCCL_PROFILER_PLUGIN; one untimed all_reduce per size inside the probe
      phase with the plugin recording; then both routes' size ranges
      (explain.nccl_log.per_size_choices) side by side, and whether they agree.
      With one GPU NCCL chooses nothing (it copies locally): both say so, and the
      plugin still shows it was loaded (api_version, live_comms).
  --time: small and 1 MiB all_reduce, host-timed loops, with the feature set-up
      (plugin loaded, log capture in its `timed` phase, mask 0) or without
      (--plain); --alternate K runs K pairs of separate processes, alternating,
      and prints the medians and their ratio.

    python bench/explain_routes_gpu.py --out /tmp/routes            # needs >= 2 GPUs for choices
    python bench/explain_routes_gpu.py --alternate 6 --out /tmp/routes_time

Writes OUT/result.json (and OUT/logs/, the captured NCCL files).  Record what
you rely on under bench/results/ with device, NCCL version, command and date.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

FLOAT32, SUM = 7, 0


def build_plugin(out: Path) -> str:
    from ncclbench.explain.profiler import _HERE, built_plugin

    path = built_plugin()
    if path:
        return path
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise SystemExit("no built profiler plugin and no C compiler")
    so = out / "libnccl-profiler-ncclbench.so"
    subprocess.run([cc, "-O2", "-shared", "-fPIC", "-fvisibility=hidden", "-o", str(so),
                    os.path.join(_HERE, "csrc", "ncclbench_profiler.c"), "-lpthread"], check=True)
    return str(so)


def setup(ngpus: int | None, feature: bool, out: Path):
    from ncclbench.cuda.runtime import get_runtime
    from ncclbench.explain import log_capture as lc
    from ncclbench.explain.profiler import ProfilerControl, plan_profiler
    from ncclbench.nccl.binding import NcclLibrary

    lib = NcclLibrary.load()
    rt = get_runtime()
    control = phases = plan = prof = None
    notes = []
    if feature:
        logs = out / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        plan = lc.plan_capture(os.environ, str(logs), reset_available=hasattr(lib.handle, "ncclResetDebugInit"))
        phases = lc.LogPhases(lib.handle, plan)
        phases.begin()
        notes += list(plan.notes)
        v = lib.version_code
        prof = plan_profiler(os.environ, (v // 10000, v % 10000 // 100), build_plugin(out))
        notes.append(prof.reason)
        os.environ.update(prof.env)
    n = ngpus or rt_count(rt)
    uid = lib.get_unique_id()
    comms, streams = [], []
    lib.group_start()
    for r in range(n):
        rt.set_device(r)
        streams.append(rt.stream_create())
        comms.append(lib.comm_init_rank(n, uid, r))
    lib.group_end()
    if feature and prof.use:
        control = ProfilerControl(prof.env["NCCL_PROFILER_PLUGIN"])
    if phases is not None:
        phases.enter("timed")
    return lib, rt, comms, streams, control, phases, plan, notes


def rt_count(rt) -> int:
    from ncclbench.backends.select import gpu_count

    return gpu_count()


def all_reduce(lib, rt, comms, streams, bufs, count):
    lib.group_start()
    for r, comm in enumerate(comms):
        lib.all_reduce(bufs[r][0], bufs[r][1], count, FLOAT32, SUM, comm, streams[r])
    lib.group_end()


def sync(rt, streams):
    for r, s in enumerate(streams):
        rt.set_device(r)
        rt.stream_synchronize(s)


def route_check(args, out: Path) -> dict:
    from ncclbench.explain.log_capture import read_capture
    from ncclbench.explain.nccl_log import NcclLogFacts, per_size_choices
    from ncclbench.explain.profiler import events_to_choices

    lib, rt, comms, streams, control, phases, plan, notes = setup(args.ngpus, True, out)
    sizes = []
    s = 8
    while s <= args.max_bytes:
        sizes.append(s)
        s *= 4
    bufs = []
    for r in range(len(comms)):
        rt.set_device(r)
        bufs.append((rt.malloc(sizes[-1]), rt.malloc(sizes[-1])))
    for size in sizes:  # warm-up, untimed, timed phase: nothing per call is logged
        all_reduce(lib, rt, comms, streams, bufs, size // 4)
    sync(rt, streams)
    phases.enter("probe")
    with control.collecting() if control else _null():
        for size in sizes:
            all_reduce(lib, rt, comms, streams, bufs, size // 4)
        sync(rt, streams)
    phases.enter("timed")
    time.sleep(0.2)
    facts = read_capture(plan)
    result = {"ngpus": len(comms), "nccl": lib.version, "notes": notes, "sizes": sizes,
              "log_route": per_size_choices(facts, "AllReduce"), "log_unknown": facts.unknown,
              "net_plugin": facts.net_plugin, "nchannels": facts.nchannels,
              "model_table_allreduce": {f"{a}/{p}": v for (a, p), v in facts.tuning_table.get("AllReduce", {}).items()}}
    if control is not None:
        events = control.drain()
        choices, unknown = events_to_choices(events)
        pf = NcclLogFacts(per_call=[c for c in choices if c.func == "AllReduce"])
        result.update(profiler_route=per_size_choices(pf, "AllReduce"), profiler_unknown=unknown,
                      profiler_events=len(events), profiler_api=control.api_version,
                      profiler_live_comms=control.live_comms, profiler_dropped=control.dropped)
        result["routes_agree"] = result["profiler_route"] == result["log_route"] if events else None
    return result


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def timing(args, out: Path) -> dict:
    lib, rt, comms, streams, control, phases, plan, notes = setup(args.ngpus, not args.plain, out)
    res = {"mode": "plain" if args.plain else "feature", "ngpus": len(comms)}
    for size in (8, 1 << 20):
        bufs = []
        for r in range(len(comms)):
            rt.set_device(r)
            bufs.append((rt.malloc(size), rt.malloc(size)))
        for _ in range(20):
            all_reduce(lib, rt, comms, streams, bufs, size // 4)
        sync(rt, streams)
        t0 = time.perf_counter()
        for _ in range(args.iters):
            all_reduce(lib, rt, comms, streams, bufs, size // 4)
        sync(rt, streams)
        res[f"us_per_op_{size}"] = (time.perf_counter() - t0) / args.iters * 1e6
    return res


def alternate(args, out: Path) -> dict:
    runs = {"plain": [], "feature": []}
    for k in range(args.alternate):
        for mode in ("plain", "feature") if k % 2 == 0 else ("feature", "plain"):
            d = out / f"{mode}{k}"
            d.mkdir(parents=True, exist_ok=True)
            cmd = [sys.executable, __file__, "--time", "--out", str(d), "--iters", str(args.iters)]
            cmd += ["--plain"] if mode == "plain" else []
            cmd += ["--ngpus", str(args.ngpus)] if args.ngpus else []
            env = {k2: v for k2, v in os.environ.items() if not k2.startswith("NCCL_DEBUG")}
            p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
            if p.returncode:
                raise SystemExit(p.stderr[-3000:])
            runs[mode].append(json.loads(p.stdout.splitlines()[-1]))
    summary = {}
    for key in ("us_per_op_8", "us_per_op_1048576"):
        a = statistics.median(r[key] for r in runs["plain"])
        b = statistics.median(r[key] for r in runs["feature"])
        summary[key] = {"plain_median": a, "feature_median": b, "ratio": b / a}
    return {"runs": runs, "summary": summary}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--ngpus", type=int)
    ap.add_argument("--max-bytes", type=int, default=256 << 20)
    ap.add_argument("--time", action="store_true")
    ap.add_argument("--plain", action="store_true")
    ap.add_argument("--iters", type=int, default=500)
    ap.add_argument("--alternate", type=int, default=0)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.alternate:
        res = alternate(args, args.out)
    elif args.time:
        res = timing(args, args.out)
    else:
        res = route_check(args, args.out)
    (args.out / "result.json").write_text(json.dumps(res, indent=1, default=str))
    print(json.dumps(res, default=str))


if __name__ == "__main__":
    main()
