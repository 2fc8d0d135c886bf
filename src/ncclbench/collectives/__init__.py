"""Registry of the eleven collectives, in nccl-tests' binary order."""

from __future__ import annotations

from . import (
    all_gather,
    all_reduce,
    alltoall,
    alltoallv,
    broadcast,
    gather,
    hypercube,
    reduce,
    reduce_scatter,
    scatter,
    sendrecv,
)
from .collective import CallArgs, Collective, Communicator, Counts

COLLECTIVES: dict[str, Collective] = {
    m.COLLECTIVE.name: m.COLLECTIVE
    for m in (all_reduce, all_gather, broadcast, reduce_scatter, reduce, alltoall, alltoallv,
              scatter, gather, sendrecv, hypercube)
}


def lookup(name: str) -> Collective | None:
    """Accept `all_reduce`, `all_reduce_perf`, `all_reduce_perf_mpi` or a path to such a binary."""
    base = name.rsplit("/", 1)[-1]
    for suffix in ("_perf_mpi", "_perf"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
            break
    return COLLECTIVES.get(base)


__all__ = ["COLLECTIVES", "lookup", "Collective", "Communicator", "Counts", "CallArgs"]
