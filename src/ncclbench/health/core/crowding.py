"""Ranks crowding one machine's CPUs: when a few-microsecond time is the scheduler's.

The CPU backend's ranks poll while they communicate, so a rank runs only while it holds a
CPU.  With more ranks than CPUs on one machine (fake hosts in namespaces, a test box, an
oversubscribed node), who holds a CPU at a given microsecond is the scheduler's choice: on
the 2-core CI machine, healthy pairs' 8-byte times scattered from 4 us to 0.7 ms (1 % of
them over +1200 % of their round's median, bench/results/health-cpu-noise-2026-11-26.md),
and a latency verdict there convicted a healthy host.  Bandwidth, moved over many
milliseconds, still is judged (against the CPU backend's floors); latency is measured and
reported but not judged, and the report says why.  Each rank reports its machine (the
kernel's boot id, shared by every namespace and container of one kernel) and the CPUs it
may run on; a machine is crowded when its ranks outnumber the union of those CPUs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

BOOT_ID = "/proc/sys/kernel/random/boot_id"


def machine_facts() -> dict[str, Any]:
    """This rank's machine and the CPUs it may run on (empty where the OS does not say)."""
    try:
        with open(BOOT_ID) as f:
            machine = f.read().strip()
    except OSError:
        machine = ""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = []
    return {"machine": machine, "cpus": cpus} if machine and cpus else {}


def crowded_machines(answers: Mapping[int, Mapping[str, Any]]) -> list[tuple[int, int]]:
    """(ranks, CPUs) of each machine whose ranks outnumber its CPUs, from the ranks' set-up answers."""
    ranks: dict[str, int] = {}
    cpus: dict[str, set[int]] = {}
    for a in answers.values():
        m = a.get("machine")
        if not m or not a.get("cpus"):
            continue
        ranks[m] = ranks.get(m, 0) + 1
        cpus.setdefault(m, set()).update(int(c) for c in a["cpus"])
    return sorted((n, len(cpus[m])) for m, n in ranks.items() if n > len(cpus[m]))


def latency_note(crowded: list[tuple[int, int]]) -> str:
    """The report's line saying why latency is not judged on crowded machines."""
    where = "; ".join(f"{n} ranks on {c} CPU(s)" for n, c in crowded)
    return (f"latency not judged (measured and reported): the CPU backend's ranks outnumber their machine's CPUs "
            f"({where}), so a few-microsecond time is the scheduler's, not the transport's; bandwidth is judged, "
            f"each pair against pairs run with as many ranks at once")
