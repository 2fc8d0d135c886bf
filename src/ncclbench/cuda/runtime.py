"""The CUDA runtime calls the GPU backend needs, over `cuda.bindings.runtime`.

cuda-bindings is NVIDIA's maintained binding; it imports without a driver and
its calls then return `cudaErrorInsufficientDriver`, so the "no GPU" case is
one clean error (exit status 2) rather than an import failure.  Handles
(streams, events, graphs) and device pointers are plain ints here, the same values libnccl takes, so the two libraries
share them without conversion.  cudart is static in both libraries; they
meet at the driver's primary context, which `set_device` makes current.

Every failed call raises `CudaError` (exit status 2) worded like nccl-tests'
CUDACHECK: ``<host>: Test CUDA failure <call> '<cudaGetErrorString>'``.
"""

from __future__ import annotations

import ctypes
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..core.errors import BenchError, ExitCode

NULL_STREAM = 0  # the legacy default stream (-y 1), as nccl-tests' `NULL`
_NOT_READY = 600  # cudaErrorNotReady
_NO_DEVICE_ERRORS = {35, 100, 999, 3}  # insufficient driver, no device, unknown, initialization


def cuda_version_text(code: int) -> str:
    """A CUDA version as cudaDriverGetVersion / cuDriverGetVersion / cudaRuntimeGetVersion give
    it, 1000 * major + 10 * minor, as people write it: 13000 -> '13.0', 12080 -> '12.8'."""
    return f"{code // 1000}.{code % 1000 // 10}"


class CudaError(BenchError):
    def __init__(self, message: str):
        super().__init__(message, ExitCode.CUDA_ERROR)


@dataclass(frozen=True)
class DeviceProps:
    ordinal: int
    name: str
    total_mem: int  # bytes (totalGlobalMem)
    major: int
    minor: int
    pci_domain: int
    pci_bus: int
    pci_device: int

    @property
    def pci_hex(self) -> str:
        """``0000:00:06`` as nccl-tests prints it (domain 4, bus 2, device 2 hex digits)."""
        return pci_hex(self.pci_domain, self.pci_bus, self.pci_device)

    @property
    def cuda_arch(self) -> int:
        """nccl-tests' `100*major + 10*minor` (900 for Hopper)."""
        return 100 * self.major + 10 * self.minor


def pci_hex(domain: int, bus: int, device: int) -> str:
    return f"{domain:04x}:{bus:02x}:{device:02x}"


def _host() -> str:
    return socket.gethostname().split(".")[0]


def _driver_present() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


def _import_runtime() -> Any:
    try:
        from cuda.bindings import runtime
    except ImportError as exc:
        raise CudaError("no NVIDIA GPU/driver found: the CUDA runtime bindings are not installed "
                        f"({exc}); install ncclbench[cu12] or ncclbench[cu13]") from None
    return runtime


def no_device_message(err_name: str, err_string: str, driver_present: bool) -> str:
    """One line explaining why no GPU can be used (pure, for tests)."""
    if driver_present and err_name == "cudaErrorInsufficientDriver":
        return ("NVIDIA driver too old for this CUDA runtime: "
                f"{err_string} (use the ncclbench[cu12] extra on CUDA 12 drivers)")
    return f"no NVIDIA GPU/driver found: {err_string} ({err_name})"


class CudaRuntime:
    """Checked wrappers over cuda.bindings.runtime; one instance per process."""

    def __init__(self) -> None:
        rt = self.rt = _import_runtime()
        self._kind_h2d = rt.cudaMemcpyKind.cudaMemcpyHostToDevice
        self._kind_d2h = rt.cudaMemcpyKind.cudaMemcpyDeviceToHost
        self._kind_d2d = rt.cudaMemcpyKind.cudaMemcpyDeviceToDevice
        self._capture_global = rt.cudaStreamCaptureMode.cudaStreamCaptureModeGlobal
        self._capture_thread = rt.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal
        err, count = rt.cudaGetDeviceCount()
        if int(err) != 0 or not count:
            if int(err) == 0:
                raise CudaError("no NVIDIA GPU/driver found: cudaGetDeviceCount returned 0 devices")
            raise CudaError(no_device_message(self.error_name(err), self.error_string(err), _driver_present()))
        self.device_count: int = count

    # -- errors ------------------------------------------------------------------------
    def error_string(self, err: Any) -> str:
        r = self.rt.cudaGetErrorString(err)
        s = r[1] if isinstance(r, tuple) else r
        return s.decode(errors="replace") if isinstance(s, bytes) else str(s)

    def error_name(self, err: Any) -> str:
        r = self.rt.cudaGetErrorName(err)
        s = r[1] if isinstance(r, tuple) else r
        return s.decode(errors="replace") if isinstance(s, bytes) else str(s)

    def fail(self, call: str, err: Any) -> CudaError:
        return CudaError(f"{_host()}: Test CUDA failure {call} '{self.error_string(err)}'")

    def _check(self, call: str, result: tuple[Any, ...]) -> Any:
        err = result[0]
        if err:
            raise self.fail(call, err)
        if len(result) == 1:
            return None
        return result[1] if len(result) == 2 else result[1:]

    # -- devices -----------------------------------------------------------------------
    def set_device(self, device: int) -> None:
        self._check("cudaSetDevice", self.rt.cudaSetDevice(device))

    def get_device(self) -> int:
        device: int = self._check("cudaGetDevice", self.rt.cudaGetDevice())
        return device

    def properties(self, device: int) -> DeviceProps:
        p = self._check("cudaGetDeviceProperties", self.rt.cudaGetDeviceProperties(device))
        name = p.name
        if isinstance(name, bytes):
            name = name.split(b"\0", 1)[0].decode(errors="replace")
        return DeviceProps(device, str(name), int(p.totalGlobalMem), int(p.major), int(p.minor),
                           int(p.pciDomainID), int(p.pciBusID), int(p.pciDeviceID))

    def mem_get_info(self) -> tuple[int, int]:
        """(free, total) bytes of the current device."""
        free, total = self._check("cudaMemGetInfo", self.rt.cudaMemGetInfo())
        return int(free), int(total)

    def driver_version(self) -> int:
        return int(self._check("cudaDriverGetVersion", self.rt.cudaDriverGetVersion()))

    def runtime_version(self) -> int:
        return int(self._check("cudaRuntimeGetVersion", self.rt.cudaRuntimeGetVersion()))

    def device_synchronize(self) -> None:
        self._check("cudaDeviceSynchronize", self.rt.cudaDeviceSynchronize())

    # -- streams -----------------------------------------------------------------------
    def stream_create(self, nonblocking: bool = True) -> int:
        flags = self.rt.cudaStreamNonBlocking if nonblocking else self.rt.cudaStreamDefault
        return int(self._check("cudaStreamCreateWithFlags", self.rt.cudaStreamCreateWithFlags(flags)))

    def stream_destroy(self, stream: int) -> None:
        if stream != NULL_STREAM:
            self._check("cudaStreamDestroy", self.rt.cudaStreamDestroy(stream))

    def stream_query(self, stream: int) -> bool:
        """True once all work on `stream` has completed (cudaErrorNotReady -> False)."""
        err = self.rt.cudaStreamQuery(stream)[0]
        if not err:
            return True
        if err == _NOT_READY:
            return False
        raise self.fail("cudaStreamQuery", err)

    def stream_synchronize(self, stream: int) -> None:
        self._check("cudaStreamSynchronize", self.rt.cudaStreamSynchronize(stream))

    # -- events ------------------------------------------------------------------------
    def event_create(self) -> int:
        return int(self._check("cudaEventCreate", self.rt.cudaEventCreate()))

    def event_record(self, event: int, stream: int) -> None:
        self._check("cudaEventRecord", self.rt.cudaEventRecord(event, stream))

    def event_synchronize(self, event: int) -> None:
        self._check("cudaEventSynchronize", self.rt.cudaEventSynchronize(event))

    def event_elapsed_ms(self, start: int, end: int) -> float:
        return float(self._check("cudaEventElapsedTime", self.rt.cudaEventElapsedTime(start, end)))

    def event_destroy(self, event: int) -> None:
        self._check("cudaEventDestroy", self.rt.cudaEventDestroy(event))

    # -- memory ------------------------------------------------------------------------
    def malloc(self, nbytes: int) -> int:
        return int(self._check("cudaMalloc", self.rt.cudaMalloc(nbytes)))

    def free(self, ptr: int) -> None:
        self._check("cudaFree", self.rt.cudaFree(ptr))

    def memset_async(self, ptr: int, value: int, nbytes: int, stream: int) -> None:
        self._check("cudaMemsetAsync", self.rt.cudaMemsetAsync(ptr, value, nbytes, stream))

    def memcpy_dtod_async(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        self._check("cudaMemcpyAsync", self.rt.cudaMemcpyAsync(dst, src, nbytes, self._kind_d2d, stream))

    def bound_dtod_copy(self, dst: int, src: int, nbytes: int, stream: int) -> Callable[[], None]:
        """A device-to-device copy with every argument bound, for the timed loop
        (hypercube's own block): one call of the driver's cuMemcpyDtoDAsync.

        The driver call skips cuda-bindings' runtime layer and our checking
        wrapper.  Its host cost (~3.5 us on an H200) is the driver's own and the
        same as nccl-tests' cudaMemcpyAsync from C or the real libcudart called
        through ctypes: within 0.2 us in hypercube's timed op
        (bench/hypercube_copy.py, bench/results/gpu-h200x4-2026-11-21-hypercube.md).  It acts on the
        calling thread's current context: with several GPUs in one thread the
        worker sets the rank's device before it (NcclWorker.bind_copy)."""
        drv = self._driver()
        fn, failed = drv.cuMemcpyDtoDAsync, self.fail_driver
        d, s, st = drv.CUdeviceptr(dst), drv.CUdeviceptr(src), drv.CUstream(stream)

        def copy() -> None:
            err = fn(d, s, nbytes, st)[0]
            if err:
                raise failed("cuMemcpyDtoDAsync", err)

        return copy

    def _driver(self) -> Any:
        from cuda.bindings import driver

        return driver

    def fail_driver(self, call: str, err: Any) -> CudaError:
        """A failed driver-API call, worded like `fail`."""
        r = self._driver().cuGetErrorString(err)
        s = r[1] if isinstance(r, tuple) and len(r) > 1 else r
        text = s.decode(errors="replace") if isinstance(s, bytes) else str(s)
        return CudaError(f"{_host()}: Test CUDA failure {call} '{text}'")

    def memcpy_htod(self, dst: int, data: bytes | bytearray | memoryview) -> None:
        """Synchronous copy of host bytes (any buffer object) to device memory."""
        view = memoryview(data).cast("B")
        if not view.nbytes:
            return
        buf = (ctypes.c_char * view.nbytes).from_buffer_copy(view) if view.readonly else \
            (ctypes.c_char * view.nbytes).from_buffer(view)
        self._check("cudaMemcpy", self.rt.cudaMemcpy(dst, ctypes.addressof(buf), view.nbytes, self._kind_h2d))
        # From pageable memory cudaMemcpy may return before the DMA lands;
        # work on non-blocking streams would not wait for it.
        self._check("cudaStreamSynchronize", self.rt.cudaStreamSynchronize(NULL_STREAM))

    def memcpy_dtoh(self, src: int, nbytes: int) -> bytes:
        """Synchronous copy of `nbytes` of device memory to a new bytes object."""
        buf = ctypes.create_string_buffer(nbytes)
        if nbytes:
            self._check("cudaMemcpy", self.rt.cudaMemcpy(ctypes.addressof(buf), src, nbytes, self._kind_d2h))
        return buf.raw

    # -- graphs ------------------------------------------------------------------------
    def begin_capture(self, stream: int, thread_local: bool = True) -> None:
        mode = self._capture_thread if thread_local else self._capture_global
        self._check("cudaStreamBeginCapture", self.rt.cudaStreamBeginCapture(stream, mode))

    def end_capture(self, stream: int) -> int:
        return int(self._check("cudaStreamEndCapture", self.rt.cudaStreamEndCapture(stream)))

    def graph_instantiate(self, graph: int) -> int:
        return int(self._check("cudaGraphInstantiate", self.rt.cudaGraphInstantiate(graph, 0)))

    def graph_launch(self, graph_exec: int, stream: int) -> None:
        self._check("cudaGraphLaunch", self.rt.cudaGraphLaunch(graph_exec, stream))

    def graph_exec_destroy(self, graph_exec: int) -> None:
        self._check("cudaGraphExecDestroy", self.rt.cudaGraphExecDestroy(graph_exec))

    def graph_destroy(self, graph: int) -> None:
        self._check("cudaGraphDestroy", self.rt.cudaGraphDestroy(graph))


_RUNTIME: CudaRuntime | None = None


def get_runtime() -> CudaRuntime:
    """The process-wide CudaRuntime (raises CudaError, exit 2, without a GPU)."""
    global _RUNTIME
    if _RUNTIME is None:
        _RUNTIME = CudaRuntime()
    return _RUNTIME
