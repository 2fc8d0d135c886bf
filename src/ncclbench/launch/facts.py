"""What one rank can tell about its host: identity, GPUs, versions, environment.

Gathered from every rank before anything runs, so that the checks in
`preflight` see the whole job at once.  Everything is optional and degrades:
a machine without a driver reports no GPUs (with the reason), a missing NCCL
reports no version.  GPUs are read through the CUDA driver API with ctypes
(libcuda ships with the driver, so no package is needed, and its ordinals are
exactly the ones a CUDA program sees, CUDA_VISIBLE_DEVICES included).
"""

from __future__ import annotations

import importlib.util
import os
import re
import socket
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

from .. import __version__
from ..cuda.runtime import cuda_version_text
from ..nccl.version_text import version_text
from .hostid import host_label

SHM_MIN_BYTES = 512 * 1024 * 1024


@dataclass
class GpuFact:
    ordinal: int  # CUDA device ordinal in this process
    uuid: str  # "GPU-xxxxxxxx-..."
    pci: str  # "0000:00:06" (domain:bus:device, as nccl-tests prints it)
    name: str
    total_mem: int


@dataclass
class RankFacts:
    rank: int
    size: int  # the launcher's world size as this rank saw it
    host: str  # short host name (cut at the first '.', as nccl-tests)
    boot_id: str
    pid: int
    launcher: str = "single"
    local_rank: int = 0  # the launcher's
    hostcomm: str = ""
    gpus: list[GpuFact] = field(default_factory=list)
    gpu_note: str = ""  # why no GPU was found
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    nccl_version: str | None = None
    nccl_path: str | None = None
    ncclbench_version: str = __version__
    python: str = ""
    env: dict[str, str] = field(default_factory=dict)  # NCCL_* and CUDA_*
    shm_total: int | None = None
    shm_free: int | None = None
    nccl_host: str = ""  # the host as NCCL groups ranks (launch/hostid.py); "" in facts stored before it

    @property
    def host_key(self) -> tuple[str, str]:
        """nccl-tests' host hash: short host name plus boot id (docs/behaviour.md §2.2)."""
        return (self.host, self.boot_id)

    @property
    def host_label(self) -> str:
        """The host as NCCL groups ranks (NCCL_HOSTID, else the short host name): the host
        of the banner, explain, health and the store."""
        return self.nccl_host or self.host

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def driver_version() -> str | None:
    text = _read("/proc/driver/nvidia/version")
    if text:
        m = re.search(r"Kernel Module(?: for \w+)?\s+(\d+(?:\.\d+)+)", text)
        if m:
            return m.group(1)
    return None


_DRIVER_MARKS = ("/proc/driver/nvidia", "/dev/nvidiactl", "/dev/dxg")  # Linux driver, or WSL2's


def _cuda_version(cu: Any) -> str | None:
    """cuDriverGetVersion as '12.8' (needs no cuInit)."""
    import ctypes

    version = ctypes.c_int(0)
    if cu.cuDriverGetVersion(ctypes.byref(version)) == 0 and version.value:
        return cuda_version_text(version.value)
    return None


def cuda_driver_version() -> str | None:
    """The CUDA version the installed driver supports ('12.8'), None without a
    driver.  Cheap: opens libcuda, initialises no GPU."""
    if not any(os.path.exists(p) for p in _DRIVER_MARKS):
        return None
    import ctypes

    try:
        return _cuda_version(ctypes.CDLL("libcuda.so.1"))
    except OSError:
        return None


def _cuda_gpus() -> tuple[list[GpuFact], str | None, str]:
    """(GPUs, CUDA driver version like '12.8', note)."""
    if not any(os.path.exists(p) for p in _DRIVER_MARKS):
        return [], None, "no NVIDIA driver (no /proc/driver/nvidia)"
    import ctypes  # only where a driver may answer: ranks of a 64-process job on a CPU box skip it

    try:
        cu = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return [], None, "no NVIDIA driver (libcuda.so.1 not found)"
    rc = cu.cuInit(0)
    cuda_version = _cuda_version(cu)
    if rc != 0:
        return [], cuda_version, f"cuInit failed (CUresult {rc}{', no CUDA device' if rc == 100 else ''})"
    count = ctypes.c_int(0)
    if cu.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return [], cuda_version, "cuDeviceGetCount failed"
    get_uuid = getattr(cu, "cuDeviceGetUuid_v2", None) or cu.cuDeviceGetUuid
    total_mem = getattr(cu, "cuDeviceTotalMem_v2", None) or cu.cuDeviceTotalMem
    gpus = []
    for i in range(count.value):
        dev = ctypes.c_int(0)
        if cu.cuDeviceGet(ctypes.byref(dev), i) != 0:
            continue
        name = ctypes.create_string_buffer(256)
        cu.cuDeviceGetName(name, 256, dev)
        raw = ctypes.create_string_buffer(16)
        get_uuid(raw, dev)
        h = raw.raw.hex()
        uuid = f"GPU-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"
        bus = ctypes.create_string_buffer(64)
        cu.cuDeviceGetPCIBusId(bus, 64, dev)
        pci = bus.value.decode(errors="replace").lower().rsplit(".", 1)[0]
        mem = ctypes.c_size_t(0)
        total_mem(ctypes.byref(mem), dev)
        gpus.append(GpuFact(i, uuid, pci, name.value.decode(errors="replace"), mem.value))
    return gpus, cuda_version, "" if gpus else "the driver reports no CUDA device"


def nccl_library(nccl_lib: str | None = None) -> str | None:
    """Path of the libnccl to use: explicit, NCCLBENCH_NCCL_LIB, the nvidia-nccl wheel, or the system's."""
    path = nccl_lib or os.environ.get("NCCLBENCH_NCCL_LIB")
    if path:
        return path
    try:
        spec = importlib.util.find_spec("nvidia.nccl")
    except (ImportError, ValueError):
        spec = None
    if spec and spec.submodule_search_locations:
        for d in spec.submodule_search_locations:
            p = os.path.join(d, "lib", "libnccl.so.2")
            if os.path.exists(p):
                return p
    return "libnccl.so.2"


def nccl_version(nccl_lib: str | None = None) -> tuple[str | None, str | None]:
    """(version like '2.28.9', library path) via ncclGetVersion; (None, None) if not loadable."""
    import ctypes

    path = nccl_library(nccl_lib)
    try:
        lib = ctypes.CDLL(path)
        code = ctypes.c_int(0)
        if lib.ncclGetVersion(ctypes.byref(code)) != 0:
            return None, path
    except (OSError, AttributeError):
        return None, None
    return version_text(code.value), path


def shm_size(path: str = "/dev/shm") -> tuple[int | None, int | None]:
    try:
        st = os.statvfs(path)
    except OSError:
        return None, None
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


def collect_rank_facts(info: Any = None, *, hostcomm: str = "", nccl_lib: str | None = None,
                       probe_gpus: bool = True, probe_nccl: bool | None = None) -> RankFacts:
    """This process's facts.  `info` is the LaunchInfo (rank, size, launcher).
    NCCL is loaded (30 ms, 300 MB mapped) only where it matters: on ranks with
    GPUs, and on each host's first local rank for the version table."""
    rank = getattr(info, "rank", 0)
    local_rank = getattr(info, "local_rank", 0)
    facts = RankFacts(
        rank=rank, size=getattr(info, "size", 1), host=socket.gethostname().split(".")[0],
        boot_id=(_read("/proc/sys/kernel/random/boot_id") or "").strip(), pid=os.getpid(),
        launcher=getattr(info, "kind", "single"), local_rank=local_rank, hostcomm=hostcomm,
        python="%d.%d.%d" % sys.version_info[:3],
        env={k: v for k, v in os.environ.items() if k.startswith(("NCCL_", "CUDA_"))}, nccl_host=host_label())
    facts.shm_total, facts.shm_free = shm_size()
    if probe_gpus:
        facts.gpus, facts.cuda_driver_version, facts.gpu_note = _cuda_gpus()
        if facts.gpus or facts.cuda_driver_version:
            facts.driver_version = driver_version()
    else:
        facts.gpu_note = "GPU probe disabled"
    if probe_nccl is None:
        probe_nccl = bool(facts.gpus) or local_rank == 0
    if probe_nccl:
        facts.nccl_version, facts.nccl_path = nccl_version(nccl_lib)
    return facts


def facts_from_dict(d: dict[str, Any]) -> RankFacts:
    """Inverse of RankFacts.to_dict (for facts stored as JSON)."""
    d = dict(d)
    d["gpus"] = [GpuFact(**g) for g in d.get("gpus", [])]
    return RankFacts(**d)

