#!/usr/bin/env python3
"""Cost of one small device-to-device copy, per way of calling it from
Python (hypercube's own block is such a copy in every timed op; nccl-tests
makes it with cudaMemcpyAsync from C).  One process, GPU 0:

    python bench/copy_cost.py [N_COPIES] [NBYTES]

  runtime:checked   CudaRuntime.memcpy_dtod_async (cuda-bindings' runtime
                    layer + our error check): the timed loop's copy until
                    the repeats runs
  runtime:bare      cuda.bindings.runtime.cudaMemcpyAsync, no wrapper
  driver:bound      CudaRuntime.bound_dtod_copy (cuMemcpyDtoDAsync with bound
                    arguments): the timed loop's copy now
  ctypes:libcudart  the real libcudart's cudaMemcpyAsync (what nccl-tests
                    calls), through ctypes with pre-converted arguments
                    (~0.4 us of ctypes on top); skipped if no libcudart
  ctypes:libcuda    the driver's cuMemcpyDtoDAsync_v2 the same way
  python:empty      an empty Python call, the floor of any Python loop

Per variant: µs per copy, enqueue only (host clock around N calls), until
the stream is done, and GPU time between events around the N copies.  Keep
N below the launch queue's depth (~1000) or enqueue waits for the GPU and
the three figures merge (the repeats runs used 2000: they did).  Variants
alternate within 3 rounds; the last round is printed (JSON lines).
"""

from __future__ import annotations

import ctypes
import json
import sys
import time

from ncclbench.cuda.runtime import get_runtime


def real_libcudart(device: int):
    """(cudaMemcpyAsync, kind D2D) of the system's libcudart, or None."""
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib

        lib = ctypes.CDLL(load_nvidia_dynamic_lib("cudart").abs_path)
    except Exception:
        return None
    if lib.cudaSetDevice(ctypes.c_int(device)) != 0:
        return None
    fn = lib.cudaMemcpyAsync
    fn.restype = ctypes.c_int
    return fn, ctypes.c_int(3)  # cudaMemcpyDeviceToDevice


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    nbytes = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    cuda = get_runtime()
    cuda.set_device(0)
    stream = cuda.stream_create()
    src, dst = cuda.malloc(max(nbytes, 256)), cuda.malloc(max(nbytes, 256))
    rt, kind = cuda.rt, cuda._kind_d2d
    bound = cuda.bound_dtod_copy(dst, src, nbytes, stream)
    c_args = (ctypes.c_void_p(dst), ctypes.c_void_p(src), ctypes.c_size_t(nbytes))
    c_stream = ctypes.c_void_p(stream)
    drv = ctypes.CDLL("libcuda.so.1").cuMemcpyDtoDAsync_v2
    drv.restype = ctypes.c_int
    d_args = (ctypes.c_uint64(dst), ctypes.c_uint64(src), ctypes.c_size_t(nbytes), c_stream)
    real = real_libcudart(0)

    def checked():
        for _ in range(n):
            cuda.memcpy_dtod_async(dst, src, nbytes, stream)

    def bare():
        fn = rt.cudaMemcpyAsync
        for _ in range(n):
            fn(dst, src, nbytes, kind, stream)

    def driver():
        for _ in range(n):
            bound()

    def libcuda():
        for _ in range(n):
            drv(*d_args)

    def empty():
        f = (lambda: None)
        for _ in range(n):
            f()

    variants = {"runtime:checked": checked, "runtime:bare": bare, "driver:bound": driver,
                "ctypes:libcuda": libcuda, "python:empty": empty}
    if real is not None:
        fn, k = real
        r_args = (*c_args, k, c_stream)

        def libcudart():
            for _ in range(n):
                fn(*r_args)

        variants["ctypes:libcudart"] = libcudart
    e0, e1 = cuda.event_create(), cuda.event_create()
    rows = {}
    for _ in range(3):
        for name, fn in variants.items():
            cuda.stream_synchronize(stream)
            cuda.event_record(e0, stream)
            t0 = time.perf_counter()
            fn()
            t1 = time.perf_counter()
            cuda.event_record(e1, stream)
            cuda.stream_synchronize(stream)
            t2 = time.perf_counter()
            rows[name] = {"variant": name, "copies": n, "nbytes": nbytes,
                          "enqueue_us": round((t1 - t0) / n * 1e6, 3),
                          "completion_us": round((t2 - t0) / n * 1e6, 3),
                          "gpu_us": round(cuda.event_elapsed_ms(e0, e1) * 1e3 / n, 3)}
    for row in rows.values():
        print(json.dumps(row))
    for e in (e0, e1):
        cuda.event_destroy(e)
    cuda.free(src)
    cuda.free(dst)
    cuda.stream_destroy(stream)
    return 0


if __name__ == "__main__":
    sys.exit(main())
