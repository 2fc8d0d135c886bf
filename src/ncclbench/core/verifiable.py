"""Exact-result data: the numpy reference of the fill and check generators.

Every element is a pure function of (seed, global element index, rank,
nranks, op, datatype), computed in 64-bit integer arithmetic only, so the
CUDA kernels of `ncclbench.cuda.kernel_source` compute the very same bits
(the GPU tests compare them bit for bit).  Values are built directly as bit
patterns; no floating-point arithmetic is involved, and numpy's lack of
bfloat16/fp8 does not matter.

Why the results are exact in any reduction order, and cheap to check: every
expected value is O(1) to compute (nccl-tests folds over all n ranks per
element; we never do), because contributions are built to telescope.
`h(j)` below is a 64-bit hash of (seed, index, j) (splitmix64's mixer).  Rank r
sits at *position* j = (r - b) mod n for a per-element rotation b, so the
special roles (winner, designated rank, the two avg contributors) move
between ranks from element to element.

integers (wrapping arithmetic mod 2^bits, exact in any order)
  sum      x_j = h(j+1) - h(j)                      result h(n) - h(0)
  prod     x_j = g(j+1) * g(j)^-1, g = h | 1         result g(n) * g(0)^-1
  max/min  winner (j = 0) holds c = h(0); others c & h(j) (max) or c | h(j)
           (min), compared in the signed/unsigned order of the type
  avg      sum, then C division truncating toward zero (NCCL FuncSumPostDiv:
           wrapped sum, then |x|/n with the sign put back)
  mulsum   rank-based (scalar 1 on even, 2 on odd ranks): odd r: F(r);
           even r: h(r+2) - h(r) - 2 F(r+1) [r+1 < n]   result h(2 ceil(n/2)) - h(0)

floats (p = mantissa bits + 1)
  sum      all ranks share a unit 2^q; the first A = min(n, A_max) positions
           hold k_j 2^q with k_j = T(j+1) - T(j), T(j) in [0, 2^t), the rest +0.
           Every partial sum of any subset is an integer below 2^p units, so
           every order of summation is exact.  Never -0.0 (x + -x = +0 in RN).
  mulsum   the same sums for y_r = scalar_r * x_r; odd ranks hold y/2 (exact).
  prod     position 0 holds a random mantissa m * 2^x; every rank holds a
           sign that telescopes (s_j = sigma(j) xor sigma(j+1)) and the first
           A positions hold a power of two 2^(E(j+1)-E(j)); every partial
           product stays normal and finite.
  max/min  as integers, in a monotone code space of finite normal values.
  avg      (NCCL 2.19..2.30: PreMulSum with s = RN_T(float(1/n)) per input)
           only positions 0 and 1 are non-zero (a, b of one sign).  Expected
           = correctly rounded (a+b)/n.  For half/bfloat16/float/double,
           a+b is exact and (a+b)/n has a mantissa in [1.0625, 1.5], which
           keeps RN(RN(a*s) + RN(b*s)) within 2 ULP (the tolerance of docs/behaviour.md §4.4).
           For fp8 (3 or 2 mantissa bits there is no room for such a window)
           a = b: then RN(a*s) + RN(a*s) = 2 RN(a*s) is a single rounding.
           Checked for every n in 1..1024 against NCCL's PreMulSum, a
           sum-then-scale and a sum-then-divide model: within 2 ULP for every
           type, except e4m3 beyond n = 200: NCCL's scalar RN_e4m3(1/n) is a
           coarse subnormal there (and 0 at n = 1024), so its result drifts
           past 2 ULP for e.g. n in 201..214, 304..429 and >= 607 -- an NCCL
           property that nccl-tests reports as wrong results too.
  plain    random finite normal values of either sign (integers: any bits).
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Iterator, Sequence

import numpy as np

from .datatypes import DataType, RedOp
from .fill_plan import (  # noqa: F401  (re-exported: the constants are part of this reference)
    KIND_CODES,
    MASK64,
    MIX1,
    MIX2,
    OP_CODES,
    PARAM_NAMES,
    PHI,
    PSI,
    SALT,
    FloatLayout,
    fill_constants,
    float_layout,
    mix_int,
    plan_vector,
    stream_key,
    tolerance,
)
from .fills import Fill, FillKind

_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def bits_dtype(dtype: DataType) -> type:
    """The unsigned numpy type that holds one element's bits."""
    return _UINT[dtype.itemsize]


def value_dtype(dtype: DataType) -> np.dtype | None:
    """numpy dtype to interpret the bits for MPI reductions (None: bf16/fp8, which MPI cannot reduce)."""
    table = {"int8": np.int8, "uint8": np.uint8, "int32": np.int32, "uint32": np.uint32,
             "int64": np.int64, "uint64": np.uint64, "half": np.float16, "float": np.float32,
             "double": np.float64}
    t = table.get(dtype.name)
    return np.dtype(t) if t is not None else None


# ---------------------------------------------------------------------------------------
# numpy mirror of the device functions (uint64 arithmetic wraps mod 2^64)

_U = np.uint64


def _u(x: int) -> np.uint64:
    return _U(x & MASK64)


def _mix(z: np.ndarray) -> np.ndarray:
    z = z ^ (z >> _U(30))
    z = z * _u(MIX1)
    z = z ^ (z >> _U(27))
    z = z * _u(MIX2)
    return z ^ (z >> _U(31))


_S30, _S27, _S31, _M1, _M2 = _U(30), _U(27), _U(31), _u(MIX1), _u(MIX2)


def _mix_owned(z: np.ndarray) -> np.ndarray:
    """`_mix` done in place on an array nobody else holds (one scratch array: `_mix_into`)."""
    _mix_into(z, np.empty_like(z))
    return z


def _hash(key: int, i: np.ndarray, j: int | np.ndarray) -> np.ndarray:
    """h(key, i, j) = mix(key + i*PHI + j*PSI); j is an int or a uint64 array."""
    z = i * _u(PHI)
    if isinstance(j, int):
        z += _u(key + j * PSI)
    else:
        z += _u(key)
        z += np.asarray(j, dtype=_U) * _u(PSI)
    return _mix_owned(z)


def _mulhi32(x: np.ndarray, span: int) -> np.ndarray:
    """floor(lo32(x) * span / 2^32): a value in [0, span) for span <= 2^32."""
    return ((x & _U(0xFFFFFFFF)) * _u(span)) >> _U(32)


def _bitlen(a: np.ndarray) -> np.ndarray:
    """Bit length of each element (0 for 0): read from the exponent of its float64
    value, which is exact below 2^53 (every caller's case; larger values take
    the shift-and-compare way)."""
    a = np.asarray(a, dtype=_U)
    if a.size and a.max() < _U(1 << 53):
        return np.maximum((a.astype(np.float64).view(np.int64) >> 52) - 1022, 0)
    n = np.zeros(a.shape, dtype=np.int64)
    x = a.copy()
    for s in (32, 16, 8, 4, 2, 1):
        m = x >= _U(1 << s)
        n += np.where(m, s, 0)
        x = np.where(m, x >> _U(s), x)
    return n + (x > 0)


def _shl(a: np.ndarray, s: np.ndarray | int) -> np.ndarray:
    return a << np.asarray(s, dtype=np.int64).astype(_U)


def _shr(a: np.ndarray, s: np.ndarray) -> np.ndarray:
    return a >> np.asarray(s, dtype=np.int64).astype(_U)


def _inv64(g: np.ndarray) -> np.ndarray:
    """Inverse of odd g mod 2^64 (Newton: 3 correct bits, doubling 5 times)."""
    x = g.copy()
    for _ in range(5):
        x = x * (_U(2) - g * x)
    return x


def _enc_mag(P: dict[str, int], sign: np.ndarray, a: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Bits of (-1)^sign * a * 2^q for integers 0 <= a <= 2^p; +0 for a = 0."""
    m, p = P["mant_bits"], P["mant_bits"] + 1
    L = _bitlen(a)
    e = np.asarray(q, dtype=np.int64) + L - 1
    up = _shl(a, np.maximum(p - L, 0))
    down = _shr(a, np.maximum(L - p, 0))
    mant = np.where(L <= p, up, down) & _u((1 << m) - 1)
    bits = sign.astype(_U) << _U(P["width"] - 1)
    bits = bits | ((e + P["bias"]).astype(_U) << _U(m)) | mant
    return np.where(a == 0, _U(0), bits)


# half, float and double: numpy has them, so k * 2^q can be encoded by the FPU
_NATIVE_FLOAT = {(16, 10): np.float16, (32, 23): np.float32, (64, 52): np.float64}


def _enc_signed(P: dict[str, int], k: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Bits of k * 2^q (+0 for k = 0) for integers |k| <= 2^p.

    For half/float/double the plan keeps k * 2^q a normal value of the type, so
    float64 arithmetic (k and 2^q are exact in it, their product is exact) and
    the cast to the type (the value is representable) give exactly the bits the
    integer encoder builds, in a handful of passes instead of thirty: most of
    what the CPU backend's check costs (bench/cpu_check_cost.py)."""
    native = _NATIVE_FLOAT.get((P["width"], P["mant_bits"]))
    if native is not None:
        scale = ((np.asarray(q, dtype=np.int64) + 1023) << 52).view(np.float64)
        val = np.asarray(k, dtype=np.int64).astype(np.float64) * scale
        return val.astype(native).view(_UINT[P["width"] // 8]).astype(_U)
    return _enc_signed_bits(P, k, q)


def _enc_signed_bits(P: dict[str, int], k: np.ndarray, q: np.ndarray) -> np.ndarray:
    """`_enc_signed` in integer arithmetic only: any float layout (bfloat16, fp8)."""
    neg = k < 0
    return _enc_mag(P, neg.astype(_U), np.abs(k).astype(_U), q)


def _enc_code(P: dict[str, int], c: np.ndarray) -> np.ndarray:
    """Monotone map of a code in [0, 2^code_bits) to a finite normal value."""
    m = P["mant_bits"]
    g_half = _u(1 << (P["code_bits"] - 1))
    pos = c >= g_half
    g = np.where(pos, c - g_half, g_half - _U(1) - c)
    e = (g >> _U(m)).astype(np.int64) + P["code_elo"] + P["bias"]
    bits = (e.astype(_U) << _U(m)) | (g & _u((1 << m) - 1))
    return np.where(pos, bits, bits | _u(1 << (P["width"] - 1)))


def _truncdiv(P: dict[str, int], s: np.ndarray, n: int) -> np.ndarray:
    w = P["width"]
    wmask = _u((1 << w) - 1)
    if not P["is_signed"]:
        return s // _u(n)
    neg = (s >> _U(w - 1)) & _U(1) == _U(1)
    absval = np.where(neg, (_U(0) - s) & wmask, s)
    q = absval // _u(n)
    return np.where(neg, (_U(0) - q) & wmask, q)


def _rn_ratio(P: dict[str, int], sign: np.ndarray, num: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Bits of (-1)^sign * RN(num * 2^q / n), num >= 1, exponent kept in normal range by the plan."""
    n, m = P["nranks"], P["mant_bits"]
    p = m + 1
    ld = n.bit_length()
    e = _bitlen(num) - ld
    below = np.where(e >= 0, num < _shl(_U(n) + np.zeros_like(num), np.maximum(e, 0)),
                     _shl(num, np.maximum(-e, 0)) < _u(n))
    e = e - below
    shift = p - 1 - e
    sp = np.maximum(shift, 0)
    qd, rd = num // _u(n), num % _u(n)
    fl_pos = _shl(qd, sp) + _shl(rd, sp) // _u(n)
    rem_pos = _shl(rd, sp) % _u(n)
    den_neg = _shl(_u(n) + np.zeros_like(num), np.maximum(-shift, 0))
    fl = np.where(shift >= 0, fl_pos, num // den_neg)
    rem = np.where(shift >= 0, rem_pos, num % den_neg)
    den = np.where(shift >= 0, _u(n), den_neg)
    up = (rem * _U(2) > den) | ((rem * _U(2) == den) & ((fl & _U(1)) == _U(1)))
    fl = fl + up.astype(_U)
    carry = fl == _u(1 << p)
    fl = np.where(carry, fl >> _U(1), fl)
    e = e + carry
    bits = (sign.astype(_U) << _U(P["width"] - 1)) | ((e + q + P["bias"]).astype(_U) << _U(m))
    return bits | (fl & _u((1 << m) - 1))


def _gen_int(P: dict[str, int], i: np.ndarray) -> np.ndarray:
    kind, op, n, w = P["kind"], P["op"], P["nranks"], P["width"]
    kp = P["key_p"]
    sign_bit = _u(1 << (w - 1)) if P["is_signed"] else _U(0)
    he = _hash(P["key_e"], i, 0)
    if kind == 1:
        return he
    if op == 5:  # mulsum: rank-based, see module docstring
        kf = P["key_f"]
        if kind == 3:
            return _hash(kp, i, 2 * ((n + 1) // 2)) - _hash(kp, i, 0)
        rank = P["rank"]
        if rank % 2:
            return _hash(kf, i, rank)
        x = _hash(kp, i, rank + 2) - _hash(kp, i, rank)
        if rank + 1 < n:
            x = x - _U(2) * _hash(kf, i, rank + 1)
        return x
    if kind == 3:
        if op in (0, 4):
            s = _hash(kp, i, n) - _hash(kp, i, 0)
            return s if op == 0 else _truncdiv(P, s & _u((1 << w) - 1), n)
        if op == 1:
            return (_hash(kp, i, n) | _U(1)) * _inv64(_hash(kp, i, 0) | _U(1))
        return _hash(kp, i, 0) ^ sign_bit  # max / min: the winner's code
    b = _mulhi32(he, n)
    r = _u(P["rank"])
    j = np.where(r >= b, r - b, r + _u(n) - b)
    hj, hj1 = _hash(kp, i, j), _hash(kp, i, j + _U(1))
    if op in (0, 4):
        return hj1 - hj
    if op == 1:
        return (hj1 | _U(1)) * _inv64(hj | _U(1))
    c = _hash(kp, i, 0)
    other = (c & hj) if op == 2 else (c | hj)
    return np.where(j == 0, c, other) ^ sign_bit


def _gen_float(P: dict[str, int], i: np.ndarray) -> np.ndarray:
    kind, op, n = P["kind"], P["op"], P["nranks"]
    kp = P["key_p"]
    he = _hash(P["key_e"], i, 0)
    if kind == 1:
        return _enc_code(P, he & _u((1 << P["code_bits"]) - 1))
    if kind == 2:
        b = _mulhi32(he, n)
        r = _u(P["rank"])
        j = np.where(r >= b, r - b, r + _u(n) - b)
    if op in (0, 5):  # sum, mulsum
        a, tmask = P["sum_a"], _u((1 << P["sum_t"]) - 1)
        q = P["q_lo"] + _mulhi32(he >> _U(32), P["q_span"]).astype(np.int64)
        if kind == 3:
            k = (_hash(kp, i, a) & tmask).astype(np.int64) - (_hash(kp, i, 0) & tmask).astype(np.int64)
            return _enc_signed(P, k, q)
        t1 = _hash(kp, i, np.minimum(j + _U(1), _u(a))) & tmask
        t0 = _hash(kp, i, np.minimum(j, _u(a))) & tmask
        k = t1.astype(np.int64) - t0.astype(np.int64)
        if op == 5 and P["rank"] % 2:
            q = q - 1
        return _enc_signed(P, k, q)
    if op == 1:  # prod
        m, pa = P["mant_bits"], P["prod_a"]
        pmask = _u((1 << P["prod_t"]) - 1)
        x = P["x_lo"] + _mulhi32(he >> _U(32), P["x_span"]).astype(np.int64)
        mant = _hash(P["key_e2"], i, 0) & _u((1 << m) - 1)
        top = _U(P["width"] - 1)
        if kind == 3:
            h0, hn, ha = _hash(kp, i, 0), _hash(kp, i, n), _hash(kp, i, pa)
            e = x + (ha & pmask).astype(np.int64) - (h0 & pmask).astype(np.int64)
            sign = (h0 ^ hn) >> _U(63)
        else:
            hj, hj1 = _hash(kp, i, j), _hash(kp, i, j + _U(1))
            e = np.where(j < _u(pa), (hj1 & pmask).astype(np.int64) - (hj & pmask).astype(np.int64), 0)
            e = e + np.where(j == 0, x, 0)
            mant = np.where(j == 0, mant, _U(0))
            sign = (hj ^ hj1) >> _U(63)
        return (sign << top) | ((e + P["bias"]).astype(_U) << _U(m)) | mant
    if op in (2, 3):  # max, min
        cmask = _u((1 << P["code_bits"]) - 1)
        c = _hash(kp, i, 0) & cmask
        if kind == 3:
            return _enc_code(P, c)
        hj = _hash(kp, i, j)
        other = (c & hj) if op == 2 else (c | (hj & cmask))
        return _enc_code(P, np.where(j == 0, c, other))
    # avg
    he2 = _hash(P["key_e2"], i, 0)
    sign = he2 >> _U(63)
    q = P["ev_lo"] + _mulhi32(he >> _U(32), P["ev_span"]).astype(np.int64) + P["q_off"]
    if P["avg_small"]:
        m = P["mant_bits"]
        alpha = _u(1 << m) | (he2 & _u((1 << m) - 1))
        beta = alpha if n >= 2 else np.zeros_like(alpha)
    else:
        gamma = _u(P["g_lo"]) + he2 % _u(P["g_span"])
        if n == 1:
            alpha = gamma
        else:
            alpha = _U(1) + _mix(he2) % (gamma - _U(1))
        beta = gamma - alpha
    if kind == 3:
        return _rn_ratio(P, sign, alpha + beta, q)
    val = np.where(j == 0, alpha, np.where(j == 1, beta, _U(0)))
    return _enc_mag(P, sign, val, q)


# Elements per generator pass: 8Ki uint64 temporaries are 64 KiB each, so they stay in
# the CPU's caches and below glibc's 128 KiB mmap threshold (larger ones are mapped and
# unmapped, page faults included, on every operation): 16Mi float-sum inputs in 0.45 s
# against 1.0 s with 64Ki passes and 1.3 s with 1Mi (one core; bench/cpu_check_cost.py).
GEN_CHUNK = 1 << 13


# Elements per pass of the fused sum generator below: it allocates nothing per pass (every
# operation writes into scratch arrays made once), so its passes can be longer than
# GEN_CHUNK's, which is bounded by malloc's mmap threshold; 16Ki keeps its eight scratch
# arrays (1 MiB) in the caches (16Mi float-sum inputs in 0.27 s, results in 0.21 s: one core).
SUM_CHUNK = 1 << 14
# i * PHI for i = 0 .. SUM_CHUNK-1: a pass's i * PHI is this plus one scalar (wrapping), one
# addition instead of building i and multiplying it.
_PHI_STEPS = np.arange(SUM_CHUNK, dtype=_U) * _u(PHI)
_LO32 = _U(0xFFFFFFFF)


def _mix_into(z: np.ndarray, t: np.ndarray) -> None:
    """`_mix` of z in place, t a scratch array of z's shape."""
    np.right_shift(z, _S30, out=t)
    z ^= t
    z *= _M1
    np.right_shift(z, _S27, out=t)
    z ^= t
    z *= _M2
    np.right_shift(z, _S31, out=t)
    z ^= t


def _sum_native_into(out: np.ndarray, P: dict[str, int]) -> np.ndarray:
    """`_gen_float` of a float sum/mulsum input or result of half/float/double, written
    straight into `out` as that type: the same arithmetic (the same hashes, q, k and
    float64 product as `_enc_signed`'s native way) with every shared term computed once
    and every operation done in place -- about half the passes of the general way and
    no allocation, bit for bit the same (the pin test_generator_bits_are_unchanged_by_the_fast_paths).
    This is the stream the CPU backend's check spends most of its time on
    (bench/cpu_check_cost.py)."""
    kind, n, a = P["kind"], P["nranks"], P["sum_a"]
    native = _NATIVE_FLOAT[(P["width"], P["mant_bits"])]
    dest = out.view(native)
    tmask = _u((1 << P["sum_t"]) - 1)
    key_e, key_p, psi = _u(P["key_e"]), _u(P["key_p"]), _u(PSI)
    span, un, ua = _u(P["q_span"]), _u(n), _u(a)
    # exponent field of 2^q: q = q_lo + mulhi32(he >> 32, span) (minus 1 on odd mulsum input ranks)
    q_base = _u(P["q_lo"] + 1023 - (1 if kind == 2 and P["op"] == 5 and P["rank"] % 2 else 0))
    rank, rank_n = _u(P["rank"]), _u(P["rank"] + n)
    apsi = _u(a * PSI)
    count = len(out)
    m = min(SUM_CHUNK, count)
    scratch: list[np.ndarray] = [*(np.empty(m, dtype=_U) for _ in range(6)), np.empty(m, dtype=bool),
                                 np.empty(m, dtype=np.float64)]
    for start in range(0, count, SUM_CHUNK):
        c = min(SUM_CHUNK, count - start)
        if c < m:  # the last, shorter pass
            scratch = [x[:c] for x in scratch]
        iphi, he, z0, z1, t, b, wrap, val = scratch
        np.add(_PHI_STEPS[:c], _u((P["index"] + start) * PHI), out=iphi)
        np.add(iphi, key_e, out=he)
        _mix_into(he, t)
        if kind == 2:
            # position j = (rank - b) mod n, b = mulhi32(he, n); then t(j), t(j+1) hashed at min(., a)
            np.bitwise_and(he, _LO32, out=b)
            b *= un
            b >>= _U(32)
            np.less_equal(b, rank, out=wrap)  # rank >= b: j = rank - b, else rank + n - b
            np.subtract(rank_n, b, out=z0)
            np.multiply(wrap, un, out=b)
            z0 -= b  # j
            if a < n:
                np.add(z0, _U(1), out=z1)
                np.minimum(z0, ua, out=z0)
                np.minimum(z1, ua, out=z1)
                z1 *= psi
                z1 += iphi
                z1 += key_p
            z0 *= psi
            z0 += iphi
            z0 += key_p
            if a >= n:  # j < n <= a: no clamp, and t(j+1) is hashed one PSI further
                np.add(z0, psi, out=z1)
        else:  # the result: t(a) - t(0)
            np.add(iphi, key_p, out=z0)
            np.add(z0, apsi, out=z1)
        _mix_into(z1, t)
        z1 &= tmask
        _mix_into(z0, t)
        z0 &= tmask
        k = z1.view(np.int64)
        k -= z0.view(np.int64)  # |k| < 2^t <= 2^53: exact in int64 and in float64
        he >>= _U(32)
        he *= span
        he >>= _U(32)
        he += q_base
        he <<= _U(52)  # 2^q as float64 bits (q + 1023 > 0 by the plan)
        np.multiply(k, he.view(np.float64), out=val)  # int64 -> float64 exactly, times 2^q
        dest[start:start + c] = val  # exact: the plan keeps k * 2^q a normal value of the type
    return out


def _generate_into(out: np.ndarray, plan: dict[str, int]) -> np.ndarray:
    """Fill `out` (any unsigned width) with the plan's bits for len(out) elements from plan['index']."""
    count = len(out)
    if plan["kind"] == 0 or count == 0:
        out[:] = 0
        return out
    if (plan["is_float"] and plan["kind"] in (2, 3) and plan["op"] in (0, 5)
            and (plan["width"], plan["mant_bits"]) in _NATIVE_FLOAT and out.dtype.itemsize * 8 == plan["width"]):
        return _sum_native_into(out, plan)
    gen = _gen_float if plan["is_float"] else _gen_int
    mask = _u((1 << plan["width"]) - 1)
    base = plan["index"]
    for start in range(0, count, GEN_CHUNK):
        c = min(GEN_CHUNK, count - start)
        i = _u(base + start) + np.arange(c, dtype=_U)
        out[start:start + c] = gen(plan, i) & mask
    return out


def generate_plan_bits(plan: dict[str, int], count: int) -> np.ndarray:
    """uint64 bits (masked to the element width) for `count` elements of one plan."""
    return _generate_into(np.empty(count, dtype=_U), plan)


def generate_bits(fill: Fill, dtype: DataType, op: RedOp, nranks: int) -> np.ndarray:
    """The bit patterns a fill describes: uint8/16/32/64 (by itemsize), length fill.count."""
    plan = fill_constants(fill, dtype, op, nranks)
    return _generate_into(np.empty(fill.count, dtype=bits_dtype(dtype)), plan)


# ---------------------------------------------------------------------------------------
# comparison and host-buffer helpers (the MPI CPU backend's fill/count_wrong)


def count_wrong_bits(actual: np.ndarray, expected: np.ndarray, dtype: DataType, op: RedOp) -> int:
    """Elements whose bit patterns (read as unsigned ints) differ by more than the tolerance."""
    a, e = np.asarray(actual), np.asarray(expected)
    if a.shape != e.shape:
        raise ValueError(f"shape mismatch: {a.shape} vs {e.shape}")
    tol = tolerance(dtype, op)
    if tol == 0 and a.dtype == e.dtype:
        # bit-exact: one comparison of the element words, and none of the widening below
        return 0 if np.array_equal(a, e) else int(np.count_nonzero(a != e))
    a, e = a.astype(_U, copy=False), e.astype(_U, copy=False)
    delta = np.where(a > e, a - e, e - a)
    return int(np.count_nonzero(delta > _u(tol)))


_CHUNK = 1 << 20  # elements compared per piece without a cache (bounds the expected array's memory)


def _chunks(f: Fill, limit: int | None = None) -> Iterator[Fill]:
    """Split a fill into generator-consistent pieces (elements past `limit` dropped)."""
    total = f.count if limit is None else max(0, min(f.count, limit - f.offset))
    for start in range(0, total, _CHUNK):
        c = min(_CHUNK, total - start)
        yield Fill(f.kind, f.offset + start, c, f.seed, f.index + start, f.rank)


def _clipped(f: Fill, limit: int) -> Fill:
    """`f` without its elements at or past element `limit` of the buffer."""
    return dataclasses.replace(f, count=max(0, min(f.count, limit - f.offset)))


def _typed_view(buffer: np.ndarray, dtype: DataType, offset: int, count: int) -> np.ndarray:
    size = dtype.itemsize
    raw = np.asarray(buffer).view(np.uint8).reshape(-1)
    if (offset + count) * size > raw.size:
        raise ValueError(f"fill of {count} elements at {offset} overruns a {raw.size}-byte buffer")
    return raw[offset * size:(offset + count) * size].view(bits_dtype(dtype))


# A stream of generated elements: (fill kind, seed, rank, datatype, op, ranks).
_StreamKey = tuple[FillKind, int, int, str, str, int]


class FillCache:
    """The bits of the streams one host-memory rank writes and checks, generated once.

    A sweep fills and checks the same streams again and again: both placements of
    a size write the same inputs (seed 99 for the timed loop, seed `rep` for the
    check) and expect the same result, and a stream's first elements do not
    depend on the size (every element is a function of its index), so each
    larger size needs only the elements past the last one.  Entries are keyed by
    what a stream depends on (kind, seed, rank, datatype, op, rank count) and
    hold one run of indices [start, start + len); the least recently used go
    when `budget` bytes would be exceeded, and a stream larger than the budget
    is generated each time, as without a cache.  Checking stays bit-exact on
    every element: only the generator's work is saved (bench/cpu_check_cost.py).

    A stream's array is made with room to double (within the budget), so that a
    sweep's next size is generated in place past the held elements, with no copy
    of them and no fresh pages for them; the budget counts the elements written,
    as the room past them is address space never touched.
    """

    def __init__(self, budget: int):
        self.budget = max(0, int(budget))
        # key -> (first index, array with room, elements held)
        self._entries: OrderedDict[_StreamKey, tuple[int, np.ndarray, int]] = OrderedDict()
        self.generated = 0  # elements generated (what the tests and the bench script read)

    def _held(self) -> int:
        return sum(length * arr.itemsize for _, arr, length in self._entries.values())

    def bits(self, fill: Fill, dtype: DataType, op: RedOp, nranks: int) -> np.ndarray:
        """The fill's bits, as `generate_bits` gives them (read-only: shared with later calls)."""
        if fill.count == 0:
            return np.zeros(0, dtype=bits_dtype(dtype))
        key: _StreamKey = (fill.kind, fill.seed, fill.rank, dtype.name, op.name, nranks)
        lo, hi = fill.index, fill.index + fill.count
        most = self.budget // dtype.itemsize  # elements the budget holds
        held = self._entries.get(key)
        if held is not None:
            start, arr, length = held
            end = start + length
            if start <= lo and hi <= end:
                self._entries.move_to_end(key)
                return _read_only(arr[lo - start:hi - start])
            if start <= lo <= end and hi - start <= most:
                # the same stream further on: generate only the elements past the held ones
                del self._entries[key]
                if hi - start > len(arr):
                    grown = np.empty(min(2 * (hi - start), most), dtype=arr.dtype)
                    grown[:length] = arr[:length]
                    del arr, held  # its memory goes before the tail's is generated
                    arr = grown
                _generate_into(arr[end - start:hi - start],
                               fill_constants(dataclasses.replace(fill, index=end, count=hi - end), dtype, op, nranks))
                self.generated += hi - end
                self._store(key, start, arr, hi - start)
                return _read_only(arr[lo - start:hi - start])
        if fill.count > most:  # larger than the budget: generated each time, never held
            arr = generate_bits(fill, dtype, op, nranks)
            self.generated += len(arr)
            return _read_only(arr)
        self._entries.pop(key, None)
        arr = np.empty(min(2 * fill.count, most), dtype=bits_dtype(dtype))
        _generate_into(arr[:fill.count], fill_constants(fill, dtype, op, nranks))
        self.generated += fill.count
        self._store(key, lo, arr, fill.count)
        return _read_only(arr[:fill.count])

    def _store(self, key: _StreamKey, start: int, arr: np.ndarray, length: int) -> None:
        while self._entries and self._held() + length * arr.itemsize > self.budget:
            self._entries.popitem(last=False)
        self._entries[key] = (start, arr, length)


def _read_only(view: np.ndarray) -> np.ndarray:
    view.flags.writeable = False
    return view


def host_fill(buffer: np.ndarray, fills: Sequence[Fill], dtype: DataType, op: RedOp, nranks: int,
              cache: FillCache | None = None) -> None:
    """Write the fills into a raw-bytes host buffer (uint8 view starting at the pointer)."""
    for f in fills:
        view = _typed_view(buffer, dtype, f.offset, f.count)
        if f.kind == "zeros":
            view[:] = 0
        elif cache is not None:
            np.copyto(view, cache.bits(f, dtype, op, nranks))
        else:
            _generate_into(view, fill_constants(f, dtype, op, nranks))  # straight into the buffer


def host_count_wrong(buffer: np.ndarray, count: int, fills: Sequence[Fill], dtype: DataType,
                     op: RedOp, nranks: int, cache: FillCache | None = None) -> int:
    """Wrong elements among the first `count` elements of a raw-bytes host buffer;
    elements not covered by a fill are not compared."""
    wrong = 0
    for f in fills:
        if cache is not None:
            piece = _clipped(f, count)
            got = _typed_view(buffer, dtype, piece.offset, piece.count)
            wrong += count_wrong_bits(got, cache.bits(piece, dtype, op, nranks), dtype, op)
            continue
        for piece in _chunks(f, count):
            got = _typed_view(buffer, dtype, piece.offset, piece.count)
            wrong += count_wrong_bits(got, generate_bits(piece, dtype, op, nranks), dtype, op)
    return wrong


# ---------------------------------------------------------------------------------------
# float64 <-> bits of every float type, with round-to-nearest-even in integer arithmetic
# (for host-side reductions of bf16/fp8 and for the tests' arithmetic emulation)


def bits_to_float64(bits: np.ndarray, dtype: DataType) -> np.ndarray:
    """Decode bit patterns of `dtype` to float64 (exact)."""
    if dtype.name == "double":
        return np.asarray(bits).astype(_U).view(np.float64).copy()
    lay = float_layout(dtype)
    b = np.asarray(bits).astype(np.int64)
    m, w = lay.mant_bits, lay.width
    sign = np.where((b >> (w - 1)) & 1, -1.0, 1.0)
    ef = (b >> m) & ((1 << lay.exp_bits) - 1)
    mant = b & ((1 << m) - 1)
    top = (1 << lay.exp_bits) - 1
    normal = np.ldexp((mant + (1 << m)).astype(np.float64), (ef - lay.bias - m).astype(np.int64))
    sub = np.ldexp(mant.astype(np.float64), lay.emin - m)
    val = np.where(ef == 0, sub, normal)
    if lay.finite_only:
        val = np.where((ef == top) & (mant == (1 << m) - 1), np.nan, val)
    else:
        val = np.where(ef == top, np.where(mant == 0, np.inf, np.nan), val)
    return sign * val


def float64_to_bits(values: np.ndarray, dtype: DataType, satfinite: bool = False) -> np.ndarray:
    """Round float64 values to `dtype` (nearest, ties to even) and return the bits.

    Overflow gives inf (e4m3: NaN), or the largest finite value with `satfinite`
    (as CUDA's __NV_SATFINITE conversions)."""
    v = np.asarray(values, dtype=np.float64)
    if dtype.name == "double":
        return v.view(_U).copy()
    lay = float_layout(dtype)
    m, w = lay.mant_bits, lay.width
    raw = v.view(_U)
    sign = (raw >> _U(63)).astype(_U)
    e64 = ((raw >> _U(52)) & _U(0x7FF)).astype(np.int64)
    sig = (raw & _u((1 << 52) - 1)) | np.where(e64 > 0, _u(1 << 52), _U(0))
    e = np.where(e64 > 0, e64 - 1023, -1022)
    # shift so that the kept part has m fractional bits at exponent max(e, emin)
    shift = 52 - m + np.maximum(lay.emin - e, 0)
    shift = np.minimum(shift, 60)
    q = _shr(sig, shift)
    rem = sig - _shl(q, shift)
    half = _shl(_U(1) + np.zeros_like(sig), shift - 1)
    up = (rem > half) | ((rem == half) & ((q & _U(1)) == _U(1)))
    q = q + up.astype(_U)
    # q now holds the significand at exponent max(e, emin): encode by adding the exponent field
    ebase = np.maximum(e, lay.emin)
    mag = _shl((ebase - lay.emin).astype(_U), m) + q  # carries into the exponent naturally
    mag = np.where(sig == 0, _U(0), mag)
    top = (1 << lay.exp_bits) - 1
    maxfin = (top << m) | ((1 << m) - 2) if lay.finite_only else ((top - 1) << m) | ((1 << m) - 1)
    over = mag > _u(maxfin)
    if satfinite:
        ovval = _u(maxfin)
    else:
        ovval = _u((top << m) | ((1 << m) - 1)) if lay.finite_only else _u(top << m)
    mag = np.where(over, ovval, mag)
    nan = np.isnan(v)
    mag = np.where(nan, _u((top << m) | ((1 << m) - 1)), mag)
    out = (sign << _U(w - 1)) | mag
    return out.astype(_UINT[w // 8])
