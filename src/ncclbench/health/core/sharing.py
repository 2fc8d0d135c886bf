"""Ranks that share a device, and what a round ran on each: when figures are comparable.

A GPU shared by ranks of different hosts (fake hosts on one machine, each rank its own
process) is time-sliced between their contexts: a pair of ranks on one GPU exchanged
8 bytes in 4.5 ms where pairs on two GPUs took 30 us, and a pair beside a third rank on
its GPU moved 3 % less than beside two (5 fake hosts on 2x H200, 2026-11-28,
bench/results/health-fleet-gpu-2026-11-28-2xH200/).  The CPU backend's ranks on a
crowded machine (more ranks than CPUs, `crowding.py`) share its CPUs the same way.

So each rank's device is known from its set-up answer (the kernel's boot id with the
GPU's PCI address; on a crowded machine, the machine), and each round's groups carry
their *load*: the most ranks the round ran on one of their devices.  The whole-phase
model (`pair_model.py`) compares pairs only at equal load, and a group whose own members
share a device has its latency left unjudged (it measures the time slice).  On a fleet
where every rank has its own GPU - every real cluster - nothing is shared and nothing
here changes a verdict.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from ...core.config import Backend
from .fleet import Fleet
from .scan_schedule import Round


def shared_devices(answers: Mapping[int, Mapping[str, Any]]) -> dict[int, str]:
    """world rank -> its device, for the ranks that share one with another rank: a GPU
    (machine and PCI address) or a crowded machine's CPUs (CPU-backend ranks outnumbering
    them).  Ranks whose machine is unknown are taken to be on devices of their own."""
    device: dict[int, str] = {}
    cpus: dict[str, set[int]] = {}
    ranks_on: Counter[str] = Counter()
    for r, a in answers.items():
        machine = a.get("machine")
        if not machine:
            continue
        if a.get("pci"):
            device[r] = f"gpu {a['pci']} on {machine}"
        elif a.get("cpus") and a.get("backend") == Backend.MPI.value:
            ranks_on[machine] += 1
            cpus.setdefault(machine, set()).update(int(c) for c in a["cpus"])
            device[r] = f"cpus of {machine}"
    crowded = {m for m, n in ranks_on.items() if n > len(cpus[m])}
    count = Counter(device.values())
    return {r: d for r, d in device.items()
            if count[d] > 1 and (not d.startswith("cpus of ") or d.removeprefix("cpus of ") in crowded)}


def round_loads(rnd: Round, fleet: Fleet, devices: Mapping[int, str]) -> tuple[dict[int, int], dict[int, str]]:
    """Per group of the round: its load where above 1 (the most ranks the round ran on one of
    its members' devices), and why its latency is not judged where its own members share one."""
    if not devices:
        return {}, {}
    ranks = [[fleet.rank_of(h, s) for h, s in g.members] for g in rnd.groups]
    on = Counter(devices[r] for members in ranks for r in members if r in devices)
    loads: dict[int, int] = {}
    time_sliced: dict[int, str] = {}
    for i, members in enumerate(ranks):
        mine = [devices[r] for r in members if r in devices]
        load = max((on[d] for d in mine), default=1)
        if load > 1:
            loads[i] = load
        same = [d for d, n in Counter(mine).items() if n > 1]
        if same:
            time_sliced[i] = (f"latency not judged: {Counter(mine)[same[0]]} of its ranks share one device "
                              f"({same[0]}), time-sliced between their processes")
    return loads, time_sliced


def sharing_note(fleet: Fleet, devices: Mapping[int, str]) -> str | None:
    """The report's line naming the hosts whose ranks share a GPU, and what follows (None where
    only crowded CPUs are shared: `crowding.latency_note` says that)."""
    by_device: dict[str, list[str]] = {}
    for r, d in sorted(devices.items()):
        if d.startswith("cpus of "):
            continue  # a crowded machine: crowding.latency_note says it
        h = fleet.where(r)[0]
        names = by_device.setdefault(d, [])
        if fleet.hosts[h] not in names:
            names.append(fleet.hosts[h])
    if not by_device:
        return None
    shown = "; ".join(f"{'+'.join(v)} on {d}" for d, v in list(by_device.items())[:4])
    more = f" (+{len(by_device) - 4} more)" if len(by_device) > 4 else ""
    return (f"ranks share devices ({shown}{more}): pairs are compared only with pairs run at the same load on "
            f"their devices, and a group whose ranks share one has its latency not judged (time-sliced)")
