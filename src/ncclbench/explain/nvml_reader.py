"""GPU topology facts from NVML: model, compute capability, NVLink links and peers, PCIe links.

The reader takes the NVML module as an argument (`pynvml` from nvidia-ml-py, or
a fake with the same function names), so every branch runs in CPU tests.  Every
call may fail on its own (a 1-GPU VM answers NOT_SUPPORTED for NVLink fields, a
lost GPU answers GPU_IS_LOST): a failure marks that one fact unknown with NVML's
words, and the others are still read.

NVLink is read the way NCCL reads it (src/graph/xml.cc, v2.28.9-1,
ncclTopoGetXmlFromGpu): links 0 .. (4/6/12/18 by SM version) - 1, a link counts
when its state is ENABLED, and the remote end decides NVSwitch versus a direct
GPU peer.  The per-link rate comes from the NVLink generation of the compute
capability; NVML's own speed and link-count fields (90, 91) are kept beside it
as a cross-check where the driver supports them.

A lone GPU's ceiling is its memory: the bus width (`nvmlDeviceGetMemoryBusWidth`)
and the maximum memory clock (`nvmlDeviceGetMaxClockInfo(NVML_CLOCK_MEM)`) are
read per GPU; `GpuTopology.memory_bandwidth` and `ceiling.memory_bandwidth_bound`
turn them into GB/s.

GPUs on NVSwitch also report their NVLink fabric (cluster UUID, clique id, state):
hosts whose GPUs share both form one multi-node NVLink domain (GB200/GB300 NVL
racks), which `explain.mnnvl` turns into one NVLink "node" for the ceiling.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

from .topology import NVLINK_BY_CC, GpuTopology, Locality, nccl_max_nvlinks, normalize_bus_id, parse_cc

FIELD_NVLINK_SPEED_MBPS_COMMON = 90  # NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON
FIELD_NVLINK_LINK_COUNT = 91  # NVML_FI_DEV_NVLINK_LINK_COUNT
NVML_CLOCK_MEM = 2  # nvmlClockType_t: the memory clock (nvml.h)

# nvmlDeviceGetTopologyCommonAncestor levels -> nvidia-smi topo -m words
_TOPOLOGY_WORDS = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}


def load_nvml() -> tuple[Any, str]:
    """(the pynvml module, '') or (None, why not)."""
    try:
        import pynvml
    except ImportError:
        return None, "nvidia-ml-py is not installed (pip install nvidia-ml-py)"
    return pynvml, ""


def _text(v: Any) -> Any:
    return v.decode(errors="replace") if isinstance(v, bytes) else v


def _why(nvml: Any, exc: BaseException) -> str:
    err = getattr(nvml, "NVMLError", None)
    if err is not None and isinstance(exc, err):
        return f"NVML: {exc}"
    return f"{type(exc).__name__}: {exc}"


def _is_error(nvml: Any, exc: BaseException, name: str) -> bool:
    code = getattr(nvml, name, None)
    return code is not None and getattr(exc, "value", None) == code


class _Asker:
    """Calls NVML for one GPU and notes why a fact is unknown when a call fails."""

    def __init__(self, nvml: Any, gpu: GpuTopology):
        self.nvml, self.gpu = nvml, gpu

    def __call__(self, key: str, fn_name: str, *args: Any) -> Any:
        fn: Callable | None = getattr(self.nvml, fn_name, None)
        if fn is None:
            self.gpu.unknown[key] = f"this nvidia-ml-py has no {fn_name}"
            return None
        try:
            return _text(fn(*args))
        except Exception as exc:  # NVML raises one NVMLError subclass per return code
            self.gpu.unknown[key] = f"{fn_name}: {_why(self.nvml, exc)}"
            return None


def _read_nvlinks(nvml: Any, h: Any, gpu: GpuTopology, local_bus_ids: set[str]) -> None:
    cc = gpu.cc
    max_links = getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)
    if cc is not None:
        max_links = min(max_links, nccl_max_nvlinks(cc))
    enabled = getattr(nvml, "NVML_FEATURE_ENABLED", 1)
    switch = getattr(nvml, "NVML_NVLINK_DEVICE_TYPE_SWITCH", 2)
    gpu_type = getattr(nvml, "NVML_NVLINK_DEVICE_TYPE_GPU", 0)
    npu_type = getattr(nvml, "NVML_NVLINK_DEVICE_TYPE_IBMNPU", 1)
    active = 0
    remotes: set[str] = set()
    errors: list[str] = []
    for link in range(max_links):
        try:
            state = nvml.nvmlDeviceGetNvLinkState(h, link)
        except Exception as exc:
            if link == 0 and _is_error(nvml, exc, "NVML_ERROR_NOT_SUPPORTED"):
                # No NVLink on this GPU, or not exposed (a VM without NVLink pass-through):
                # either way NCCL, which asks NVML the same question, sees none.
                gpu.nvlink_active, gpu.nvlink_remote = 0, "none"
                return
            if _is_error(nvml, exc, "NVML_ERROR_INVALID_ARGUMENT") or _is_error(nvml, exc, "NVML_ERROR_NOT_SUPPORTED"):
                continue  # no such link on this GPU
            errors.append(f"link {link}: {_why(nvml, exc)}")
            continue
        if state != enabled:
            gpu.nvlink_down.append(link)
            continue
        active += 1
        kind = "unknown"
        try:
            rtype = nvml.nvmlDeviceGetNvLinkRemoteDeviceType(h, link)
            kind = "switch" if rtype == switch else "gpu" if rtype == gpu_type else "cpu" if rtype == npu_type \
                else "unknown"
        except Exception:
            pass
        if kind in ("gpu", "unknown"):
            try:
                peer = normalize_bus_id(_text(nvml.nvmlDeviceGetNvLinkRemotePciInfo(h, link).busId))
            except Exception:
                peer = None
            if peer and (kind == "gpu" or peer in local_bus_ids):
                kind = "gpu"
                gpu.nvlink_peers[peer] = gpu.nvlink_peers.get(peer, 0) + 1
        remotes.add(kind)
    if errors and active == 0 and not gpu.nvlink_down:
        gpu.unknown["nvlink_active"] = "; ".join(errors[:3])
        return
    if errors:
        gpu.unknown["nvlink_links"] = "; ".join(errors[:3])
    gpu.nvlink_active = active
    if active == 0:
        gpu.nvlink_remote = "none"
    elif len(remotes) == 1:
        gpu.nvlink_remote = next(iter(remotes))
    else:
        gpu.nvlink_remote = "mixed" if "unknown" not in remotes else "unknown"


def _read_nvlink_fields(nvml: Any, h: Any, gpu: GpuTopology) -> None:
    """NVML fields 90/91 (common NVLink speed, link count): a cross-check, not the source."""
    fn = getattr(nvml, "nvmlDeviceGetFieldValues", None)
    if fn is None:
        gpu.unknown["nvml_nvlink_speed_mbps"] = "this nvidia-ml-py has no nvmlDeviceGetFieldValues"
        return
    try:
        values = fn(h, [FIELD_NVLINK_SPEED_MBPS_COMMON, FIELD_NVLINK_LINK_COUNT])
    except Exception as exc:
        gpu.unknown["nvml_nvlink_speed_mbps"] = f"nvmlDeviceGetFieldValues: {_why(nvml, exc)}"
        return
    success = getattr(nvml, "NVML_SUCCESS", 0)
    for v, key in zip(values, ("nvml_nvlink_speed_mbps", "nvml_nvlink_count")):
        if getattr(v, "nvmlReturn", None) == success:
            setattr(gpu, key, int(v.value.uiVal))
        else:
            code = getattr(v, "nvmlReturn", "?")
            name = "NOT_SUPPORTED" if code == getattr(nvml, "NVML_ERROR_NOT_SUPPORTED", 3) else f"return {code}"
            gpu.unknown[key] = f"NVML field {v.fieldId if hasattr(v, 'fieldId') else '?'}: {name}"


_FABRIC_STATES = {0: "not supported", 1: "not started", 2: "in progress", 3: "completed"}  # nvmlGpuFabricState_t


def _read_fabric(nvml: Any, h: Any, gpu: GpuTopology) -> None:
    """The GPU's NVLink fabric as NCCL reads it (init.cc fillInfo, v2.28.9-1: nvmlDeviceGetGpuFabricInfoV
    into a versioned struct; older drivers have only nvmlDeviceGetGpuFabricInfo).  NOT_SUPPORTED is a
    fact (no fabric: a PCIe card, or an NVSwitch box without fabric manager support), not an unknown."""
    for fn_name, struct_name in (("nvmlDeviceGetGpuFabricInfoV", "c_nvmlGpuFabricInfoV_t"),
                                 ("nvmlDeviceGetGpuFabricInfo", "c_nvmlGpuFabricInfo_t")):
        fn, struct = getattr(nvml, fn_name, None), getattr(nvml, struct_name, None)
        if fn is None or struct is None:
            continue
        info = struct()
        try:
            fn(h, ctypes.byref(info))
        except Exception as exc:
            if _is_error(nvml, exc, "NVML_ERROR_NOT_SUPPORTED"):
                gpu.fabric_state = "not supported"
            elif _is_error(nvml, exc, "NVML_ERROR_FUNCTION_NOT_FOUND") and fn_name.endswith("V"):
                continue  # a driver older than the V call: try the plain one
            else:
                gpu.unknown["fabric_state"] = f"{fn_name}: {_why(nvml, exc)}"
            return
        gpu.fabric_state = _FABRIC_STATES.get(int(info.state), f"state {int(info.state)}")
        gpu.fabric_status = int(info.status)
        gpu.fabric_cluster_uuid = bytes(info.clusterUuid).hex()
        gpu.fabric_clique_id = int(info.cliqueId)
        return
    gpu.unknown["fabric_state"] = "this nvidia-ml-py has no nvmlDeviceGetGpuFabricInfo(V)"


def read_gpus(nvml: Any) -> tuple[list[GpuTopology], list[Locality], str]:
    """(GPUs, GPU-pair PCIe localities, '' or why nothing could be read).  Calls nvmlInit and
    nvmlShutdown itself (NVML counts init calls, so this does not disturb another user)."""
    if nvml is None:
        return [], [], "NVML not available"
    try:
        nvml.nvmlInit()
    except Exception as exc:
        return [], [], f"nvmlInit failed: {_why(nvml, exc)}"
    try:
        try:
            count = nvml.nvmlDeviceGetCount()
        except Exception as exc:
            return [], [], f"nvmlDeviceGetCount failed: {_why(nvml, exc)}"
        handles: list[Any] = []
        gpus: list[GpuTopology] = []
        for i in range(count):
            gpu = GpuTopology(index=i)
            try:
                h = nvml.nvmlDeviceGetHandleByIndex(i)
            except Exception as exc:
                gpu.unknown["handle"] = f"nvmlDeviceGetHandleByIndex({i}): {_why(nvml, exc)}"
                gpus.append(gpu)
                handles.append(None)
                continue
            ask = _Asker(nvml, gpu)
            gpu.name = ask("name", "nvmlDeviceGetName", h)
            gpu.uuid = ask("uuid", "nvmlDeviceGetUUID", h)
            pci = ask("pci_bus_id", "nvmlDeviceGetPciInfo", h)
            gpu.pci_bus_id = normalize_bus_id(_text(pci.busId)) if pci is not None else None
            cc = ask("compute_capability", "nvmlDeviceGetCudaComputeCapability", h)
            if cc is not None:
                gpu.compute_capability = f"{cc[0]}.{cc[1]}"
            gpu.pcie.gen = ask("pcie.gen", "nvmlDeviceGetCurrPcieLinkGeneration", h)
            gpu.pcie.gen_max = ask("pcie.gen_max", "nvmlDeviceGetMaxPcieLinkGeneration", h)
            gpu.pcie.width = ask("pcie.width", "nvmlDeviceGetCurrPcieLinkWidth", h)
            gpu.pcie.width_max = ask("pcie.width_max", "nvmlDeviceGetMaxPcieLinkWidth", h)
            gpu.pstate = ask("pstate", "nvmlDeviceGetPerformanceState", h)
            gpu.memory_bus_width = ask("memory_bus_width", "nvmlDeviceGetMemoryBusWidth", h)
            gpu.memory_clock_max_mhz = ask("memory_clock_max_mhz", "nvmlDeviceGetMaxClockInfo", h,
                                           getattr(nvml, "NVML_CLOCK_MEM", NVML_CLOCK_MEM))
            handles.append(h)
            gpus.append(gpu)
        local = {g.pci_bus_id for g in gpus if g.pci_bus_id}
        for gpu, h in zip(gpus, handles):
            if h is None:
                continue
            cc = parse_cc(gpu.compute_capability)
            if cc is not None and cc in NVLINK_BY_CC:
                gpu.nvlink_generation, gpu.nvlink_rate = NVLINK_BY_CC[cc]
            elif cc is not None:
                gpu.unknown["nvlink_rate"] = f"no NVLink generation known for compute capability {cc[0]}.{cc[1]}"
            else:
                gpu.unknown["nvlink_rate"] = "compute capability unknown"
            _read_nvlinks(nvml, h, gpu, local)
            if gpu.nvlink_remote == "switch":
                _read_fabric(nvml, h, gpu)  # only an NVSwitch port can reach another host's GPUs
            if gpu.nvlink_active:
                _read_nvlink_fields(nvml, h, gpu)
            elif gpu.nvlink_active == 0:
                gpu.unknown.pop("nvlink_rate", None)  # no link: its rate does not matter
        pairs = _gpu_pairs(nvml, gpus, handles)
        return gpus, pairs, ""
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass


def _gpu_pairs(nvml: Any, gpus: list[GpuTopology], handles: list[Any]) -> list[Locality]:
    out = []
    fn = getattr(nvml, "nvmlDeviceGetTopologyCommonAncestor", None)
    for i, (ga, ha) in enumerate(zip(gpus, handles)):
        for gb, hb in list(zip(gpus, handles))[i + 1:]:
            if fn is None or ha is None or hb is None:
                out.append(Locality(str(ga.index), str(gb.index), "unknown", "nvml"))
                continue
            try:
                level = fn(ha, hb)
                out.append(Locality(str(ga.index), str(gb.index), _TOPOLOGY_WORDS.get(int(level), "unknown"), "nvml"))
            except Exception:
                out.append(Locality(str(ga.index), str(gb.index), "unknown", "nvml"))
    return out
