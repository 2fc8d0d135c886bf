"""The CUDA runtime wrapper's no-GPU behaviour and its pure helpers."""

from __future__ import annotations

import sys

import pytest

from ncclbench.backends.select import gpu_count  # noqa: E402
from ncclbench.core.errors import ExitCode
from ncclbench.cuda import runtime as cr


def _gpu_present() -> bool:
    return gpu_count() > 0


def test_pci_hex_like_nccl_tests():
    assert cr.pci_hex(0, 6, 0) == "0000:06:00"
    assert cr.pci_hex(0x1, 0xAB, 0x1F) == "0001:ab:1f"
    props = cr.DeviceProps(0, "NVIDIA H200", 150 << 30, 9, 0, 0, 0x19, 0)
    assert props.pci_hex == "0000:19:00"
    assert props.cuda_arch == 900


def test_no_device_message():
    assert cr.no_device_message("cudaErrorNoDevice", "no CUDA-capable device is detected", False) == \
        "no NVIDIA GPU/driver found: no CUDA-capable device is detected (cudaErrorNoDevice)"
    old = cr.no_device_message("cudaErrorInsufficientDriver", "CUDA driver version is insufficient", True)
    assert old.startswith("NVIDIA driver too old for this CUDA runtime")
    none = cr.no_device_message("cudaErrorInsufficientDriver", "CUDA driver version is insufficient", False)
    assert none.startswith("no NVIDIA GPU/driver found: ")


@pytest.mark.skipif(_gpu_present(), reason="a GPU is present: the no-driver path cannot be reached")
def test_no_driver_is_a_clean_cuda_error():
    pytest.importorskip("cuda.bindings")
    with pytest.raises(cr.CudaError) as info:
        cr.CudaRuntime()
    assert info.value.code == ExitCode.CUDA_ERROR == 2
    assert "\n" not in info.value.message
    assert info.value.message.startswith(("no NVIDIA GPU/driver found: ", "NVIDIA driver too old"))


def test_missing_bindings_is_a_clean_cuda_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)
    monkeypatch.setitem(sys.modules, "cuda.bindings.runtime", None)
    with pytest.raises(cr.CudaError) as info:
        cr.CudaRuntime()
    assert info.value.code == ExitCode.CUDA_ERROR
    assert "install ncclbench[cu12] or ncclbench[cu13]" in info.value.message


def test_create_workers_without_gpu_fails_cleanly():
    """The whole backend setup on a machine without a GPU: one BenchError, no traceback material."""
    if _gpu_present():
        pytest.skip("a GPU is present")
    from ncclbench.backends.nccl_setup import create_nccl_workers
    from ncclbench.core.config import BenchOptions
    from ncclbench.core.errors import BenchError
    from ncclbench.launch.hostcomm import SingleHostComm

    with pytest.raises(BenchError) as info:
        create_nccl_workers(BenchOptions(), SingleHostComm(), "all_reduce")
    assert info.value.code in (ExitCode.CUDA_ERROR, ExitCode.NCCL_ERROR)


def test_device_api_kernels_are_refused_first():
    from ncclbench.backends.nccl_setup import create_nccl_workers
    from ncclbench.core.config import BenchOptions
    from ncclbench.core.errors import UnsupportedError
    from ncclbench.launch.hostcomm import SingleHostComm

    with pytest.raises(UnsupportedError) as info:
        create_nccl_workers(BenchOptions(device_implementation=1, local_register=2), SingleHostComm(), "all_reduce")
    assert info.value.message == "device-API kernels (-D) are not supported by ncclbench yet"
    assert info.value.code == 5
