"""The exact-result generator: every reduction order gives the expected bits.

Reductions are folded here in the type's own arithmetic (numpy float16 /
float32 / float64; bfloat16 and fp8 by rounding every partial result with the
integer round-to-nearest-even converter), in several orders, the way any
NCCL algorithm (ring, tree, ...) might combine them.
"""

from __future__ import annotations

import numpy as np
import pytest

from ncclbench.core.datatypes import DATATYPE_BY_NAME, DATATYPES, NO_OP, REDOP_BY_NAME, REDOPS, premulsum_scalar
from ncclbench.core.errors import UnsupportedError
from ncclbench.core.fills import Fill, plain, reduce_input, reduce_result, zeros
from ncclbench.core.verifiable import (
    bits_dtype,
    bits_to_float64,
    count_wrong_bits,
    float64_to_bits,
    generate_bits,
    host_count_wrong,
    host_fill,
    tolerance,
    value_dtype,
)

FLOATS = [d for d in DATATYPES if d.is_float]
INTS = [d for d in DATATYPES if not d.is_float]
HALF = DATATYPE_BY_NAME["half"]
NRANKS = (1, 2, 3, 4, 7, 8, 64)
COUNT = 192


# --------------------------------------------------------------------------- arithmetic


class FloatArith:
    """A float type's own arithmetic on float64 carriers (exact for our operands)."""

    def __init__(self, dt):
        self.dt = dt

    def round(self, v):
        dt = self.dt
        if dt.name == "double":
            return v
        if dt.name == "float":
            return v.astype(np.float32).astype(np.float64)
        if dt.name == "half":
            return v.astype(np.float16).astype(np.float64)
        return bits_to_float64(float64_to_bits(v, dt), dt)

    def values(self, bits):
        return bits_to_float64(bits, self.dt)

    def bits(self, v):
        return float64_to_bits(v, self.dt)


def orders(n: int, rng) -> dict[str, list]:
    """Reduction trees over ranks 0..n-1: forward, reverse, pairwise, random."""
    def pairwise(idx):
        if len(idx) == 1:
            return idx[0]
        mid = len(idx) // 2
        return (pairwise(idx[:mid]), pairwise(idx[mid:]))

    def chain(idx):
        t = idx[0]
        for r in idx[1:]:
            t = (t, r)
        return t

    ranks = list(range(n))
    perm = [int(x) for x in rng.permutation(n)]
    return {"forward": chain(ranks), "reverse": chain(ranks[::-1]), "pairwise": pairwise(ranks),
            "random": pairwise(perm)}


def fold(tree, leaf, combine):
    if isinstance(tree, tuple):
        return combine(fold(tree[0], leaf, combine), fold(tree[1], leaf, combine))
    return leaf(tree)


def inputs(dt, op, n, seed=7, index=1000, count=COUNT):
    return [generate_bits(reduce_input(0, count, seed, r, index=index), dt, op, n) for r in range(n)]


def expected(dt, op, n, seed=7, index=1000, count=COUNT):
    return generate_bits(reduce_result(0, count, seed, index=index), dt, op, n)


def ulp_distance(a, b):
    return np.abs(a.astype(np.int64) - b.astype(np.int64))


def nccl_avg_scalar(dt, n: int) -> float:
    """NCCL 2.19-2.30 ncclAvg scalar for floats: RN_T(float(1.0/n)) (fp8: SATFINITE)."""
    f = float(np.float32(1.0 / n))
    if dt.name == "double":
        return 1.0 / n
    if dt.name == "float":
        return f
    return float(bits_to_float64(float64_to_bits(np.array([f]), dt, satfinite=True), dt)[0])


def nccl_round(dt, v):
    """One NCCL arithmetic result in type T; fp8 arithmetic goes through half first."""
    ar = FloatArith(dt)
    if dt.name.startswith("f8"):
        h = bits_to_float64(float64_to_bits(v, HALF), HALF)
        return bits_to_float64(float64_to_bits(h, dt, satfinite=True), dt)
    return ar.round(v)


# --------------------------------------------------------------------------- exactness


@pytest.mark.parametrize("dt", INTS, ids=lambda d: d.name)
@pytest.mark.parametrize("op", REDOPS, ids=lambda o: o.name)
def test_integer_reductions_exact_in_any_order(dt, op):
    rng = np.random.default_rng(1)
    w = dt.bits
    mask = (1 << w) - 1
    for n in NRANKS:
        xs = [x.astype(np.uint64) for x in inputs(dt, op, n)]
        want = expected(dt, op, n)
        if op.name in ("sum", "avg", "mulsum"):
            scale = [premulsum_scalar(r) if op.name == "mulsum" else 1 for r in range(n)]
            leaf = lambda r: xs[r] * np.uint64(scale[r])
            comb = lambda a, b: (a + b) & np.uint64(mask)
        elif op.name == "prod":
            leaf = lambda r: xs[r]
            comb = lambda a, b: (a * b) & np.uint64(mask)
        else:
            vt = value_dtype(dt)
            leaf = lambda r: xs[r].astype(bits_dtype(dt)).view(vt)
            comb = np.maximum if op.name == "max" else np.minimum
        for name, tree in orders(n, rng).items():
            got = fold(tree, leaf, comb)
            if op.name in ("max", "min"):
                got = got.view(bits_dtype(dt))
            elif op.name == "avg":  # C division truncating toward zero, on the wrapped sum
                signed = got.astype(bits_dtype(dt)).view(value_dtype(dt))
                q = [int(abs(int(s)) // n) * (-1 if s < 0 else 1) for s in signed]
                got = np.array([v & mask for v in q], dtype=np.uint64)
            got = np.asarray(got).astype(bits_dtype(dt))
            assert np.array_equal(got, want), (dt.name, op.name, n, name)


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
@pytest.mark.parametrize("op", [o for o in REDOPS if o.name != "avg"], ids=lambda o: o.name)
def test_float_reductions_exact_in_any_order(dt, op):
    ar = FloatArith(dt)
    rng = np.random.default_rng(2)
    sign = np.uint64(1 << (dt.bits - 1))
    for n in NRANKS:
        raw = inputs(dt, op, n)
        want = expected(dt, op, n)
        for bits in raw + [want]:
            assert np.all(np.isfinite(ar.values(bits))), (dt.name, op.name, n)
            assert not np.any(bits.astype(np.uint64) == sign), f"-0.0 in {dt.name} {op.name} n={n}"
        vals = [ar.values(b) for b in raw]
        if op.name == "mulsum":
            vals = [v * premulsum_scalar(r) for r, v in enumerate(vals)]  # exact: scaling by 1 or 2
        comb = {"sum": lambda a, b: ar.round(a + b), "mulsum": lambda a, b: ar.round(a + b),
                "prod": lambda a, b: ar.round(a * b), "max": np.maximum, "min": np.minimum}[op.name]
        for name, tree in orders(n, rng).items():
            got = ar.bits(fold(tree, lambda r: vals[r], comb))
            assert np.array_equal(got, want), (dt.name, op.name, n, name, got[:4], want[:4])


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
def test_float_avg_within_two_ulp_of_nccl(dt):
    """NCCL's float avg: PreMulSum with s = RN_T(1/n): RN(... RN(x_r*s) + ...), any order.
    Also the sum-then-scale and sum-then-divide implementations of other backends."""
    op = REDOP_BY_NAME["avg"]
    rng = np.random.default_rng(3)
    for n in NRANKS:
        raw = inputs(dt, op, n)
        want = expected(dt, op, n)
        vals = np.array([bits_to_float64(b, dt) for b in raw])
        nonzero = vals != 0
        assert np.all(nonzero.sum(axis=0) == min(n, 2)), "avg: exactly two contributing ranks"
        signs = np.sign(np.where(nonzero, vals, 0)).sum(axis=0)
        assert np.all(np.abs(signs) == min(n, 2)), "avg contributions share one sign"
        assert not np.any(np.concatenate(raw).astype(np.uint64) == np.uint64(1 << (dt.bits - 1)))
        s = nccl_avg_scalar(dt, n)
        pre = [nccl_round(dt, v * s) for v in vals]
        for name, tree in orders(n, rng).items():
            got = float64_to_bits(fold(tree, lambda r: pre[r], lambda a, b: nccl_round(dt, a + b)), dt)
            assert ulp_distance(got, want).max() <= 2, (dt.name, n, name)
        total = nccl_round(dt, vals.sum(axis=0))  # a + b is exact
        for other in (nccl_round(dt, total * s), nccl_round(dt, total / n)):
            assert ulp_distance(float64_to_bits(other, dt), want).max() <= 2, (dt.name, n)


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
def test_float_avg_large_nranks(dt):
    op = REDOP_BY_NAME["avg"]
    ns = (100, 200) if dt.name == "f8e4m3" else (100, 255, 1000, 1024)
    for n in ns:
        vals = np.array([bits_to_float64(b, dt) for b in inputs(dt, op, n, count=24)])
        want = expected(dt, op, n, count=24)
        s = nccl_avg_scalar(dt, n)
        pre = np.array([nccl_round(dt, v * s) for v in vals])
        got = float64_to_bits(nccl_round(dt, pre.sum(axis=0)), dt)  # two non-zero terms: one rounding
        assert ulp_distance(got, want).max() <= 2, (dt.name, n)
        exact = float64_to_bits(nccl_round(dt, vals.sum(axis=0) / n), dt)
        assert ulp_distance(exact, want).max() <= 1, (dt.name, n)


def test_large_nranks_sum_and_prod_stay_exact():
    """n = 1024: sum and prod over a window of active ranks, the rest neutral."""
    for name, opn in (("half", "sum"), ("float", "sum"), ("bfloat16", "prod"), ("f8e5m2", "prod")):
        dt, op = DATATYPE_BY_NAME[name], REDOP_BY_NAME[opn]
        ar = FloatArith(dt)
        vals = [ar.values(b) for b in inputs(dt, op, 1024, count=16)]
        comb = (lambda a, b: ar.round(a + b)) if opn == "sum" else (lambda a, b: ar.round(a * b))
        tree = orders(1024, np.random.default_rng(4))["random"]
        assert np.array_equal(ar.bits(fold(tree, lambda r: vals[r], comb)), expected(dt, op, 1024, count=16))


# --------------------------------------------------------------------------- streams


@pytest.mark.parametrize("dt", DATATYPES, ids=lambda d: d.name)
def test_plain_stream_properties(dt):
    a = generate_bits(plain(0, 4096, seed=5), dt, NO_OP, 1)
    assert a.dtype == bits_dtype(dt) and a.shape == (4096,)
    assert np.array_equal(a, generate_bits(plain(0, 4096, seed=5), dt, REDOP_BY_NAME["sum"], 8))
    b = generate_bits(plain(0, 4096, seed=6), dt, NO_OP, 1)
    assert np.mean(a == b) < 0.3  # seeds give different streams (fp8 values collide often)
    shifted = generate_bits(plain(0, 4000, seed=5, index=96), dt, NO_OP, 1)
    assert np.array_equal(shifted, a[96:])  # a value depends on (seed, index) only
    assert np.mean(a[1:] == a[:-1]) < 0.3  # neighbours differ
    if dt.is_float:
        v = bits_to_float64(a, dt)
        assert np.all(np.isfinite(v)) and np.all(v != 0)
        assert 0.3 < np.mean(v < 0) < 0.7
    assert np.array_equal(generate_bits(zeros(0, 10), dt, NO_OP, 1), np.zeros(10, bits_dtype(dt)))


def test_generation_is_deterministic_and_seed_dependent():
    dt, op = DATATYPE_BY_NAME["float"], REDOP_BY_NAME["sum"]
    a = generate_bits(reduce_input(0, 1000, 11, 3, index=5), dt, op, 8)
    assert np.array_equal(a, generate_bits(reduce_input(0, 1000, 11, 3, index=5), dt, op, 8))
    assert not np.array_equal(a, generate_bits(reduce_input(0, 1000, 12, 3, index=5), dt, op, 8))
    assert not np.array_equal(a, generate_bits(reduce_input(0, 1000, 11, 4, index=5), dt, op, 8))
    # reduce_scatter's expected block r equals the tail of the full result
    full = generate_bits(reduce_result(0, 64, 11), dt, op, 4)
    assert np.array_equal(generate_bits(reduce_result(0, 16, 11, index=32), dt, op, 4), full[32:48])


def test_bad_arguments_are_rejected():
    dt = DATATYPE_BY_NAME["int32"]
    with pytest.raises(ValueError):
        generate_bits(reduce_input(0, 4, 1, rank=4), dt, REDOP_BY_NAME["sum"], 4)
    with pytest.raises(ValueError):
        generate_bits(reduce_result(0, 4, 1), dt, NO_OP, 4)
    with pytest.raises(ValueError):
        generate_bits(reduce_result(0, 4, 1), dt, REDOP_BY_NAME["sum"], 0)
    # capacity limits are clean "not supported" errors (exit 5), not crashes
    e4m3, avg = DATATYPE_BY_NAME["f8e4m3"], REDOP_BY_NAME["avg"]
    assert generate_bits(reduce_result(0, 4, 1), e4m3, avg, 4095).shape == (4,)
    with pytest.raises(UnsupportedError):
        generate_bits(reduce_result(0, 4, 1), e4m3, avg, 8192)


# --------------------------------------------------------------------------- comparison


@pytest.mark.parametrize("dt", DATATYPES, ids=lambda d: d.name)
def test_count_wrong_bits_catches_single_bit_flips(dt):
    op = REDOP_BY_NAME["sum"]
    want = generate_bits(reduce_result(0, 500, 3), dt, op, 4)
    assert count_wrong_bits(want.copy(), want, dt, op) == 0
    got = want.copy()
    for k, pos in enumerate((0, 17, 250, 499)):
        got[pos] ^= bits_dtype(dt)(1 << (k * 5 % dt.bits))
    assert count_wrong_bits(got, want, dt, op) == 4
    top = want.copy()
    top[9] ^= bits_dtype(dt)(1 << (dt.bits - 1))  # sign bit: -0.0 != +0.0 too
    assert count_wrong_bits(top, want, dt, op) == 1


@pytest.mark.parametrize("dt", DATATYPES, ids=lambda d: d.name)
def test_avg_tolerance_only_for_floats(dt):
    op = REDOP_BY_NAME["avg"]
    want = generate_bits(reduce_result(0, 100, 3), dt, op, 3)
    got = want.astype(np.uint64)
    got[:10] += np.uint64(1)
    got[10:20] -= np.uint64(2)
    got[20:25] += np.uint64(3)
    got = got.astype(bits_dtype(dt))
    assert tolerance(dt, op) == (2 if dt.is_float else 0)
    assert count_wrong_bits(got, want, dt, op) == (5 if dt.is_float else 25)
    assert count_wrong_bits(got, want, dt, REDOP_BY_NAME["sum"]) == 25


def test_host_fill_and_count_wrong_with_gaps():
    dt, op, n = DATATYPE_BY_NAME["half"], REDOP_BY_NAME["prod"], 5
    buf = np.zeros(300 * dt.itemsize + 3, dtype=np.uint8)
    fills = [reduce_input(0, 100, 9, rank=2), plain(120, 50, 4, index=7), reduce_result(200, 100, 9)]
    host_fill(buf, fills, dt, op, n)
    view = buf[:600].view(np.uint16)
    assert np.array_equal(view[:100], generate_bits(fills[0], dt, op, n))
    assert np.array_equal(view[120:170], generate_bits(fills[1], dt, op, n))
    assert np.all(view[100:120] == 0) and np.all(view[170:200] == 0)
    assert host_count_wrong(buf, 300, fills, dt, op, n) == 0
    view[110] = 0x1234  # in a gap: not compared
    view[5] ^= 1
    view[150] ^= 0x8000
    view[250] += 1
    assert host_count_wrong(buf, 300, fills, dt, op, n) == 3
    assert host_count_wrong(buf, 220, fills, dt, op, n) == 2  # elements past `count` are not compared
    with pytest.raises(ValueError):
        host_fill(np.zeros(10, np.uint8), [plain(0, 6, 1)], dt, op, n)


def test_host_fill_chunks_large_fills(monkeypatch):
    import ncclbench.core.verifiable as v

    monkeypatch.setattr(v, "_CHUNK", 64)
    dt, op = DATATYPE_BY_NAME["uint64"], REDOP_BY_NAME["mulsum"]
    buf = np.zeros(8 * 1000, np.uint8)
    f = Fill("reduce_input", 10, 900, seed=2, index=33, rank=1)
    host_fill(buf, [f], dt, op, 3)
    assert np.array_equal(buf.view(np.uint64)[10:910], generate_bits(f, dt, op, 3))
    assert host_count_wrong(buf, 1000, [f], dt, op, 3) == 0


def test_value_dtype():
    assert value_dtype(DATATYPE_BY_NAME["int8"]) == np.int8
    assert value_dtype(DATATYPE_BY_NAME["half"]) == np.float16
    assert value_dtype(DATATYPE_BY_NAME["double"]) == np.float64
    for name in ("bfloat16", "f8e4m3", "f8e5m2"):
        assert value_dtype(DATATYPE_BY_NAME[name]) is None


# --------------------------------------------------------------------------- conversions


def test_half_conversion_matches_numpy():
    rng = np.random.default_rng(5)
    x = rng.standard_normal(20000) * np.exp2(rng.integers(-30, 20, 20000))
    x[:4] = [0.0, -0.0, 1e9, -1e9]
    with np.errstate(over="ignore"):
        ref = x.astype(np.float16).view(np.uint16)
    assert np.array_equal(float64_to_bits(x, HALF), ref)
    every = np.arange(1 << 16, dtype=np.uint16)
    dec = bits_to_float64(every, HALF)
    npdec = every.view(np.float16).astype(np.float64)
    assert np.array_equal(dec, npdec, equal_nan=True)


@pytest.mark.parametrize("name", ["bfloat16", "f8e4m3", "f8e5m2"])
def test_small_float_rounding_is_nearest_even(name):
    dt = DATATYPE_BY_NAME[name]
    every = np.arange(1 << dt.bits, dtype=bits_dtype(dt))
    grid = bits_to_float64(every, dt)
    finite = np.isfinite(grid)
    assert np.array_equal(float64_to_bits(grid[finite], dt), every[finite])  # round trip
    pos = np.unique(grid[finite & (grid >= 0)])
    rng = np.random.default_rng(6)
    x = rng.uniform(0, pos[-1], 3000) * rng.choice([1, 1e-3, 1e-6], 3000)
    mids = (pos[1:] + pos[:-1]) / 2  # exact ties must go to the even mantissa
    x = np.concatenate([x, mids[::max(1, len(mids) // 500)]])
    got = bits_to_float64(float64_to_bits(x, dt), dt)
    k = np.searchsorted(pos, x)
    lo, hi = pos[np.maximum(k - 1, 0)], pos[np.minimum(k, len(pos) - 1)]
    near = np.where(x - lo < hi - x, lo, hi)
    tie = (x - lo) == (hi - x)
    even = lambda v: (float64_to_bits(v, dt).astype(np.int64) & 1) == 0
    near = np.where(tie, np.where(even(lo), lo, hi), near)
    assert np.array_equal(got, near)
    big = np.array([pos[-1] * 4])
    assert bits_to_float64(float64_to_bits(big, dt, satfinite=True), dt)[0] == pos[-1]
    assert not np.isfinite(bits_to_float64(float64_to_bits(big, dt), dt)[0])


# ------------------------------------------------------------- the fast CPU check (issue 24 item 2)

# sha256 of generate_bits over every datatype x op x nranks (1, 2, 5, 64), both input ranks and the
# result, 3000 elements; then 20000-element fills that cross generator passes.  Pinned from the
# integer-only generator before the float shortcut, the 8Ki passes and the cache (commit 4ae4464):
# the CUDA kernels are tested bit for bit against this reference, so it must never drift.
GOLDEN_ALL = "abf3594a60b0463e6b49ce445ed430caca34e70cfe3fb5c65c809b589cf80075"
GOLDEN_LONG = "afd2f41ae814c395d38007b03bdf63c8c2f54f053fff7d3d11081d20cfaec191"


def test_generator_bits_are_unchanged_by_the_fast_paths():
    import hashlib

    h = hashlib.sha256()
    for dt in DATATYPES:
        h.update(generate_bits(plain(0, 3000, 5, index=7), dt, NO_OP, 1).tobytes())
        for op in REDOPS:
            for n in (1, 2, 5, 64):
                try:
                    for r in (0, n - 1):
                        h.update(generate_bits(reduce_input(0, 3000, 9, r, index=11), dt, op, n).tobytes())
                    h.update(generate_bits(reduce_result(0, 3000, 9, index=11), dt, op, n).tobytes())
                except Exception as e:  # the refusals (avg of fp8 at some n, ...) are part of the pin
                    h.update(type(e).__name__.encode())
    assert h.hexdigest() == GOLDEN_ALL
    h = hashlib.sha256()
    for dt, op in (("float", "sum"), ("double", "sum"), ("half", "sum"), ("int64", "prod"), ("bfloat16", "max")):
        for f in (reduce_input(0, 20000, 3, 1, index=8190), reduce_result(0, 20000, 3, index=8190)):
            h.update(generate_bits(f, DATATYPE_BY_NAME[dt], REDOP_BY_NAME[op], 3).tobytes())
    assert h.hexdigest() == GOLDEN_LONG


@pytest.mark.parametrize("name", ["half", "float", "double"])
def test_fused_sum_generator_equals_the_general_one(name):
    """The fused float sum/mulsum way (straight into the element type) gives the general
    way's bits (generate_plan_bits: uint64 words, the per-pass generator), across its pass
    boundaries, for the clamped (a < n) and unclamped positions and odd mulsum ranks."""
    import ncclbench.core.verifiable as v

    dt = DATATYPE_BY_NAME[name]
    count, index = v.SUM_CHUNK + 3000, v.SUM_CHUNK - 1000
    for op in ("sum", "mulsum"):
        for n in (1, 2, 3, 64, 300):
            fills = [reduce_input(0, count, 5, r, index=index) for r in sorted({0, 1 % n, n - 1})]
            for f in [*fills, reduce_result(0, count, 5, index=index)]:
                plan = v.fill_constants(f, dt, REDOP_BY_NAME[op], n)
                fused = v.generate_bits(f, dt, REDOP_BY_NAME[op], n)
                assert fused.dtype.itemsize * 8 == dt.bits  # the fused way was taken
                assert np.array_equal(fused.astype(np.uint64), v.generate_plan_bits(plan, count)), (op, n, f)


@pytest.mark.parametrize("name", ["half", "float", "double"])
def test_float_encoder_equals_the_integer_one_at_the_edges(name):
    """k * 2^q through the FPU gives the integer encoder's bits for every |k| <= 2^p,
    both signs and zero, over the whole exponent window the plans use."""
    import ncclbench.core.verifiable as v

    dt = DATATYPE_BY_NAME[name]
    lay = v.float_layout(dt)
    p = lay.precision
    P = {"width": dt.bits, "mant_bits": lay.mant_bits, "bias": lay.bias}
    rng = np.random.default_rng(7)
    k = np.concatenate([np.arange(-70, 71), [1 << p, -(1 << p), (1 << p) - 1, 1 - (1 << p)],
                        rng.integers(-(1 << p), (1 << p) + 1, 20000)]).astype(np.int64)
    for q in range(lay.emin + 1, lay.emax - p + 1, max(1, (lay.emax - lay.emin) // 40)):
        assert np.array_equal(v._enc_signed(P, k, q), v._enc_signed_bits(P, k, np.int64(q)))


def test_bitlen_fast_and_wide_agree():
    import ncclbench.core.verifiable as v

    small = np.array([0, 1, 2, 3, 4, 255, 256, (1 << 53) - 1], dtype=np.uint64)
    assert v._bitlen(small).tolist() == [0, 1, 2, 2, 3, 8, 9, 53]
    wide = np.array([1 << 53, (1 << 64) - 1, (1 << 63) + 5, 7], dtype=np.uint64)  # the shift-and-compare way
    assert v._bitlen(wide).tolist() == [54, 64, 64, 3]


def test_fill_cache_serves_growing_sweeps_from_one_generation():
    from ncclbench.core.verifiable import FillCache

    dt, op, n = DATATYPE_BY_NAME["float"], REDOP_BY_NAME["sum"], 2
    cache = FillCache(1 << 20)
    for count in (100, 1000, 5000):  # a sweep: each size extends the stream
        for f in (reduce_input(0, count, 99, 1), reduce_input(0, count, 1, 1), reduce_result(0, count, 1)):
            got = cache.bits(f, dt, op, n)
            assert np.array_equal(got, generate_bits(f, dt, op, n)) and not got.flags.writeable
    assert cache.generated == 3 * 5000  # each stream generated once, to its largest size
    inner = reduce_result(0, 300, 1, index=4000)  # a piece inside a held stream: no generation
    assert np.array_equal(cache.bits(inner, dt, op, n), generate_bits(inner, dt, op, n))
    assert cache.generated == 3 * 5000
    other = reduce_input(0, 100, 1, 0)  # another rank's stream is another key
    assert np.array_equal(cache.bits(other, dt, op, n), generate_bits(other, dt, op, n))
    assert cache.generated == 3 * 5000 + 100


def test_fill_cache_grows_a_stream_in_place_within_its_room():
    """A size that fits the room left past a stream's held elements is generated there:
    the earlier views stay valid and unchanged, and the budget counts elements written."""
    from ncclbench.core.verifiable import FillCache

    dt, op, n = DATATYPE_BY_NAME["float"], REDOP_BY_NAME["sum"], 2
    cache = FillCache(1 << 20)
    first = cache.bits(reduce_result(0, 1000, 1), dt, op, n)
    before = first.copy()
    room = first.base
    grown = cache.bits(reduce_result(0, 1500, 1), dt, op, n)  # within the room made for 2 x 1000
    assert grown.base is room and np.array_equal(first, before)
    assert np.array_equal(grown, generate_bits(reduce_result(0, 1500, 1), dt, op, n))
    assert cache.generated == 1500 and cache._held() == 1500 * 4
    with pytest.raises(ValueError):
        grown[0] = 0  # what callers get is read-only


def test_fill_cache_keeps_to_its_budget():
    from ncclbench.core.verifiable import FillCache

    dt, op, n = DATATYPE_BY_NAME["int32"], REDOP_BY_NAME["sum"], 4
    cache = FillCache(3000 * 4)  # room for 3000 int32 elements
    a, b = reduce_input(0, 2000, 1, 0), reduce_input(0, 2000, 2, 0)
    cache.bits(a, dt, op, n)
    cache.bits(b, dt, op, n)  # evicts a (2000 + 2000 > 3000)
    cache.bits(a, dt, op, n)
    assert cache.generated == 6000 and cache._held() <= 3000 * 4
    big = reduce_input(0, 5000, 3, 0)  # larger than the budget: generated every time, never held
    assert np.array_equal(cache.bits(big, dt, op, n), generate_bits(big, dt, op, n))
    cache.bits(big, dt, op, n)
    assert cache.generated == 16000 and cache._held() <= 3000 * 4


@pytest.mark.parametrize("name,op", [("float", "sum"), ("int8", "max"), ("half", "avg"), ("uint64", "prod")])
def test_host_fill_and_check_with_a_cache_match_without(name, op):
    """Every element is still compared, bit for bit (avg: its 2-ULP tolerance), with the cache."""
    from ncclbench.core.verifiable import FillCache

    dt, rop, n = DATATYPE_BY_NAME[name], REDOP_BY_NAME[op], 3
    cache = FillCache(1 << 20)
    fills = [reduce_input(0, 900, 9, rank=2), plain(950, 40, 4, index=7), reduce_result(1000, 500, 9)]
    with_cache, without = np.zeros(1600 * dt.itemsize, np.uint8), np.zeros(1600 * dt.itemsize, np.uint8)
    host_fill(with_cache, fills, dt, rop, n, cache)
    host_fill(without, fills, dt, rop, n)
    assert np.array_equal(with_cache, without)
    assert host_count_wrong(with_cache, 1600, fills, dt, rop, n, cache) == 0
    view = with_cache.view(bits_dtype(dt))
    for i in (0, 899, 960, 1000, 1499):
        view[i] ^= 4  # beyond avg's 2-ULP tolerance too
    assert host_count_wrong(with_cache, 1600, fills, dt, rop, n, cache) == 5
    assert host_count_wrong(with_cache, 1600, fills, dt, rop, n) == 5
    assert host_count_wrong(with_cache, 1200, fills, dt, rop, n, cache) == 4  # past `count`: not compared
