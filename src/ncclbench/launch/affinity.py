"""`--cpu-bind numa|core`: run a rank on the CPU cores local to its GPU, or on one of them.

On a host with several NUMA nodes a rank whose thread runs on the far socket
pays a cross-socket hop for every doorbell and completion poll; launchers
(mpirun --bind-to, srun --cpu-bind) fix that for their ranks, the
self-launcher does not.  The cores local to a GPU are the kernel's
`/sys/bus/pci/devices/<domain:bus:device.function>/local_cpulist`.

Off by default: on the machines measured so far (the 1-GPU H100 VM, one NUMA
node whose local list is every core) binding changed nothing beyond the
run-to-run spread (bench/results/stability-h100-2026-11-24/), so there is no
figure yet that justifies binding by default.

`core` goes one step further for small-message timing: the process is bound to
the local cores while NCCL starts its threads (they keep that set), then the
launching thread alone is bound to one local core, a different one per local
rank.  Small-message time is launch-bound, so a thread the scheduler moves, or
runs beside another busy one, moves the figure; one core per launching thread
is what `mpirun --bind-to core` gives nccl-tests' ranks.
"""

from __future__ import annotations

import os
from pathlib import Path

CPU_BIND_CHOICES = ("none", "numa", "core")


def parse_cpulist(text: str) -> set[int]:
    """The kernel's list format: ``0-3,8,10-11`` -> {0, 1, 2, 3, 8, 10, 11}."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        first, last = int(lo), int(hi or lo)
        if last < first:
            raise ValueError(f"bad CPU range {part!r}")
        cpus.update(range(first, last + 1))
    return cpus


def gpu_local_cpus(pci_domain: int, pci_bus: int, pci_device: int, sysfs: str = "/sys") -> set[int] | None:
    """The CPUs local to the GPU at that PCI address (function 0), or None when
    the kernel does not say (no sysfs entry, an empty list)."""
    path = Path(sysfs, "bus/pci/devices", f"{pci_domain:04x}:{pci_bus:02x}:{pci_device:02x}.0", "local_cpulist")
    try:
        cpus = parse_cpulist(path.read_text())
    except (OSError, ValueError):
        return None
    return cpus or None


def format_cpus(cpus: set[int]) -> str:
    """{0, 1, 2, 3, 8} -> ``0-3,8`` (the kernel's own format)."""
    out: list[str] = []
    run: list[int] = []
    for c in sorted(cpus):
        if run and c == run[-1] + 1:
            run.append(c)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [c]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def bind_to_gpu(pci_domain: int, pci_bus: int, pci_device: int, sysfs: str = "/sys") -> str:
    """Bind this process to its GPU's local cores that it may use; the banner note."""
    local = gpu_local_cpus(pci_domain, pci_bus, pci_device, sysfs)
    where = f"{pci_domain:04x}:{pci_bus:02x}:{pci_device:02x}"
    if local is None:
        return f"--cpu-bind numa: the kernel gives no local CPU list for GPU {where}; not bound"
    allowed = os.sched_getaffinity(0)
    cpus = local & allowed
    if not cpus:
        return (f"--cpu-bind numa: none of GPU {where}'s local CPUs ({format_cpus(local)}) is allowed here "
                f"({format_cpus(allowed)}); not bound")
    os.sched_setaffinity(0, cpus)
    return f"bound to CPUs {format_cpus(cpus)} (local to GPU {where}; --cpu-bind numa)"


def core_for_rank(cpus: set[int], local_rank: int) -> int:
    """One core of `cpus` for the process of that local rank: counted from the highest, a
    different core per local rank (cores are reused only past len(cpus) local ranks).  From
    the top because the lowest cores are where the kernel and daemons usually run."""
    ordered = sorted(cpus, reverse=True)
    return ordered[local_rank % len(ordered)]


def bind_thread_to_core(local_rank: int) -> str:
    """Bind the calling thread (only it: Linux affinity is per thread, and NCCL's threads,
    started earlier, keep theirs) to one core of its current set; the banner note."""
    cpus = os.sched_getaffinity(0)
    core = core_for_rank(cpus, local_rank)
    os.sched_setaffinity(0, {core})
    return f"launching thread bound to CPU {core} (local rank {local_rank}; --cpu-bind core)"
