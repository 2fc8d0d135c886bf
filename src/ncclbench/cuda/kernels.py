"""Fill and check kernels on one GPU: NVRTC -> cubin (cached) -> driver API.

Why a cubin for the device's exact `sm_XY` and never PTX: PTX from a newer
NVRTC carries an ISA version an older driver cannot JIT, while SASS loads.
The cubin is cached on disk (NCCLBENCH_CACHE_DIR, else
$XDG_CACHE_HOME/ncclbench, else ~/.cache/ncclbench) under a name that hashes
the source and the architecture, so a new source never picks up a stale
binary.  The NVRTC version is not part of the name: asking it means loading
libnvrtc, which cost every GPU run 29 MB of resident memory before its first
row (H100 host, bench/start_memory.py), for a key that changes nothing the
kernels compute.  A cubin the driver refuses (built by a newer NVRTC than this
driver loads, e.g. from a shared home directory) is rebuilt here and replaces
it.  The module is loaded into the device's primary context (the one the CUDA
runtime and NCCL use), pushed only around our own calls so the caller's
current context is left alone.

Every failure becomes a one-line BenchError with code CUDA_ERROR that says
what is missing or what failed.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any, cast

from ..core.atomic_file import write_atomically
from ..core.datatypes import DataType, RedOp
from ..core.errors import BenchError, ExitCode
from ..core.fill_plan import PARAM_NAMES, fill_constants, plan_vector
from ..core.fills import Fill
from .kernel_source import kernel_source
from .runtime import cuda_version_text

THREADS = 256
BLOCKS_PER_SM = 8
INSTALL_HINT = "pip install 'ncclbench[cu13]' (or 'ncclbench[cu12]' for CUDA 12 drivers)"

_ParamsArray = ctypes.c_int64 * len(PARAM_NAMES)


def _err(message: str) -> BenchError:
    return BenchError(message, ExitCode.CUDA_ERROR)


def _import_driver() -> ModuleType:
    try:
        from cuda.bindings import driver
    except ImportError as e:
        raise _err(f"cuda-bindings not found ({e}): {INSTALL_HINT}") from None
    return cast(ModuleType, driver)  # cuda-bindings carries no type information


def _import_nvrtc() -> ModuleType:
    try:
        from cuda.bindings import nvrtc
    except ImportError as e:
        raise _err(f"cuda-bindings not found ({e}): {INSTALL_HINT}") from None
    return cast(ModuleType, nvrtc)


def nvrtc_version() -> tuple[int, int]:
    """(major, minor) of the NVRTC library that would compile the kernels."""
    nvrtc = _import_nvrtc()
    try:
        err, major, minor = nvrtc.nvrtcVersion()
    except RuntimeError as e:  # cuda.pathfinder's DynamicLibNotFoundError
        raise _err(f"NVRTC not found ({e.__class__.__name__}): {INSTALL_HINT}") from None
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise _err(f"NVRTC not usable ({err.name}): {INSTALL_HINT}")
    return major, minor


def compile_cubin(source: str, arch: str) -> bytes:
    """Compile `source` with NVRTC into a cubin for `arch` (e.g. 'sm_90'); no GPU needed."""
    nvrtc = _import_nvrtc()
    major, minor = nvrtc_version()
    ok = nvrtc.nvrtcResult.NVRTC_SUCCESS
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), b"ncclbench_kernels.cu", 0, [], [])
    if err != ok:
        raise _err(f"NVRTC could not create the kernel program: {err.name}")
    try:
        opts = [f"--gpu-architecture={arch}".encode()]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        if err != ok:
            log = _nvrtc_log(nvrtc, prog)
            if err == nvrtc.nvrtcResult.NVRTC_ERROR_INVALID_OPTION:
                raise _err(f"NVRTC {major}.{minor} cannot compile for {arch}; install a newer "
                           f"nvidia-cuda-nvrtc ({log.strip()[:200]})")
            raise _err(f"NVRTC {major}.{minor} failed to compile the check kernels for {arch}: "
                       f"{err.name}: {log.strip()[:400]}")
        err, size = nvrtc.nvrtcGetCUBINSize(prog)
        if err != ok:
            raise _err(f"NVRTC produced no cubin for {arch}: {err.name}")
        buf: bytes = b" " * size
        (err,) = nvrtc.nvrtcGetCUBIN(prog, buf)
        if err != ok:
            raise _err(f"NVRTC could not return the cubin for {arch}: {err.name}")
        return buf
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _nvrtc_log(nvrtc: ModuleType, prog: object) -> str:  # prog: an nvrtcProgram handle
    err, size = nvrtc.nvrtcGetProgramLogSize(prog)
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS or size <= 1:
        return ""
    buf: bytes = b" " * size
    nvrtc.nvrtcGetProgramLog(prog, buf)
    return buf.rstrip(b"\0").decode(errors="replace")


def cache_dir() -> Path:
    env = os.environ.get("NCCLBENCH_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "ncclbench"


def cubin_path(arch: str, source: str | None = None) -> Path:
    """Where the cubin for `arch` is cached (the name hashes the source and the architecture;
    finding it loads no NVRTC)."""
    src = kernel_source() if source is None else source
    digest = hashlib.sha256(f"{src}\0{arch}".encode()).hexdigest()[:16]
    return cache_dir() / f"kernels-{digest}-{arch}.cubin"


def load_or_compile_cubin(arch: str, refresh: bool = False) -> bytes:
    """The cached cubin for `arch`, compiling (and caching, when the cache is writable) if needed."""
    src = kernel_source()
    path = cubin_path(arch, src)
    if not refresh:
        try:
            data = path.read_bytes()
            if data[:4] == b"\x7fELF":
                return data
        except OSError:
            pass
    data = compile_cubin(src, arch)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, data)  # another rank may be reading the cache meanwhile
    except OSError:
        pass  # a read-only cache only costs a recompile next time
    return data


class DeviceKernels:
    """Fill/check kernels loaded on CUDA device `device` (its primary context)."""

    def __init__(self, device: int):
        self._drv = drv = _import_driver()
        self.device = device
        self._lock = threading.Lock()
        self._module = self._ctx = self._counter = None
        try:
            self._ck(drv.cuInit(0), "cuInit")
        except RuntimeError as e:  # libcuda.so missing: DynamicLibNotFoundError
            raise _err(f"CUDA driver not found ({e.__class__.__name__}): is an NVIDIA driver installed?") from None
        dev = self._ck(drv.cuDeviceGet(device), f"cuDeviceGet({device})")
        attr = drv.CUdevice_attribute
        major = self._ck(drv.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), "attr")
        minor = self._ck(drv.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev), "attr")
        self.sm_count = self._ck(drv.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev), "attr")
        self.arch = f"sm_{major}{minor}"
        self._dev = dev
        self._ctx = self._ck(drv.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
        self._funcs: dict[tuple[str, int], Any] = {}
        self._host = ctypes.c_uint64(0)
        try:
            with self._current():
                self._module = self._load_module()
                for w in (8, 16, 32, 64):
                    for k in ("fill", "check"):
                        name = f"ncclbench_{k}_u{w}"
                        self._funcs[(k, w)] = self._ck(drv.cuModuleGetFunction(self._module, name.encode()), name)
                self._counter = self._ck(drv.cuMemAlloc(8), "cuMemAlloc")
        except BaseException:
            self.close()
            raise

    # -- plumbing ----------------------------------------------------------------------
    def _ck(self, result: Any, what: str) -> Any:
        drv = self._drv
        if isinstance(result, tuple):
            err, rest = result[0], result[1:]
        else:
            err, rest = result, ()
        if err != drv.CUresult.CUDA_SUCCESS:
            _, name = drv.cuGetErrorName(err)
            label = name.decode() if isinstance(name, bytes) else str(err)
            raise _err(f"CUDA error {label} in {what} (device {self.device})")
        if not rest:
            return None
        return rest[0] if len(rest) == 1 else rest

    @contextmanager
    def _current(self) -> Iterator[None]:
        self._ck(self._drv.cuCtxPushCurrent(self._ctx), "cuCtxPushCurrent")
        try:
            yield
        finally:
            self._drv.cuCtxPopCurrent()

    def _load_module(self) -> object:  # a CUmodule handle, only passed back to the driver
        drv = self._drv
        for refresh in (False, True):
            cubin = load_or_compile_cubin(self.arch, refresh=refresh)
            result = drv.cuModuleLoadData(cubin)
            if result[0] == drv.CUresult.CUDA_SUCCESS:
                return result[1]
        _, ver = drv.cuDriverGetVersion()
        major, minor = nvrtc_version()
        _, name = drv.cuGetErrorName(result[0])
        raise _err(f"the CUDA driver ({cuda_version_text(ver)}) cannot load kernels built by "
                   f"NVRTC {major}.{minor} for {self.arch} ({name.decode()}): install the nvidia-cuda-nvrtc "
                   f"matching the driver, e.g. {INSTALL_HINT}")

    def _launch(self, kind: str, width: int, ptr: int, count: int, params: Sequence[int],
                stream: int) -> None:
        drv = self._drv
        blocks = max(1, min((count + THREADS - 1) // THREADS, self.sm_count * BLOCKS_PER_SM))
        args = [ctypes.c_uint64(ptr), ctypes.c_uint64(count), _ParamsArray(*params)]
        if kind == "check":
            assert self._counter is not None  # allocated with the module
            args.append(ctypes.c_uint64(int(self._counter)))
        ptrs = (ctypes.c_void_p * len(args))(*[ctypes.addressof(a) for a in args])
        self._ck(drv.cuLaunchKernel(self._funcs[(kind, width)], blocks, 1, 1, THREADS, 1, 1, 0,
                                    drv.CUstream(stream), ctypes.addressof(ptrs), 0),
                 f"cuLaunchKernel(ncclbench_{kind}_u{width})")

    # -- public ------------------------------------------------------------------------
    def fill(self, ptr: int, fills: Sequence[Fill], dtype: DataType, op: RedOp, nranks: int,
             stream: int) -> None:
        """Write the fills at device address `ptr` (asynchronously on `stream`)."""
        with self._current():
            for f in fills:
                if f.count:
                    params = plan_vector(fill_constants(f, dtype, op, nranks))
                    self._launch("fill", dtype.bits, ptr + f.offset * dtype.itemsize, f.count, params, stream)

    def count_wrong(self, ptr: int, count: int, fills: Sequence[Fill], dtype: DataType, op: RedOp,
                    nranks: int, stream: int) -> int:
        """Wrong elements among the first `count` at `ptr` (2 ULP for float avg, else bit-exact);
        elements not covered by a fill are not compared.  Synchronizes `stream`."""
        drv = self._drv
        with self._lock, self._current():
            s = drv.CUstream(stream)
            self._ck(drv.cuMemsetD32Async(self._counter, 0, 2, s), "cuMemsetD32Async")
            for f in fills:
                n = max(0, min(f.count, count - f.offset))
                if n:
                    params = plan_vector(fill_constants(f, dtype, op, nranks))
                    self._launch("check", dtype.bits, ptr + f.offset * dtype.itemsize, n, params, stream)
            self._ck(drv.cuMemcpyDtoHAsync(ctypes.addressof(self._host), self._counter, 8, s), "cuMemcpyDtoHAsync")
            self._ck(drv.cuStreamSynchronize(s), "cuStreamSynchronize")
            return int(self._host.value)

    def close(self) -> None:
        """Free the counter, unload the module and release the primary context."""
        drv = self._drv
        if self._ctx is None:
            return
        with self._current():
            if self._counter is not None:
                drv.cuMemFree(self._counter)
            if self._module is not None:
                drv.cuModuleUnload(self._module)
        drv.cuDevicePrimaryCtxRelease(self._dev)
        self._ctx = self._module = self._counter = None

    def __enter__(self) -> DeviceKernels:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
