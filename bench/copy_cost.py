#!/usr/bin/env python3
"""Host cost of one small device-to-device copy, per way of calling it from
Python (hypercube's own block is such a copy in every timed op; nccl-tests
makes it with cudaMemcpyAsync from C).  One process, GPU 0:

    python bench/copy_cost.py [N_COPIES] [NBYTES]

  runtime:checked   CudaRuntime.memcpy_dtod_async (cuda-bindings' runtime
                    layer + our error check): the timed loop's copy until
                    session 3
  runtime:bare      cuda.bindings.runtime.cudaMemcpyAsync, no wrapper
  driver:bound      CudaRuntime.bound_dtod_copy (cuMemcpyDtoDAsync with bound
                    arguments): the timed loop's copy now
  python:empty      an empty Python call, the floor of any Python loop

Per variant: µs per copy, enqueue only (host clock around N calls) and until
the stream is done.  Variants alternate within 3 rounds; the last round is
printed (JSON lines on stdout).
"""

from __future__ import annotations

import json
import sys
import time

from ncclbench.cuda.runtime import get_runtime


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    nbytes = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    cuda = get_runtime()
    cuda.set_device(0)
    stream = cuda.stream_create()
    src, dst = cuda.malloc(max(nbytes, 256)), cuda.malloc(max(nbytes, 256))
    rt, kind = cuda.rt, cuda._kind_d2d
    bound = cuda.bound_dtod_copy(dst, src, nbytes, stream)

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

    def empty():
        f = (lambda: None)
        for _ in range(n):
            f()

    variants = {"runtime:checked": checked, "runtime:bare": bare, "driver:bound": driver,
                "python:empty": empty}
    rows = {}
    for _ in range(3):
        for name, fn in variants.items():
            cuda.stream_synchronize(stream)
            t0 = time.perf_counter()
            fn()
            t1 = time.perf_counter()
            cuda.stream_synchronize(stream)
            t2 = time.perf_counter()
            rows[name] = {"variant": name, "copies": n, "nbytes": nbytes,
                          "enqueue_us": round((t1 - t0) / n * 1e6, 3),
                          "completion_us": round((t2 - t0) / n * 1e6, 3)}
    for row in rows.values():
        print(json.dumps(row))
    cuda.free(src)
    cuda.free(dst)
    cuda.stream_destroy(stream)
    return 0


if __name__ == "__main__":
    sys.exit(main())
