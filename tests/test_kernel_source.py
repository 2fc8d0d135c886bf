"""The CUDA source, checked without a GPU.

The generator part of the source is plain C++ apart from CUDA qualifiers, so
a host compiler (g++) builds it with a three-line shim and we compare its
output with the numpy reference bit for bit; this catches a mirror mistake
before any GPU time is spent.  NVRTC (from the cu13 extra) compiles the
whole source to a cubin without a GPU, which checks the kernels and the
on-disk cache.
"""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from ncclbench.core.datatypes import DATATYPES, NO_OP, REDOPS
from ncclbench.core.errors import BenchError, ExitCode
from ncclbench.core.fills import Fill, reduce_input, reduce_result
from ncclbench.core.verifiable import PARAM_NAMES, fill_constants, generate_plan_bits, plan_vector
from ncclbench.cuda import kernels as kmod
from ncclbench.cuda.kernel_source import generator_source, kernel_names, kernel_source

_SHIM = r"""
#include <cstdio>
#include <cstring>
#define __device__
#define __forceinline__ inline
static inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
"""

_MAIN = r"""
int main() {
  const int NP = sizeof(NbParams) / 8;
  long long buf[64]; u64 count;
  while (fread(buf, 8, NP, stdin) == (size_t)NP) {
    NbParams P; memcpy(&P, buf, sizeof P);
    if (fread(&count, 8, 1, stdin) != 1) return 1;
    u64 mask = P.width == 64 ? ~0ULL : ((1ULL << P.width) - 1);
    for (u64 t = 0; t < count; t++) { u64 v = nb_gen(P, (u64)P.index + t) & mask; fwrite(&v, 8, 1, stdout); }
  }
  return 0;
}
"""


def test_source_is_deterministic_and_complete():
    src = kernel_source()
    assert src == kernel_source()
    for name in kernel_names():
        assert f'extern "C" __global__ void {name}(' in src
    assert len(kernel_names()) == 8
    for name in PARAM_NAMES:
        assert f"i64 {name};" in src
    assert "#include" not in src  # NVRTC needs no include path
    assert generator_source() in src


def _plans():
    plans = []
    for dt in DATATYPES:
        for kind in ("zeros", "plain"):
            plans.append(fill_constants(Fill(kind, 0, 301, seed=12345, index=(1 << 33) + 3), dt, NO_OP, 1))
        for op in REDOPS:
            for n in (1, 2, 3, 8, 1000):
                for r in sorted({0, 1 % n, n // 2, n - 1}):
                    plans.append(fill_constants(reduce_input(0, 301, 99 + n, r, index=17), dt, op, n))
                plans.append(fill_constants(reduce_result(0, 301, 99 + n, index=17), dt, op, n))
    return plans


@pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")
def test_generator_source_matches_numpy_on_host(tmp_path):
    cpp = tmp_path / "gen.cpp"
    cpp.write_text(_SHIM + generator_source() + _MAIN)
    exe = tmp_path / "gen"
    subprocess.run(["g++", "-O1", "-o", str(exe), str(cpp)], check=True, capture_output=True)
    plans = _plans()
    blob = b"".join(np.array(plan_vector(p), dtype=np.int64).tobytes() + np.uint64(301).tobytes()
                    for p in plans)
    out = np.frombuffer(subprocess.run([str(exe)], input=blob, capture_output=True, check=True).stdout,
                        dtype=np.uint64)
    assert out.size == 301 * len(plans)
    for k, p in enumerate(plans):
        got = out[k * 301:(k + 1) * 301]
        assert np.array_equal(got, generate_plan_bits(p, 301)), {n: p[n] for n in ("kind", "op", "width", "nranks", "rank")}


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc")
def test_source_compiles_with_nvcc(tmp_path):
    cu = tmp_path / "k.cu"
    cu.write_text(kernel_source())
    subprocess.run(["nvcc", "-cubin", "-arch=sm_90", "-o", str(tmp_path / "k.cubin"), str(cu)],
                   check=True, capture_output=True)
    assert (tmp_path / "k.cubin").read_bytes()[:4] == b"\x7fELF"


def _nvrtc_available() -> bool:
    try:
        kmod.nvrtc_version()
        return True
    except BenchError:
        return False


@pytest.mark.skipif(not _nvrtc_available(), reason="NVRTC not installed")
def test_nvrtc_compiles_and_caches_cubin(tmp_path, monkeypatch):
    monkeypatch.setenv("NCCLBENCH_CACHE_DIR", str(tmp_path))
    path = kmod.cubin_path("sm_90")
    assert path.parent == tmp_path and "sm_90" in path.name
    data = kmod.load_or_compile_cubin("sm_90")
    assert data[:4] == b"\x7fELF" and path.read_bytes() == data
    for name in kernel_names():
        assert name.encode() in data

    def no_compile(*a, **k):
        raise AssertionError("the cached cubin should have been used")

    monkeypatch.setattr(kmod, "compile_cubin", no_compile)
    assert kmod.load_or_compile_cubin("sm_90") == data
    assert kmod.cubin_path("sm_80") != path  # one file per architecture


def test_a_cached_cubin_is_used_without_loading_nvrtc(tmp_path, monkeypatch):
    """Finding and reading the cache must not load libnvrtc (29 MB resident at every GPU run's
    start on the H100 host); only a miss compiles."""
    monkeypatch.setenv("NCCLBENCH_CACHE_DIR", str(tmp_path))

    def no_nvrtc():
        raise AssertionError("NVRTC loaded for a cache hit")

    monkeypatch.setattr(kmod, "_import_nvrtc", no_nvrtc)
    path = kmod.cubin_path("sm_90")
    assert path.parent == tmp_path and path.name.endswith("-sm_90.cubin")
    cached = b"\x7fELF" + b"cached kernels"
    path.write_bytes(cached)
    assert kmod.load_or_compile_cubin("sm_90") == cached
    with pytest.raises(AssertionError, match="NVRTC loaded"):  # a miss (another arch) does compile
        kmod.load_or_compile_cubin("sm_80")
    assert kmod.cubin_path("sm_90", kernel_source() + "// changed\n") != path  # a new source: a new file


@pytest.mark.skipif(not _nvrtc_available(), reason="NVRTC not installed")
def test_nvrtc_errors_are_bench_errors():
    with pytest.raises(BenchError) as e:
        kmod.compile_cubin(kernel_source() + "\nthis is not C++;\n", "sm_90")
    assert e.value.code == ExitCode.CUDA_ERROR and "failed to compile" in e.value.message
    with pytest.raises(BenchError) as e:
        kmod.compile_cubin(kernel_source(), "sm_1")
    assert e.value.code == ExitCode.CUDA_ERROR and "sm_1" in e.value.message


def test_missing_nvrtc_is_reported_with_install_hint(monkeypatch):
    class NoLib:
        class nvrtcResult:
            NVRTC_SUCCESS = 0

        @staticmethod
        def nvrtcVersion():
            raise RuntimeError("libnvrtc.so not found")

    monkeypatch.setattr(kmod, "_import_nvrtc", lambda: NoLib)
    with pytest.raises(BenchError) as e:
        kmod.compile_cubin("", "sm_90")
    assert e.value.code == ExitCode.CUDA_ERROR
    assert "NVRTC not found" in e.value.message and "ncclbench[cu13]" in e.value.message


def _gpu_present() -> bool:
    try:
        from cuda.bindings import runtime

        err, n = runtime.cudaGetDeviceCount()
        return err == runtime.cudaError_t.cudaSuccess and n > 0
    except Exception:
        return False


@pytest.mark.skipif(_gpu_present(), reason="a GPU is present")
def test_device_kernels_without_gpu_is_a_clean_error():
    pytest.importorskip("cuda.bindings")
    with pytest.raises(BenchError) as e:
        kmod.DeviceKernels(0)
    assert e.value.code == ExitCode.CUDA_ERROR
    assert "\n" not in e.value.message
