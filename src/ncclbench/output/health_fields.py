"""How a health finding names what it points at, read from a scan document.

The outputs (JUnit, Prometheus metrics, the drain list) and the health scan itself word a
finding alike; the words are defined here, below both, so an output reads a stored scan
document without importing the health tool above it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

GPU_COMPONENT = "gpu"  # a finding's component when it names one GPU (or CPU-backend rank) of a host
GPU = GPU_COMPONENT


def finding_slot(f: Mapping[str, Any]) -> int | None:
    """The slot a GPU finding of a scan document names (`Finding.slot`).  Documents written
    before the field existed carry the label only, which was always "gpu N" then: read once
    here for those, so stored scans keep their per-GPU verdicts."""
    if f.get("component") != GPU:
        return None
    if "slot" in f:
        return None if f["slot"] is None else int(f["slot"])
    word, _, num = str(f.get("detail") or "").partition(" ")
    return int(num) if word == GPU and num.isdigit() else None


def where_text(component: str, detail: str) -> str:
    """What a finding names, for a line: a GPU finding's label alone ("gpu 3", "rank 3"),
    else the component and its detail ("node nic rail 1", "link")."""
    if component == GPU and detail:
        return detail
    return " ".join(x for x in (component, detail) if x)
