#!/usr/bin/env python3
"""Dump what NVML answers on this machine, call by call, as JSON (errors kept as
strings): the raw material the topology reader's fakes are checked against.

  python bench/nvml_dump.py > nvml.json
"""

from __future__ import annotations

import json
import sys


def _text(v):
    return v.decode() if isinstance(v, bytes) else v


def _fabric(nv, h) -> dict:
    """nvmlDeviceGetGpuFabricInfoV as NCCL calls it (cluster UUID, clique, state, status)."""
    import ctypes

    info = nv.c_nvmlGpuFabricInfoV_t()
    nv.nvmlDeviceGetGpuFabricInfoV(h, ctypes.byref(info))
    return {"uuid": bytes(info.clusterUuid).hex(), "clique": int(info.cliqueId), "state": int(info.state),
            "status": int(info.status)}


def main() -> int:
    try:
        import pynvml as nv
    except ImportError as exc:
        print(json.dumps({"error": f"nvidia-ml-py not installed: {exc}"}))
        return 0
    out: dict = {}

    def ask(key: str, fn, *args):
        try:
            v = fn(*args)
            if isinstance(v, bytes):
                v = v.decode()
            out_dev[key] = v if isinstance(v, (int, float, str, list, dict, type(None))) else repr(v)
        except Exception as exc:  # NVML answers NOT_SUPPORTED etc. per call
            out_dev[key] = f"error: {type(exc).__name__}: {exc}"

    nv.nvmlInit()
    out["driver"] = nv.nvmlSystemGetDriverVersion()
    out["nvml_version"] = nv.nvmlSystemGetNVMLVersion()
    out["cuda_driver"] = nv.nvmlSystemGetCudaDriverVersion_v2()
    n = nv.nvmlDeviceGetCount()
    out["devices"] = []
    for i in range(n):
        h = nv.nvmlDeviceGetHandleByIndex(i)
        out_dev: dict = {"index": i}
        ask("name", nv.nvmlDeviceGetName, h)
        ask("cuda_cc", nv.nvmlDeviceGetCudaComputeCapability, h)
        ask("pci_bus_id", lambda hh: nv.nvmlDeviceGetPciInfo(hh).busId, h)
        ask("pcie_gen_cur", nv.nvmlDeviceGetCurrPcieLinkGeneration, h)
        ask("pcie_gen_max", nv.nvmlDeviceGetMaxPcieLinkGeneration, h)
        ask("pcie_gen_gpu_max", nv.nvmlDeviceGetGpuMaxPcieLinkGeneration, h)
        ask("pcie_width_cur", nv.nvmlDeviceGetCurrPcieLinkWidth, h)
        ask("pcie_width_max", nv.nvmlDeviceGetMaxPcieLinkWidth, h)
        ask("numa_node", getattr(nv, "nvmlDeviceGetNumaNodeId", lambda hh: "absent"), h)
        ask("uuid", nv.nvmlDeviceGetUUID, h)
        ask("pstate", nv.nvmlDeviceGetPerformanceState, h)
        ask("memory_bus_width", nv.nvmlDeviceGetMemoryBusWidth, h)
        ask("max_clock_mem", nv.nvmlDeviceGetMaxClockInfo, h, getattr(nv, "NVML_CLOCK_MEM", 2))
        ask("fabric", _fabric, nv, h)
        links = {}
        for link in range(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18)):
            entry = {}
            remote_pci = lambda hh, ll: _text(nv.nvmlDeviceGetNvLinkRemotePciInfo(hh, ll).busId)  # noqa: E731
            for key, fn in (("state", nv.nvmlDeviceGetNvLinkState), ("version", nv.nvmlDeviceGetNvLinkVersion),
                            ("remote_type", getattr(nv, "nvmlDeviceGetNvLinkRemoteDeviceType", None)),
                            ("remote_pci_bus_id", remote_pci)):
                if fn is None:
                    continue
                try:
                    entry[key] = fn(h, link)
                except Exception as exc:
                    entry[key] = f"error: {type(exc).__name__}: {exc}"
            links[link] = entry
        out_dev["nvlinks"] = links
        fields = {}
        for fid in (90, 91):
            try:
                vals = nv.nvmlDeviceGetFieldValues(h, [fid])
                v = vals[0]
                fields[fid] = {"nvmlReturn": v.nvmlReturn, "value": int(v.value.uiVal)}
            except Exception as exc:
                fields[fid] = f"error: {type(exc).__name__}: {exc}"
        out_dev["fields"] = fields
        out["devices"].append(out_dev)
    # GPU pairs' PCIe common ancestor (simulation.hosts.RecordedNvml replays it)
    handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
    out["topology"] = {}
    for i in range(n):
        for j in range(i + 1, n):
            try:
                out["topology"][f"{i},{j}"] = int(nv.nvmlDeviceGetTopologyCommonAncestor(handles[i], handles[j]))
            except Exception as exc:
                out["topology"][f"{i},{j}"] = f"error: {type(exc).__name__}: {exc}"
    nv.nvmlShutdown()
    json.dump(out, sys.stdout, indent=1, default=str)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
