#!/usr/bin/env python3
"""Make one GPU slow the way a real fault does, without touching its settings:
a memory-bound kernel of ncclbench's own runs on it, back to back, for a bounded time.

    python bench/gpu_hog.py --device 1 --seconds 60 [--mib 1024] [--duty 0.2]

Why this and not clocks or power limits: changing device settings needs
privileges, outlives a crashed script and is exactly what the brief forbids
(`nvidia-smi -lgc/-pl` stay untouched).  A concurrent process streaming its
own buffers takes a share of the GPU's HBM bandwidth and of its time slices
(contexts of different processes time-slice the GPU unless MPS is running),
so every collective that touches this GPU slows down - a slow GPU as a
health scan sees it.  The kernel is compiled with NVRTC and launched through
the driver API, like ncclbench's fill/check kernels (`ncclbench.cuda.kernels`).

Prints one line "gpu_hog: running on device N ..." on stderr once the first
kernel has run (a caller waits for it), and at the end one JSON line on stdout:
{"device", "seconds", "launches", "bytes_moved", "gbps"} (read + write bytes
per second).  Ends by itself after --seconds; SIGTERM/SIGINT end it sooner,
with the same summary.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

SOURCE = r"""
extern "C" __global__ void ncclbench_hog_copy(const unsigned long long* __restrict__ src,
                                              unsigned long long* __restrict__ dst,
                                              unsigned long long n, int passes) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (int p = 0; p < passes; ++p)
        for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
            dst[i] = src[i] + (unsigned long long)p;
}
"""
THREADS = 256
PASSES = 4  # copies of the buffer per launch: a launch is a few ms, the GPU stays busy between launches


def _ck(drv, result, what: str):
    err, rest = (result[0], result[1:]) if isinstance(result, tuple) else (result, ())
    if err != drv.CUresult.CUDA_SUCCESS:
        _, name = drv.cuGetErrorName(err)
        raise SystemExit(f"gpu_hog: CUDA error {name.decode() if isinstance(name, bytes) else err} in {what}")
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else rest


def hog(device: int, seconds: float, mib: int, duty: float = 1.0) -> dict:
    """Run the copy kernel on `device` for `seconds`, busy `duty` of the time (a lighter
    slowdown: each batch of launches is followed by a pause); what it did."""
    from cuda.bindings import driver as drv

    from ncclbench.cuda.kernels import compile_cubin

    _ck(drv, drv.cuInit(0), "cuInit")
    dev = _ck(drv, drv.cuDeviceGet(device), f"cuDeviceGet({device})")
    attr = drv.CUdevice_attribute
    major = _ck(drv, drv.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), "attr")
    minor = _ck(drv, drv.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev), "attr")
    sms = _ck(drv, drv.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev), "attr")
    ctx = _ck(drv, drv.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
    _ck(drv, drv.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    module = _ck(drv, drv.cuModuleLoadData(compile_cubin(SOURCE, f"sm_{major}{minor}")), "cuModuleLoadData")
    fn = _ck(drv, drv.cuModuleGetFunction(module, b"ncclbench_hog_copy"), "cuModuleGetFunction")
    nbytes = mib << 20
    src = _ck(drv, drv.cuMemAlloc(nbytes), "cuMemAlloc")
    dst = _ck(drv, drv.cuMemAlloc(nbytes), "cuMemAlloc")
    _ck(drv, drv.cuMemsetD8(src, 1, nbytes), "cuMemsetD8")
    stream = _ck(drv, drv.cuStreamCreate(1), "cuStreamCreate")  # CU_STREAM_NON_BLOCKING
    n = nbytes // 8
    args = [ctypes.c_uint64(int(src)), ctypes.c_uint64(int(dst)), ctypes.c_uint64(n), ctypes.c_int(PASSES)]
    ptrs = (ctypes.c_void_p * len(args))(*[ctypes.addressof(a) for a in args])
    blocks = sms * 8
    stop = {"now": False}

    def on_signal(signum, frame):
        stop["now"] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    def launch():
        _ck(drv, drv.cuLaunchKernel(fn, blocks, 1, 1, THREADS, 1, 1, 0, stream, ctypes.addressof(ptrs), 0),
            "cuLaunchKernel")

    launch()
    _ck(drv, drv.cuStreamSynchronize(stream), "cuStreamSynchronize")
    launches = 1
    print(f"gpu_hog: running on device {device} ({sms} SMs, 2 x {mib} MiB, {PASSES} copies per launch) "
          f"for {seconds:g} s", file=sys.stderr, flush=True)
    t0 = time.monotonic()
    end = t0 + seconds
    while not stop["now"] and time.monotonic() < end:
        tb = time.monotonic()
        for _ in range(4):  # a few launches queued, then wait: the queue never runs dry, the end stays bounded
            launch()
        launches += 4
        _ck(drv, drv.cuStreamSynchronize(stream), "cuStreamSynchronize")
        if duty < 1.0:  # idle (1 - duty) / duty of the time the batch took
            pause = (time.monotonic() - tb) * (1.0 - duty) / duty
            time.sleep(max(0.0, min(pause, end - time.monotonic())))
    elapsed = time.monotonic() - t0
    moved = 2 * nbytes * PASSES * (launches - 1)
    drv.cuStreamDestroy(stream)
    drv.cuMemFree(src)
    drv.cuMemFree(dst)
    drv.cuModuleUnload(module)
    drv.cuDevicePrimaryCtxRelease(dev)
    return {"device": device, "seconds": round(elapsed, 3), "duty": duty, "launches": launches, "bytes_moved": moved,
            "gbps": round(moved / elapsed / 1e9, 1) if elapsed > 0 else None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", type=int, required=True, help="CUDA device to slow down")
    ap.add_argument("--seconds", type=float, required=True, help="how long (the hog ends by itself)")
    ap.add_argument("--mib", type=int, default=1024, help="size of each of its two buffers (default 1024 MiB)")
    ap.add_argument("--duty", type=float, default=1.0,
                    help="share of the time the GPU is kept busy (default 1: back to back; 0.2: a lighter slowdown)")
    args = ap.parse_args(argv)
    if args.seconds <= 0 or args.mib < 1 or args.device < 0 or not 0 < args.duty <= 1:
        ap.error("--seconds must be > 0, --mib >= 1, --device >= 0, 0 < --duty <= 1")
    from ncclbench.core.errors import BenchError

    try:
        print(json.dumps(hog(args.device, args.seconds, args.mib, args.duty)), flush=True)
    except (ImportError, RuntimeError, BenchError) as exc:  # no driver / NVRTC: one line, not a traceback
        print(f"gpu_hog: cannot run on device {args.device}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
