"""The launch constants of the exact-result data generator, without numpy.

`fill_constants(fill, dtype, op, nranks)` gives every constant one fill needs (the
GPU kernels' parameter struct, `plan_vector`); `ncclbench.core.verifiable` holds the
design and the numpy mirror of the generators, `ncclbench.cuda.kernel_source`
the CUDA one.  Kept apart so that a GPU run, which needs only these integers,
does not import numpy (~0.1 s and ~25 MB of a start: bench/results/stability-h100-*).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from math import ceil, floor

from .datatypes import DataType, RedOp
from .errors import UnsupportedError
from .fills import Fill

MASK64 = (1 << 64) - 1
PHI = 0x9E3779B97F4A7C15  # index stride (golden ratio)
PSI = 0xC2B2AE3D27D4EB4F  # position stride
MIX1 = 0xBF58476D1CE4E5B9  # splitmix64 mixer constants
MIX2 = 0x94D049BB133111EB
SALT = 0xD6E8FEB86659FD93

KIND_CODES = {"zeros": 0, "plain": 1, "reduce_input": 2, "reduce_result": 3}
OP_CODES = {"sum": 0, "prod": 1, "max": 2, "min": 3, "avg": 4, "mulsum": 5}

# Order of the launch constants; the CUDA source declares its parameter struct
# from this list, so numpy and the kernels read the same numbers.
PARAM_NAMES: tuple[str, ...] = (
    "kind", "op", "width", "is_float", "is_signed", "mant_bits", "bias",
    "nranks", "rank", "index", "key_e", "key_e2", "key_p", "key_f", "tol",
    "sum_a", "sum_t", "q_lo", "q_span",
    "prod_a", "prod_t", "x_lo", "x_span",
    "code_bits", "code_elo",
    "avg_small", "g_lo", "g_span", "ev_lo", "ev_span", "q_off",
)

# Per float type: active ranks of sum (A_max), of prod and its exponent step
# bits, and the exponent window of random values (plain, max, min).
_FLOAT_RULES = {
    # name: (sum_amax, prod_amax, prod_t, code_w, code_elo)
    "half": (64, 8, 1, 4, -8),
    "float": (1024, 32, 2, 5, -16),
    "double": (1024, 64, 3, 6, -32),
    "bfloat16": (16, 32, 2, 5, -16),
    "f8e4m3": (8, 4, 1, 3, -4),
    "f8e5m2": (4, 8, 1, 4, -8),
}


@dataclass(frozen=True)
class FloatLayout:
    """Bit layout of a float type: IEEE-like, except e4m3 (no inf; S.1111.111 is NaN)."""

    width: int
    mant_bits: int
    exp_bits: int
    finite_only: bool  # e4m3: the top exponent holds normal numbers

    @property
    def bias(self) -> int:
        return (1 << (self.exp_bits - 1)) - 1

    @property
    def emin(self) -> int:
        return 1 - self.bias

    @property
    def emax(self) -> int:
        return self.bias + 1 if self.finite_only else self.bias

    @property
    def precision(self) -> int:
        return self.mant_bits + 1


def float_layout(dtype: DataType) -> FloatLayout:
    if not dtype.is_float:
        raise ValueError(f"{dtype.name} is not a floating-point type")
    return FloatLayout(dtype.bits, dtype.mantissa_bits, dtype.exponent_bits, dtype.name == "f8e4m3")


def tolerance(dtype: DataType, op: RedOp) -> int:
    """Allowed |bits(actual) - bits(expected)|: 2 ULP for float avg (§4.4), else 0."""
    return 2 if dtype.is_float and op.name == "avg" else 0


# ---------------------------------------------------------------------------------------
# launch constants


def mix_int(z: int) -> int:
    """splitmix64's finalizer on a Python int (mod 2^64)."""
    z &= MASK64
    z ^= z >> 30
    z = (z * MIX1) & MASK64
    z ^= z >> 27
    z = (z * MIX2) & MASK64
    return z ^ (z >> 31)


def stream_key(seed: int, salt: int) -> int:
    return mix_int((seed & MASK64) * PHI + salt * SALT + 0x243F6A8885A308D3)


def _ceil_log2(n: int) -> int:
    return (n - 1).bit_length()


def fill_constants(fill: Fill, dtype: DataType, op: RedOp, nranks: int) -> dict[str, int]:
    """Every constant one fill needs, named as in PARAM_NAMES (Python ints)."""
    kind = KIND_CODES[fill.kind]
    reducing = kind in (2, 3)
    if reducing and op.name not in OP_CODES:
        raise ValueError(f"fill {fill.kind} needs a reduction op, got {op.name!r}")
    if nranks < 1:
        raise ValueError(f"nranks must be >= 1, got {nranks}")
    if kind == 2 and not 0 <= fill.rank < nranks:
        raise ValueError(f"rank {fill.rank} outside 0..{nranks - 1}")
    if nranks >= 1 << 24:
        raise UnsupportedError(f"nranks {nranks} too large for the exact-result data generator")
    P = dict.fromkeys(PARAM_NAMES, 0)
    P.update(kind=kind, op=OP_CODES.get(op.name, 0), width=dtype.bits, is_float=int(dtype.is_float),
             is_signed=int(dtype.signed and not dtype.is_float), nranks=nranks, rank=fill.rank,
             index=fill.index, tol=tolerance(dtype, op))
    P.update(key_e=stream_key(fill.seed, 1), key_e2=stream_key(fill.seed, 2),
             key_p=stream_key(fill.seed, 3), key_f=stream_key(fill.seed, 4))
    if not dtype.is_float:
        return P
    lay = float_layout(dtype)
    p, n = lay.precision, nranks
    sum_amax, prod_amax, prod_t, code_w, code_elo = _FLOAT_RULES[dtype.name]
    P.update(mant_bits=lay.mant_bits, bias=lay.bias, code_bits=code_w + lay.mant_bits + 1, code_elo=code_elo)
    # sum / mulsum
    a = min(n, sum_amax)
    q_lo, q_hi = max(lay.emin + 1, -8 - p), min(lay.emax - p, 8 - p)
    P.update(sum_a=a, sum_t=p - _ceil_log2(a), q_lo=q_lo, q_span=q_hi - q_lo + 1)
    # prod
    pa = min(n, prod_amax)
    d = pa * ((1 << prod_t) - 1)
    x_lo, x_hi = max(lay.emin + d, -16), min(lay.emax - 1 - d, 15)
    P.update(prod_a=pa, prod_t=prod_t, x_lo=x_lo, x_span=x_hi - x_lo + 1)
    # avg
    L = n.bit_length()
    if lay.mant_bits <= 3:
        ev_lo, ev_hi = lay.emin + L, lay.emax - 2
        P.update(avg_small=1, q_off=-lay.mant_bits)
    else:
        k = p - L - 1
        scale = Fraction(n) * Fraction(2) ** k
        g_lo, g_hi = ceil(scale * Fraction(17, 16)), floor(scale * Fraction(3, 2))
        ev_lo, ev_hi = max(lay.emin + p, -8), min(lay.emax - L - 1, 7)
        P.update(avg_small=0, g_lo=g_lo, g_span=g_hi - g_lo + 1, q_off=-k)
    if reducing and op.name == "avg" and ev_lo > ev_hi:
        raise UnsupportedError(f"nranks {n} too large for exact avg data in {dtype.name}")
    P.update(ev_lo=ev_lo, ev_span=max(1, ev_hi - ev_lo + 1))
    return P


def plan_vector(plan: dict[str, int]) -> list[int]:
    """The plan as signed 64-bit integers in PARAM_NAMES order (the kernels' parameter struct)."""
    out = []
    for name in PARAM_NAMES:
        v = plan[name] & MASK64
        out.append(v - (1 << 64) if v >= 1 << 63 else v)
    return out
