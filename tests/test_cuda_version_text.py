"""The CUDA version text ('12.8' from cuDriverGetVersion's 12080) is made by one
function, `cuda.runtime.cuda_version_text`, read by `ncclbench version` /
preflight's facts (launch/facts.py, libcuda through ctypes) and by the kernel
loader's error (cuda/kernels.py), instead of a formula copied into each."""

from __future__ import annotations

import ctypes
from pathlib import Path
from types import SimpleNamespace

import pytest

from ncclbench.core.errors import BenchError
from ncclbench.cuda import kernels
from ncclbench.cuda.runtime import cuda_version_text
from ncclbench.launch import facts

SRC = Path(__file__).resolve().parents[1] / "src" / "ncclbench"
CODES = [(13000, "13.0"), (12080, "12.8"), (12090, "12.9"), (11020, "11.2"), (10010, "10.1")]


@pytest.mark.parametrize("code, text", CODES)
def test_cuda_version_text(code, text):
    assert cuda_version_text(code) == text


@pytest.mark.parametrize("code, text", CODES)
def test_the_facts_read_libcuda_through_it(code, text):
    class FakeLibcuda:
        def cuDriverGetVersion(self, out):  # noqa: N802 - libcuda's name
            ctypes.cast(out, ctypes.POINTER(ctypes.c_int))[0] = code
            return 0

    assert facts._cuda_version(FakeLibcuda()) == text


@pytest.mark.parametrize("code, text", CODES[:2])
def test_the_kernel_loader_names_the_driver_through_it(code, text, monkeypatch):
    drv = SimpleNamespace(CUresult=SimpleNamespace(CUDA_SUCCESS=0),
                          cuModuleLoadData=lambda cubin: (218, None),  # CUDA_ERROR_INVALID_PTX
                          cuDriverGetVersion=lambda: (0, code),
                          cuGetErrorName=lambda err: (0, b"CUDA_ERROR_INVALID_PTX"))
    monkeypatch.setattr(kernels, "load_or_compile_cubin", lambda arch, refresh=False: b"cubin")
    monkeypatch.setattr(kernels, "nvrtc_version", lambda: (13, 1))
    loader = object.__new__(kernels.DeviceKernels)
    loader._drv, loader.arch = drv, "sm_90"
    with pytest.raises(BenchError, match=rf"the CUDA driver \({text}\) cannot load kernels built by NVRTC 13\.1"):
        loader._load_module()


def test_no_other_module_formats_a_cuda_version():
    copies = [str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if "% 1000 // 10}" in p.read_text()]
    assert copies == ["cuda/runtime.py"]
