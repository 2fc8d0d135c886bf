"""CUDA C source of the fill and compare kernels.

The device functions mirror `ncclbench.core.verifiable` line for line (same
constants, same integer operations, same order), so a GPU fill is bit-identical
to `core.verifiable.generate_bits`; the GPU tests check exactly that.  Only
integer arithmetic is used, so no CUDA headers (cuda_fp16.h ...) are needed and
NVRTC compiles the source without an include path.

The compare kernel generates each expected value on the fly and counts
mismatches into one 64-bit device counter (one atomic per warp), so checking
needs no expected buffer: half the memory nccl-tests uses for it.

Kernels (extern "C", one per element width W in 8, 16, 32, 64):
  ncclbench_fill_uW(uintW* buf, u64 count, NbParams p)
  ncclbench_check_uW(const uintW* buf, u64 count, NbParams p, u64* wrong)
`buf` points at the fill's first element; element t holds generator index p.index + t.
"""

from __future__ import annotations

from ..core.fill_plan import MIX1, MIX2, PARAM_NAMES, PHI, PSI

WIDTHS = (8, 16, 32, 64)


def kernel_names() -> list[str]:
    return [f"ncclbench_{k}_u{w}" for w in WIDTHS for k in ("fill", "check")]


_BODY = r"""
typedef unsigned long long u64;
typedef long long i64;

#define NB_PHI @PHI@
#define NB_PSI @PSI@
#define NB_MIX1 @MIX1@
#define NB_MIX2 @MIX2@

struct NbParams {
@FIELDS@
};

static __device__ __forceinline__ u64 nb_mix(u64 z) {
  z ^= z >> 30; z *= NB_MIX1; z ^= z >> 27; z *= NB_MIX2; return z ^ (z >> 31);
}
static __device__ __forceinline__ u64 nb_hash(i64 key, u64 i, u64 j) {
  return nb_mix((u64)key + i * NB_PHI + j * NB_PSI);
}
static __device__ __forceinline__ u64 nb_mulhi32(u64 x, i64 span) {
  return ((x & 0xffffffffULL) * (u64)span) >> 32;
}
static __device__ __forceinline__ i64 nb_bitlen(u64 a) { return 64 - __clzll((i64)a); }
static __device__ __forceinline__ u64 nb_inv64(u64 g) {
  u64 x = g;
  #pragma unroll
  for (int k = 0; k < 5; k++) x = x * (2ULL - g * x);
  return x;
}
static __device__ __forceinline__ u64 nb_min(u64 a, u64 b) { return a < b ? a : b; }

/* bits of (-1)^sign * a * 2^q, 0 <= a <= 2^p; +0 for a == 0 */
static __device__ u64 nb_enc_mag(const NbParams& P, u64 sign, u64 a, i64 q) {
  if (a == 0) return 0;
  i64 m = P.mant_bits, p = m + 1;
  i64 L = nb_bitlen(a);
  i64 e = q + L - 1;
  u64 mant = (L <= p ? (a << (p - L)) : (a >> (L - p))) & ((1ULL << m) - 1);
  return (sign << (P.width - 1)) | ((u64)(e + P.bias) << m) | mant;
}
static __device__ __forceinline__ u64 nb_enc_signed(const NbParams& P, i64 k, i64 q) {
  return nb_enc_mag(P, k < 0 ? 1ULL : 0ULL, (u64)(k < 0 ? -k : k), q);
}
/* monotone code in [0, 2^code_bits) -> finite normal value */
static __device__ u64 nb_enc_code(const NbParams& P, u64 c) {
  i64 m = P.mant_bits;
  u64 gh = 1ULL << (P.code_bits - 1);
  bool pos = c >= gh;
  u64 g = pos ? c - gh : gh - 1 - c;
  i64 e = (i64)(g >> m) + P.code_elo + P.bias;
  u64 bits = ((u64)e << m) | (g & ((1ULL << m) - 1));
  return pos ? bits : (bits | (1ULL << (P.width - 1)));
}
static __device__ u64 nb_truncdiv(const NbParams& P, u64 s) {
  u64 n = (u64)P.nranks;
  if (!P.is_signed) return s / n;
  u64 wmask = P.width == 64 ? ~0ULL : ((1ULL << P.width) - 1);
  bool neg = ((s >> (P.width - 1)) & 1ULL) != 0;
  u64 a = neg ? ((0ULL - s) & wmask) : s;
  u64 q = a / n;
  return neg ? ((0ULL - q) & wmask) : q;
}
/* bits of (-1)^sign * RN(num * 2^q / nranks) */
static __device__ u64 nb_rn_ratio(const NbParams& P, u64 sign, u64 num, i64 q) {
  u64 n = (u64)P.nranks;
  i64 m = P.mant_bits, p = m + 1;
  i64 ld = nb_bitlen(n);
  i64 e = nb_bitlen(num) - ld;
  bool below = e >= 0 ? (num < (n << e)) : ((num << (-e)) < n);
  e -= below ? 1 : 0;
  i64 shift = p - 1 - e;
  u64 fl, rem, den;
  if (shift >= 0) {
    u64 qd = num / n, rd = num % n;
    fl = (qd << shift) + (rd << shift) / n;
    rem = (rd << shift) % n;
    den = n;
  } else {
    den = n << (-shift);
    fl = num / den;
    rem = num % den;
  }
  bool up = (rem * 2 > den) || ((rem * 2 == den) && (fl & 1ULL));
  fl += up ? 1 : 0;
  if (fl == (1ULL << p)) { fl >>= 1; e += 1; }
  return (sign << (P.width - 1)) | ((u64)(e + q + P.bias) << m) | (fl & ((1ULL << m) - 1));
}

static __device__ u64 nb_gen_int(const NbParams& P, u64 i) {
  const i64 kp = P.key_p;
  const u64 n = (u64)P.nranks;
  const u64 sign_bit = P.is_signed ? (1ULL << (P.width - 1)) : 0ULL;
  u64 he = nb_hash(P.key_e, i, 0);
  if (P.kind == 1) return he;
  if (P.op == 5) {  /* mulsum: rank-based */
    if (P.kind == 3) return nb_hash(kp, i, 2 * ((n + 1) / 2)) - nb_hash(kp, i, 0);
    u64 r = (u64)P.rank;
    if (r & 1ULL) return nb_hash(P.key_f, i, r);
    u64 x = nb_hash(kp, i, r + 2) - nb_hash(kp, i, r);
    if (r + 1 < n) x -= 2ULL * nb_hash(P.key_f, i, r + 1);
    return x;
  }
  if (P.kind == 3) {
    if (P.op == 0 || P.op == 4) {
      u64 s = nb_hash(kp, i, n) - nb_hash(kp, i, 0);
      if (P.op == 0) return s;
      return nb_truncdiv(P, s & (P.width == 64 ? ~0ULL : ((1ULL << P.width) - 1)));
    }
    if (P.op == 1) return (nb_hash(kp, i, n) | 1ULL) * nb_inv64(nb_hash(kp, i, 0) | 1ULL);
    return nb_hash(kp, i, 0) ^ sign_bit;
  }
  u64 b = nb_mulhi32(he, (i64)n);
  u64 r = (u64)P.rank;
  u64 j = r >= b ? r - b : r + n - b;
  u64 hj = nb_hash(kp, i, j), hj1 = nb_hash(kp, i, j + 1);
  if (P.op == 0 || P.op == 4) return hj1 - hj;
  if (P.op == 1) return (hj1 | 1ULL) * nb_inv64(hj | 1ULL);
  u64 c = nb_hash(kp, i, 0);
  u64 other = P.op == 2 ? (c & hj) : (c | hj);
  return (j == 0 ? c : other) ^ sign_bit;
}

static __device__ u64 nb_gen_float(const NbParams& P, u64 i) {
  const i64 kp = P.key_p;
  const u64 n = (u64)P.nranks;
  u64 he = nb_hash(P.key_e, i, 0);
  if (P.kind == 1) return nb_enc_code(P, he & ((1ULL << P.code_bits) - 1));
  u64 j = 0;
  if (P.kind == 2) {
    u64 b = nb_mulhi32(he, (i64)n);
    u64 r = (u64)P.rank;
    j = r >= b ? r - b : r + n - b;
  }
  if (P.op == 0 || P.op == 5) {  /* sum, mulsum */
    u64 a = (u64)P.sum_a, tmask = (1ULL << P.sum_t) - 1;
    i64 q = P.q_lo + (i64)nb_mulhi32(he >> 32, P.q_span);
    if (P.kind == 3) {
      i64 k = (i64)(nb_hash(kp, i, a) & tmask) - (i64)(nb_hash(kp, i, 0) & tmask);
      return nb_enc_signed(P, k, q);
    }
    if (j >= a) return 0;
    i64 k = (i64)(nb_hash(kp, i, nb_min(j + 1, a)) & tmask) - (i64)(nb_hash(kp, i, j) & tmask);
    if (P.op == 5 && (P.rank & 1)) q -= 1;
    return nb_enc_signed(P, k, q);
  }
  if (P.op == 1) {  /* prod */
    i64 m = P.mant_bits;
    u64 pa = (u64)P.prod_a, pmask = (1ULL << P.prod_t) - 1;
    i64 x = P.x_lo + (i64)nb_mulhi32(he >> 32, P.x_span);
    u64 mant = nb_hash(P.key_e2, i, 0) & ((1ULL << m) - 1);
    i64 e;
    u64 sign;
    if (P.kind == 3) {
      u64 h0 = nb_hash(kp, i, 0), hn = nb_hash(kp, i, n), ha = nb_hash(kp, i, pa);
      e = x + (i64)(ha & pmask) - (i64)(h0 & pmask);
      sign = (h0 ^ hn) >> 63;
    } else {
      u64 hj = nb_hash(kp, i, j), hj1 = nb_hash(kp, i, j + 1);
      e = j < pa ? (i64)(hj1 & pmask) - (i64)(hj & pmask) : 0;
      if (j == 0) e += x; else mant = 0;
      sign = (hj ^ hj1) >> 63;
    }
    return (sign << (P.width - 1)) | ((u64)(e + P.bias) << m) | mant;
  }
  if (P.op == 2 || P.op == 3) {  /* max, min */
    u64 cmask = (1ULL << P.code_bits) - 1;
    u64 c = nb_hash(kp, i, 0) & cmask;
    if (P.kind == 3 || j == 0) return nb_enc_code(P, c);
    u64 hj = nb_hash(kp, i, j);
    return nb_enc_code(P, P.op == 2 ? (c & hj) : (c | (hj & cmask)));
  }
  /* avg */
  u64 he2 = nb_hash(P.key_e2, i, 0);
  u64 sign = he2 >> 63;
  i64 q = P.ev_lo + (i64)nb_mulhi32(he >> 32, P.ev_span) + P.q_off;
  u64 alpha, beta;
  if (P.avg_small) {
    i64 m = P.mant_bits;
    alpha = (1ULL << m) | (he2 & ((1ULL << m) - 1));
    beta = n >= 2 ? alpha : 0;
  } else {
    u64 gamma = (u64)P.g_lo + he2 % (u64)P.g_span;
    alpha = n == 1 ? gamma : 1 + nb_mix(he2) % (gamma - 1);
    beta = gamma - alpha;
  }
  if (P.kind == 3) return nb_rn_ratio(P, sign, alpha + beta, q);
  u64 v = j == 0 ? alpha : (j == 1 ? beta : 0);
  return nb_enc_mag(P, sign, v, q);
}

static __device__ __forceinline__ u64 nb_gen(const NbParams& P, u64 i) {
  if (P.kind == 0) return 0;
  return P.is_float ? nb_gen_float(P, i) : nb_gen_int(P, i);
}

"""

_LOOPS = r"""
template <typename U>
static __device__ void nb_fill(U* buf, u64 count, const NbParams& P) {
  u64 stride = (u64)gridDim.x * blockDim.x;
  for (u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x; t < count; t += stride)
    buf[t] = (U)nb_gen(P, (u64)P.index + t);
}

template <typename U>
static __device__ void nb_check(const U* buf, u64 count, const NbParams& P, u64* wrong) {
  u64 stride = (u64)gridDim.x * blockDim.x;
  u64 tol = (u64)P.tol, mask = sizeof(U) == 8 ? ~0ULL : ((1ULL << (8 * sizeof(U))) - 1);
  unsigned int bad = 0;
  for (u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x; t < count; t += stride) {
    u64 a = (u64)buf[t], e = nb_gen(P, (u64)P.index + t) & mask;
    u64 d = a > e ? a - e : e - a;
    bad += d > tol ? 1u : 0u;
  }
  #pragma unroll
  for (int off = 16; off > 0; off >>= 1) bad += __shfl_down_sync(0xffffffffu, bad, off);
  if ((threadIdx.x & 31) == 0 && bad) atomicAdd(wrong, (u64)bad);
}
"""

_KERNELS = r"""
extern "C" __global__ void ncclbench_fill_u@W@(@T@* buf, u64 count, NbParams p) { nb_fill<@T@>(buf, count, p); }
extern "C" __global__ void ncclbench_check_u@W@(const @T@* buf, u64 count, NbParams p, u64* wrong) {
  nb_check<@T@>(buf, count, p, wrong);
}
"""

_CTYPES = {8: "unsigned char", 16: "unsigned short", 32: "unsigned int", 64: "unsigned long long"}


def generator_source() -> str:
    """The generator functions alone (no kernels): `nb_gen(params, index)` and its helpers.
    Plain C++ apart from the CUDA qualifiers, so a host compiler can check it too."""
    fields = "\n".join(f"  i64 {name};" for name in PARAM_NAMES)
    body = _BODY.replace("@FIELDS@", fields)
    for name, value in (("PHI", PHI), ("PSI", PSI), ("MIX1", MIX1), ("MIX2", MIX2)):
        body = body.replace(f"@{name}@", f"0x{value:016x}ULL")
    return body


def kernel_source() -> str:
    """The complete CUDA C++ source (deterministic: a pure function of this module)."""
    kernels = "".join(_KERNELS.replace("@W@", str(w)).replace("@T@", _CTYPES[w]) for w in WIDTHS)
    return ("/* ncclbench fill/check kernels: generated by ncclbench.cuda.kernel_source */\n"
            + generator_source() + _LOOPS + kernels)
