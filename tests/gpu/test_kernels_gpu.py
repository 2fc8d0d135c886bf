"""GPU fill/check kernels against the numpy reference, bit for bit.

Skipped cleanly without cuda-bindings, a driver or a device.  Buffers come
from the CUDA runtime (cudaMalloc/cudaMemcpy); the kernels run through
`ncclbench.cuda.kernels.DeviceKernels` in the same primary context.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from ncclbench.core.datatypes import DATATYPE_BY_NAME, DATATYPES, NO_OP, REDOP_BY_NAME, REDOPS
from ncclbench.core.fills import Fill, plain, reduce_result, zeros
from ncclbench.core.verifiable import bits_dtype, count_wrong_bits, generate_bits

pytestmark = pytest.mark.gpu

SEG = 1237  # odd on purpose


def _runtime():
    try:
        from cuda.bindings import runtime as rt
    except ImportError:
        pytest.skip("cuda-bindings not installed")
    try:
        err, n = rt.cudaGetDeviceCount()
    except RuntimeError as e:
        pytest.skip(f"no CUDA runtime: {e}")
    if err != rt.cudaError_t.cudaSuccess or n == 0:
        pytest.skip(f"no CUDA device ({err})")
    return rt


def _ck(rt, result):
    err, *rest = result if isinstance(result, tuple) else (result,)
    assert err == rt.cudaError_t.cudaSuccess, err
    return rest[0] if len(rest) == 1 else rest


@pytest.fixture(scope="module")
def rt():
    rt = _runtime()
    _ck(rt, rt.cudaSetDevice(0))
    _ck(rt, rt.cudaFree(0))
    return rt


@pytest.fixture(scope="module")
def kernels(rt):
    from ncclbench.cuda.kernels import DeviceKernels

    t = time.perf_counter()
    k = DeviceKernels(0)
    print(f"\nDeviceKernels(0): {k.arch}, {k.sm_count} SMs, ready in {time.perf_counter() - t:.2f} s")
    yield k
    k.close()


@pytest.fixture(scope="module")
def stream(rt):
    s = _ck(rt, rt.cudaStreamCreate())
    yield int(s)
    rt.cudaStreamDestroy(s)


class DevBuf:
    def __init__(self, rt, nbytes: int):
        self.rt, self.nbytes = rt, nbytes
        self.ptr = int(_ck(rt, rt.cudaMalloc(nbytes)))

    def memset(self, byte: int) -> None:
        _ck(self.rt, self.rt.cudaMemset(self.ptr, byte, self.nbytes))

    def get(self) -> np.ndarray:
        out = np.empty(self.nbytes, np.uint8)
        _ck(self.rt, self.rt.cudaMemcpy(out.ctypes.data, self.ptr, self.nbytes,
                                        self.rt.cudaMemcpyKind.cudaMemcpyDeviceToHost))
        return out

    def put(self, data: np.ndarray) -> None:
        raw = np.ascontiguousarray(data).view(np.uint8)
        _ck(self.rt, self.rt.cudaMemcpy(self.ptr, raw.ctypes.data, raw.nbytes,
                                        self.rt.cudaMemcpyKind.cudaMemcpyHostToDevice))

    def free(self) -> None:
        self.rt.cudaFree(self.ptr)


def _cases():
    """(fill kind builder, nranks) cases per op; seeds and index offsets vary per case."""
    out = []
    k = 0
    for n, rank in ((1, 0), (3, 2), (8, 5), (1000, 0), (1000, 999)):
        out.append(("reduce_input", n, rank, k))
        k += 1
    for n in (1, 3, 8, 1000):
        out.append(("reduce_result", n, 0, k))
        k += 1
    return out


@pytest.mark.parametrize("dt", DATATYPES, ids=lambda d: d.name)
def test_fill_matches_numpy(rt, kernels, stream, dt):
    size = dt.itemsize
    segs = []  # (fill, op, nranks)
    off = 3
    for op in REDOPS:
        for kind, n, rank, k in _cases():
            seed, index = 1 + 33 * k + op.nccl_id, (0, (1 << 33) + 11, 12345)[k % 3]
            segs.append((Fill(kind, off, SEG, seed=seed, index=index, rank=rank), op, n))
            off += SEG + 3
    segs.append((plain(off, SEG, seed=5, index=(1 << 35) + 1), NO_OP, 1))
    off += SEG + 3
    segs.append((zeros(off, SEG), NO_OP, 1))
    off += SEG + 3
    buf = DevBuf(rt, off * size)
    try:
        buf.memset(0xAB)
        for f, op, n in segs:
            kernels.fill(buf.ptr, [f], dt, op, n, stream)
        _ck(rt, rt.cudaStreamSynchronize(stream))
        host = buf.get().view(bits_dtype(dt))
    finally:
        buf.free()
    covered = np.zeros(off, bool)
    for f, op, n in segs:
        want = generate_bits(Fill(f.kind, 0, f.count, f.seed, f.index, f.rank), dt, op, n)
        got = host[f.offset:f.offset + f.count]
        assert np.array_equal(got, want), (dt.name, op.name, f.kind, n, f.rank, int(np.sum(got != want)))
        covered[f.offset:f.offset + f.count] = True
    gap = host[~covered].view(np.uint8)
    assert np.all(gap == 0xAB), "fill wrote outside its segment"


@pytest.mark.parametrize("dt", DATATYPES, ids=lambda d: d.name)
def test_count_wrong_counts_exactly(rt, kernels, stream, dt):
    count = 3001
    rng = np.random.default_rng(dt.nccl_id)
    buf = DevBuf(rt, count * dt.itemsize)
    try:
        for op in REDOPS:
            fills = [reduce_result(0, count, seed=7, index=99)]
            kernels.fill(buf.ptr, fills, dt, op, 5, stream)
            assert kernels.count_wrong(buf.ptr, count, fills, dt, op, 5, stream) == 0, op.name
            good = buf.get().view(bits_dtype(dt))
            bad = good.copy()
            pos = rng.choice(count, 7, replace=False)
            low = 2 if (dt.is_float and op.name == "avg") else 0  # flips of bits 0/1 are within 2 ULP
            for p in pos:
                bad[p] ^= bits_dtype(dt)(1 << int(rng.integers(low, dt.bits)))
            buf.put(bad)
            assert kernels.count_wrong(buf.ptr, count, fills, dt, op, 5, stream) == 7, op.name
            # ULP steps: tolerated up to 2 for float avg only
            step = good.astype(np.uint64)
            step[10:15] += np.uint64(1)
            step[20:25] -= np.uint64(2)
            step[30:34] += np.uint64(3)
            buf.put(step.astype(bits_dtype(dt)))
            want = 4 if (dt.is_float and op.name == "avg") else 14
            assert kernels.count_wrong(buf.ptr, count, fills, dt, op, 5, stream) == want, op.name
    finally:
        buf.free()


def test_count_wrong_gaps_limits_and_many_errors(rt, kernels, stream):
    dt, op = DATATYPE_BY_NAME["int32"], REDOP_BY_NAME["sum"]
    buf = DevBuf(rt, 2500 * 4)
    try:
        fills = [reduce_result(0, 1000, 3), plain(1500, 1000, 4, index=10)]
        kernels.fill(buf.ptr, fills, dt, op, 4, stream)
        host = buf.get().view(np.uint32)
        host[1200] ^= 1  # gap: not compared
        host[2100] ^= 1  # past count=2000: not compared
        host[1600] ^= 1
        host[5] ^= 1
        buf.put(host)
        assert kernels.count_wrong(buf.ptr, 2000, fills, dt, op, 4, stream) == 2
        assert kernels.count_wrong(buf.ptr, 2500, fills, dt, op, 4, stream) == 3
    finally:
        buf.free()
    # every element wrong in a large zeroed buffer: exact total, many atomics
    n = (1 << 22) + 5
    for name in ("uint8", "half", "double"):
        dt = DATATYPE_BY_NAME[name]
        buf = DevBuf(rt, n * dt.itemsize)
        try:
            buf.memset(0)
            f = [plain(0, n, 77)]
            want = count_wrong_bits(np.zeros(n, bits_dtype(dt)), generate_bits(f[0], dt, NO_OP, 1), dt, NO_OP)
            assert want > n // 2
            assert kernels.count_wrong(buf.ptr, n, f, dt, NO_OP, 1, stream) == want
        finally:
            buf.free()


def test_throughput(rt, kernels, stream):
    """Timing print (not an assertion beyond correctness): fill + check of 1 GiB buffers."""
    nbytes = 1 << 30
    buf = DevBuf(rt, nbytes)
    lines = []
    try:
        for name, opn, kind in (("uint8", "sum", "reduce_input"), ("int32", "prod", "reduce_result"),
                                ("half", "sum", "reduce_input"), ("bfloat16", "avg", "reduce_result"),
                                ("float", "sum", "reduce_result"), ("f8e4m3", "max", "reduce_input"),
                                ("double", "prod", "reduce_input"), ("uint64", "avg", "reduce_result")):
            dt, op = DATATYPE_BY_NAME[name], REDOP_BY_NAME[opn]
            count = nbytes // dt.itemsize
            fills = [Fill(kind, 0, count, seed=1, rank=3)]
            kernels.fill(buf.ptr, fills, dt, op, 8, stream)  # warm-up
            _ck(rt, rt.cudaStreamSynchronize(stream))
            t0 = time.perf_counter()
            kernels.fill(buf.ptr, fills, dt, op, 8, stream)
            _ck(rt, rt.cudaStreamSynchronize(stream))
            t1 = time.perf_counter()
            wrong = kernels.count_wrong(buf.ptr, count, fills, dt, op, 8, stream)
            t2 = time.perf_counter()
            assert wrong == 0
            lines.append(f"{name:>8} {opn:>6} {kind:>13}: fill {(t1 - t0) * 1e3:7.2f} ms "
                         f"({nbytes / (t1 - t0) / 1e9:6.0f} GB/s)  check {(t2 - t1) * 1e3:7.2f} ms "
                         f"({nbytes / (t2 - t1) / 1e9:6.0f} GB/s)")
    finally:
        buf.free()
    free, _total = _ck(rt, rt.cudaMemGetInfo())
    if free > (10 << 30):  # the 8 GiB case, if it fits
        dt, op = DATATYPE_BY_NAME["int8"], REDOP_BY_NAME["sum"]
        big = DevBuf(rt, 8 << 30)
        try:
            fills = [reduce_result(0, 8 << 30, 1)]
            kernels.fill(big.ptr, fills, dt, op, 8, stream)
            kernels.count_wrong(big.ptr, 8 << 30, fills, dt, op, 8, stream)
            t = time.perf_counter()
            assert kernels.count_wrong(big.ptr, 8 << 30, fills, dt, op, 8, stream) == 0
            lines.append(f"int8 sum reduce_result, 8 GiB check: {(time.perf_counter() - t) * 1e3:.1f} ms")
        finally:
            big.free()
    print("\nthroughput (1 GiB buffers):\n" + "\n".join(lines))
